#!/usr/bin/env bash
# Runs Triton's qa/L0_batch_input/batch_input_test.py, unchanged, against build/nereid as its
# test.sh does for its "onnx" backend: the models of tests/e2e/test_ragged_batching.py (the same
# names, inputs, outputs and configs as Triton's generated qa_ragged_model_repository), on ONNX
# Runtime and then on the native engine, its eight tests against each.
# Usage: scripts/triton_qa_batch_input.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
T=$(qa_suite L0_batch_input)
(cd tests/e2e && "$PY" -c "import pathlib, sys; from test_ragged_batching import build; build(pathlib.Path(sys.argv[1]))" "$T/models")
cd "$T"
for engine in onnxruntime native; do
  qa_served "batch_input_test ($engine)" "$T/models" "--onnx-engine=$engine" -- \
    timeout 300 "$PY" batch_input_test.py
  grep -E "^(OK|FAILED)|^Ran" "$WORK/client.log" | sed "s/^/  $engine: /" || true
done
qa_summary "L0_batch_input"
