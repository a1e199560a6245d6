#!/usr/bin/env bash
# Runs the file-override cases of Triton's qa/L0_lifecycle/lifecycle_test.py, unchanged, against
# build/nereid as its test.sh does: test_file_override and test_file_override_security on Triton's
# generated onnx_float32_float32_float32 (versions 2 and 3; explicit mode, loaded at start).
# test_file_override_security writes /tmp/folderXXXXXX and /tmp/escape_symlink (a link to the root user's home)
# and checks the root user's ~/.bashrc is untouched, as Triton's test does: run it where that is fine.
# Usage: scripts/triton_qa_lifecycle.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
"$PY" -m pip install -q onnx >/dev/null
T=$(qa_suite L0_lifecycle)
(cd "$WORK/qa/common" && "$PY" gen_qa_models.py --onnx --models_dir "$WORK/gen" >/dev/null)
mkdir -p "$T/models"
cp -r "$WORK/gen/onnx_float32_float32_float32" "$T/models/"
rm -rf "$T/models/onnx_float32_float32_float32/1"
cd "$T"
pass=0; total=0
serve "$T/models" "$T/server.log" --model-control-mode=explicit \
  --load-model=onnx_float32_float32_float32 --strict-model-config=false
for test in test_file_override test_file_override_security; do
  total=$((total + 1))
  if timeout 300 "$PY" lifecycle_test.py "LifeCycleTest.$test" >"$T/client.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $test"
  else
    echo "FAIL $test: $(grep -E "Error|assert|FAIL" "$T/client.log" | head -3 | cut -c1-250 | tr '\n' ' ')"
    [ -n "${VERBOSE:-}" ] && tail -30 "$T/client.log"
  fi
done
stop
echo "L0_lifecycle (file overrides): $pass/$total passed"
