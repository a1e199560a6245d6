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
pass=0; total=0
for case in "$QA"/autofill_noplatform/ensemble/*/; do
  name=$(basename "$case")
  total=$((total + 1))
  rm -rf "$WORK/models" && mkdir "$WORK/models"
  if [ -f "$case/config.pbtxt" ]; then
    cp -r "$case" "$WORK/models/$name"; expected="$WORK/models/$name"
  else
    cp -r "$case"/* "$WORK/models/"; expected="$WORK/models"
  fi
  for m in "$WORK"/models/*/; do mkdir -p "$m/1"; done  # test.sh's version directories
  log="$WORK/server.log"
  timeout 60 "$ROOT/build/nereid" serve --model-repository="$WORK/models" --strict-model-config=false \
    --http-port=0 --grpc-port=0 --metrics-port=0 >"$log" 2>&1 && started=1 || started=0
  found=0
  for ex in "$expected"/expected*; do
    grep -q "^E[0-9][0-9][0-9][0-9].*$(cat "$ex")" "$log" && found=1 && break
  done
  if [ $started = 0 ] && [ $found = 1 ]; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    echo "FAIL $name (started=$started): $(grep '^E' "$log" | head -2 | cut -c1-300 | tr '\n' ' ')"
  fi
done
cp "$QA/compare_status.py" "$WORK/"
for case in "$QA"/autofill_noplatform_success/ensemble/*/; do
  name=$(basename "$case")
  total=$((total + 1))
  rm -rf "$WORK/models" && mkdir "$WORK/models" && cp -r "$case"/* "$WORK/models/"
  for m in "$WORK"/models/*/; do mkdir -p "$m/1"; done
  if serve "$WORK/models" "$WORK/server.log" --strict-model-config=false &&
     (cd "$WORK" && "$PY" compare_status.py --expected_dir "models/$name" --model "$name" >"$WORK/client.log" 2>&1); then
    pass=$((pass + 1)); echo "PASS $name (success case)"
  else
    echo "FAIL $name (success case): $(tail -5 "$WORK/client.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
  fi
  stop
done
echo "L0_model_config (ensemble cases): $pass/$total passed"
