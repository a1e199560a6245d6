# Sourced by the scripts that run Triton's own tests against build/nereid (triton_qa.sh,
# triton_qa_sequence.sh,
# triton_qa_corrid.sh, triton_client_examples.sh, triton_qa_ensemble.sh,
# triton_qa_model_config.sh, triton_qa_lifecycle.sh, triton_qa_rate_limiter.sh,
# triton_qa_response_cache.sh, triton_qa_dyna_sequence.sh, triton_qa_implicit_state.sh,
# triton_string_examples.sh, triton_ensemble_examples.sh, triton_image_examples.sh): ROOT (this
# checkout), PY (its venv's Python), WORK (a scratch directory removed at exit), PID (the server
# they start, stopped at exit, INT or TERM), serve / stop, qa_suite, qa_generate, and the tally of
# cases (pass, total) with qa_case, qa_served, qa_refused, qa_verdict and qa_summary: no script
# starts a server or counts a case any other way.
ROOT=$PWD
# (HARNESS_PYTHON and NEREID_BINARY elsewhere: the device machine has no venv and no build/.)
PY="${HARNESS_PYTHON:-$ROOT/.venv/bin/python}"
NEREID="${NEREID_BINARY:-$ROOT/build/nereid}"
WORK=$(mktemp -d)
PID=
trap 'kill "${PID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM  # the EXIT trap then stops the server too

# serve REPOSITORY LOG [ARGS...]: starts build/nereid on Triton's default ports and waits until it
# is ready; fails when it is not, or when the server answering on port 8000 is not this one.
serve() {
  local repository=$1 log=$2
  shift 2
  NEREID_PYTHON="$PY" "$NEREID" serve --model-repository="$repository" "$@" >"$log" 2>&1 &
  PID=$!
  for _ in $(seq 150); do
    kill -0 "$PID" 2>/dev/null || break
    curl -sf localhost:8000/v2/health/ready >/dev/null && return 0
    sleep 0.2
  done
  echo "server on $repository did not become ready:"
  tail -20 "$log"
  return 1
}
# qa_suite SUITE: copies Triton's qa/common and qa/SUITE (from $SRC) into $WORK/qa and prints the
# suite's copy, where its test runs (its imports reach ../common).
qa_suite() {
  mkdir -p "$WORK/qa"
  cp -r "$SRC/qa/common" "$SRC/qa/$1" "$WORK/qa/"
  echo "$WORK/qa/$1"
}
# example FILE [ARGS...]: Triton's client example $EX/FILE (EX set by the script) exits 0 and
# prints PASS.
example() {
  local out rc=0
  out=$(cd "$WORK" && timeout 120 "$PY" "$EX/$1" "${@:2}" 2>&1) || rc=$?
  echo "$out"
  [ $rc = 0 ] && grep -q PASS <<<"$out" || { echo "FAIL: exit status $rc"; return 1; }
}
stop() {
  kill "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null || true
  PID=
}
# qa_generate GENERATOR ARGS...: runs Triton's qa/common/GENERATOR (qa_suite copied it) with ARGS,
# the models written to $WORK/gen.
qa_generate() {
  "$PY" -m pip install -q onnx >/dev/null
  (cd "$WORK/qa/common" && "$PY" "$@" --models_dir "$WORK/gen" >/dev/null)
}
# The scripts' tally: qa_case and qa_refused count each case in total and each success in pass.
pass=0; total=0
# qa_case LABEL LOG COMMAND...: COMMAND (its output in LOG) must succeed. Prints PASS, or FAIL with
# the lines of LOG that say why (VERBOSE=1: its last 30 lines too).
qa_case() {
  local label=$1 log=$2
  shift 2
  total=$((total + 1))
  if "$@" >"$log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $label"
  else
    echo "FAIL $label: $(grep -E "Error|assert|FAIL" "$log" | head -3 | cut -c1-250 | tr '\n' ' ')"
    if [ -n "${VERBOSE:-}" ]; then tail -30 "$log"; fi
  fi
}
# qa_served LABEL REPOSITORY [SERVER_ARGS...] -- COMMAND...: one case against a server of its own:
# serves REPOSITORY (with SERVER_ARGS; its log in $WORK/server.log), runs COMMAND as qa_case does
# (its output in $WORK/client.log), stops the server. A server that does not start fails the case.
# DURATION is then the command's seconds.
qa_served() {
  local label=$1 repository=$2
  shift 2
  local args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  DURATION=0
  if ! serve "$repository" "$WORK/server.log" "${args[@]}"; then
    total=$((total + 1)); echo "FAIL $label: the server did not start"
    return 0
  fi
  local start=$SECONDS
  qa_case "$label" "$WORK/client.log" "$@"
  DURATION=$((SECONDS - start))
  stop
}
# qa_verdict LABEL WHY: a case the script decides itself: passed when WHY is empty, else failed
# with WHY.
qa_verdict() {
  total=$((total + 1))
  if [ -z "$2" ]; then
    pass=$((pass + 1)); echo "PASS $1"
  else
    echo "FAIL $1: $2"
  fi
}
# qa_summary SUITE: the tally line every script ends with.
qa_summary() { echo "$1: $pass/$total passed"; }
# qa_refused MESSAGE REPOSITORY ARGS...: build/nereid must fail to start on REPOSITORY with ARGS,
# logging MESSAGE (a fixed string).
qa_refused() {
  local message=$1 repository=$2
  shift 2
  total=$((total + 1))
  if timeout 60 "$NEREID" serve --model-repository="$repository" --http-port=0 \
       --grpc-port=0 --metrics-port=0 "$@" >"$WORK/refused.log" 2>&1; then
    echo "FAIL load error ($*): the server started"
  elif grep -qF "$message" "$WORK/refused.log"; then
    pass=$((pass + 1)); echo "PASS load error: $message"
  else
    echo "FAIL load error ($*): $(grep '^E' "$WORK/refused.log" | head -2 | cut -c1-250 | tr '\n' ' ')"
  fi
}
