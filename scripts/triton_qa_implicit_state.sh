#!/usr/bin/env bash
# Runs the ONNX cases of Triton's qa/L0_implicit_state/implicit_state.py, unchanged, against
# build/nereid as its test.sh does for BACKENDS=onnx: onnx_nobatch_sequence_int32 from
# gen_qa_implicit_models.py, and its _output twin that lists the state among its outputs;
# test_request_output_not_allowed (asking for the state of a model that does not list it is
# Triton's "unexpected inference output") and test_request_output. The suite's other five tests
# use Triton's C++ implicit_state test backend and are left out; its test.sh then runs
# L0_sequence_batcher with implicit state, which scripts/triton_qa_sequence.sh ... implicit covers.
# Usage: scripts/triton_qa_implicit_state.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
T=$(qa_suite L0_implicit_state)
qa_generate gen_qa_implicit_models.py --onnx
M="$T/onnx_models"
mkdir -p "$M"
m=onnx_nobatch_sequence_int32
cp -r "$WORK/gen/$m" "$M/$m"
cp -r "$WORK/gen/$m" "$M/${m}_output"
sed -i "s/^name:.*/name: \"${m}_output\"/" "$M/${m}_output/config.pbtxt"
printf 'output [{ name: "OUTPUT_STATE" \n data_type: TYPE_INT32 \n dims: [ 1 ] }]\n' >>"$M/${m}_output/config.pbtxt"
sed -i "s/kind: KIND_GPU/kind: KIND_CPU/" "$M"/*/config.pbtxt
cd "$T"
export BACKENDS=onnx
serve "$M" "$T/server.log"
for test in test_request_output_not_allowed test_request_output; do
  qa_case $test "$T/client.log" timeout 300 "$PY" implicit_state.py "ImplicitStateTest.$test"
done
stop
echo "L0_implicit_state (onnx cases): $pass/$total passed"
