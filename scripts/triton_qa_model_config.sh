#!/usr/bin/env bash
# Runs the ensemble cases of Triton's qa/L0_model_config against build/nereid as its test.sh does:
# each autofill_noplatform/ensemble/<case> repository must fail to start with one of the case's
# expected messages in an error log line (^E[0-9]{4}); each autofill_noplatform_success/ensemble
# repository must start and report the expected config (Triton's compare_status.py, unchanged).
# Usage: scripts/triton_qa_model_config.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
QA="$SRC/qa/L0_model_config"
for case in "$QA"/autofill_noplatform/ensemble/*/; do
  name=$(basename "$case")
  rm -rf "$WORK/models" && mkdir "$WORK/models"
  if [ -f "$case/config.pbtxt" ]; then
    cp -r "$case" "$WORK/models/$name"; expected="$WORK/models/$name"
  else
    cp -r "$case"/* "$WORK/models/"; expected="$WORK/models"
  fi
  for m in "$WORK"/models/*/; do mkdir -p "$m/1"; done  # test.sh's version directories
  # The server must refuse to start, logging one of the case's expected messages in an error line.
  log="$WORK/server.log"
  timeout 60 "$NEREID" serve --model-repository="$WORK/models" --strict-model-config=false \
    --http-port=0 --grpc-port=0 --metrics-port=0 >"$log" 2>&1 && started=1 || started=0
  found=0
  for ex in "$expected"/expected*; do
    grep -q "^E[0-9][0-9][0-9][0-9].*$(cat "$ex")" "$log" && found=1 && break
  done
  why=
  [ $started = 1 ] && why="the server started"
  [ $started = 0 ] && [ $found = 0 ] &&
    why="no expected message in: $(grep '^E' "$log" | head -2 | cut -c1-300 | tr '\n' ' ')"
  qa_verdict "$name" "$why"
done
cp "$QA/compare_status.py" "$WORK/"
for case in "$QA"/autofill_noplatform_success/ensemble/*/; do
  name=$(basename "$case")
  rm -rf "$WORK/models" && mkdir "$WORK/models" && cp -r "$case"/* "$WORK/models/"
  for m in "$WORK"/models/*/; do mkdir -p "$m/1"; done
  qa_served "$name (success case)" "$WORK/models" --strict-model-config=false -- \
    env -C "$WORK" "$PY" compare_status.py --expected_dir "models/$name" --model "$name"
done
qa_summary "L0_model_config (ensemble cases)"
