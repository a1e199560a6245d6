#!/usr/bin/env bash
# Runs Triton's own QA suite qa/L0_http/http_test.py, unchanged, against this build, with the model
# repository its test.sh builds (Triton's generated onnx_zero_* identity models and
# simple_identity). Needs a checkout of github.com/triton-inference-server/server (any path; not
# vendored here) and the venv from scripts/install-deps.sh.
# Usage: scripts/triton_qa.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
cp "$SRC"/qa/common/{gen_qa_identity_models,gen_ensemble_model_utils,gen_common,test_util}.py "$WORK"/
cp "$SRC"/qa/L0_http/http_test.py "$WORK"/
"$PY" -m pip install -q requests ml_dtypes >/dev/null
cd "$WORK"
"$PY" gen_qa_identity_models.py --onnx --models_dir identity >/dev/null
M=models
mkdir -p $M
for m in onnx_zero_1_float32 onnx_zero_1_object onnx_zero_1_float16 onnx_zero_3_float32; do
  cp -r identity/$m $M/
done
# The same edits as qa/L0_http/test.sh.
cp -r $M/onnx_zero_1_object $M/onnx_zero_1_object_1_element
sed -i "s/onnx_zero_1_object/onnx_zero_1_object_1_element/" $M/onnx_zero_1_object_1_element/config.pbtxt
sed -i "0,/-1/{s/-1/1/}" $M/onnx_zero_1_object_1_element/config.pbtxt
cp -r $M/onnx_zero_1_float32 $M/onnx_zero_1_float32_queue
sed -i "s/onnx_zero_1_float32/onnx_zero_1_float32_queue/" $M/onnx_zero_1_float32_queue/config.pbtxt
printf 'dynamic_batching {\n  max_queue_delay_microseconds: 1000000\n  preferred_batch_size: [ 8 ]\n  default_queue_policy { max_queue_size: 1 }\n}\n' \
  >> $M/onnx_zero_1_float32_queue/config.pbtxt
mkdir -p $M/simple_identity/1
cp "$SRC"/docs/examples/model_repository/simple_identity/config.pbtxt $M/simple_identity/
cp "$SRC"/docs/examples/model_repository/simple_identity/1/model.py $M/simple_identity/1/
cp -r $M/simple_identity $M/simple_identity_int64
sed -i "s/TYPE_STRING/TYPE_INT64/; s/simple_identity/simple_identity_int64/" $M/simple_identity_int64/config.pbtxt
# http_test.py talks to localhost:8000, as Triton's default; each of its tests is one case.
mapfile -t TESTS < <(grep -oE "^    def (test_[a-zA-Z0-9_]+)" http_test.py | awk '{print $2}')
serve "$WORK/$M" "$WORK/server.log" --model-control-mode=explicit --load-model='*'
for t in "${TESTS[@]}"; do
  qa_case "$t" "$WORK/client.log" timeout 300 "$PY" http_test.py "HttpTest.$t"
done
stop
qa_summary "L0_http http_test.py"
