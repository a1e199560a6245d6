# Sourced by the scripts that run Triton's own tests against build/nereid (triton_qa_sequence.sh,
# triton_sequence_examples.sh): ROOT (this checkout), PY (its venv's Python), WORK (a scratch
# directory removed at exit) and PID (the server they start, stopped at exit, INT or TERM).
ROOT=$PWD
PY="$ROOT/.venv/bin/python"
WORK=$(mktemp -d)
PID=
trap 'kill "${PID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM  # the EXIT trap then stops the server too
