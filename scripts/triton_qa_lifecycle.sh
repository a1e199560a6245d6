#!/usr/bin/env bash
# Runs the ONNX-only, identity-backend and file-override cases of Triton's
# qa/L0_lifecycle/lifecycle_test.py, unchanged, against build/nereid with its test.sh's server flags
# and model edits, each on a fresh server:
#   explicit model control: test_model_control, test_model_control_fail, test_model_control_ensemble
#     (Triton's generated onnx_float32_float32_float32 and its ensemble simple_onnx_float32_float32_float32);
#   test_config_override (the same repository named twice, only version 2 present);
#   poll mode: test_dynamic_file_delete (configs deleted under the running server: the models reload
#     with their autofilled config, latest version only), the TensorRT 'plan' model it also uses
#     stood in by the ONNX model under that name;
#   reloads on Triton's identity backend (creation_delay_sec): test_model_availability_on_reload,
#     _2 and _3 over gRPC and HTTP, and test_model_reload_fail (a reload to a KIND_GPU config fails
#     here, no GPU, and the old version keeps serving);
#   file overrides: test_file_override and test_file_override_security (the latter writes
#     /tmp/folderXXXXXX and /tmp/escape_symlink, a link to the root user's home, and checks the root
#     user's ~/.bashrc is untouched, as Triton's test does: run it where that is fine).
# Left out: the cases built on libtorch, OpenVINO, TensorRT or TensorFlow models and GPU limits.
# Usage: scripts/triton_qa_lifecycle.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
T=$(qa_suite L0_lifecycle)
qa_generate gen_qa_models.py --onnx --ensemble
O=onnx_float32_float32_float32
E=simple_onnx_float32_float32_float32
I=identity_zero_1_int32
cd "$T"
run() {  # TEST [ENV=VALUE...] -- server args...: the test against a fresh server
  local test=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  serve "$T/models" "$T/server.log" "$@" || { total=$((total + 1)); echo "FAIL $test: no server"; return 0; }
  qa_case "$test ${envs[*]}" "$T/client.log" env "${envs[@]}" timeout 300 "$PY" lifecycle_test.py "LifeCycleTest.$test"
  stop
}
fresh() { rm -rf "$T/models" "$T"/config.pbtxt.*; mkdir -p "$T/models"; }
explicit=(--model-control-mode=explicit --exit-timeout-secs=5 --strict-model-config=false --strict-readiness=false)

for test in test_model_control test_model_control_fail test_model_control_ensemble; do
  fresh
  cp -r "$WORK/gen/$O" models/
  sed -i "s/max_batch_size:.*/max_batch_size: 1/" models/$O/config.pbtxt
  if [ $test = test_model_control_fail ]; then
    rm models/$O/*/*
  else
    cp -r "$WORK/gen/$E" models/
    sed -i "s/max_batch_size:.*/max_batch_size: 1/" models/$E/config.pbtxt
  fi
  run $test -- "${explicit[@]}"
done

fresh
cp -r "$WORK/gen/$O" models/
rm models/$O/1/* models/$O/3/*
run test_config_override -- --model-repository="$T/models" --model-control-mode=explicit --strict-model-config=false

fresh
cp -r "$WORK/gen/$O" models/
cp -r "$WORK/gen/$O" models/plan_float32_float32_float32
sed -i "s/$O/plan_float32_float32_float32/" models/plan_float32_float32_float32/config.pbtxt
run test_dynamic_file_delete -- --repository-poll-secs=1 --model-control-mode=poll --exit-timeout-secs=5 \
  --strict-model-config=false

reload=(--model-control-mode=explicit --exit-timeout-secs=5 --strict-model-config=false --load-model=$I
        --strict-readiness=false)
for test in test_model_availability_on_reload test_model_availability_on_reload_2 \
            test_model_availability_on_reload_3; do
  for grpc in 1 0; do
    fresh
    cp -r "$SRC/qa/L0_lifecycle/$I" models/
    mkdir -p models/$I/1
    case $test in
      test_model_availability_on_reload_2)
        mkdir -p models/$I/2
        echo "version_policy: { specific { versions: [1] }}" >>models/$I/config.pbtxt
        cp "$SRC/qa/L0_lifecycle/$I/config.pbtxt" config.pbtxt.v2
        echo "version_policy: { specific { versions: [2] }}" >>config.pbtxt.v2 ;;
      test_model_availability_on_reload_3)
        mkdir -p models/$I/2
        echo "version_policy: { specific { versions: [1] }}" >>models/$I/config.pbtxt
        cp models/$I/config.pbtxt config.pbtxt.new ;;
    esac
    if [ $grpc = 1 ]; then run $test TRITONSERVER_USE_GRPC=1 -- "${reload[@]}"; else run $test -- "${reload[@]}"; fi
  done
done

fresh
cp -r "$SRC/qa/L0_lifecycle/$I" models/
mkdir -p models/$I/1 models/$I/2
echo "version_policy: { specific { versions: [1] }}" >>models/$I/config.pbtxt
cp "$SRC/qa/L0_lifecycle/$I/config.pbtxt" config.pbtxt.v2.gpu
echo "version_policy: { specific { versions: [2] }}" >>config.pbtxt.v2.gpu
sed -i "s/KIND_CPU/KIND_GPU/" config.pbtxt.v2.gpu
run test_model_reload_fail -- "${reload[@]}"

fresh
cp -r "$WORK/gen/$O" models/
rm -rf models/$O/1
for test in test_file_override test_file_override_security; do
  run $test -- --model-control-mode=explicit --load-model=$O --strict-model-config=false
done
echo "L0_lifecycle (ONNX, identity and file-override cases): $pass/$total passed"
