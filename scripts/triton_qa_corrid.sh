#!/usr/bin/env bash
# Runs Triton's qa/L0_sequence_corrid_batcher/sequence_corrid_batcher_test.py, unchanged, against
# this build as its test.sh does for ONNX: test_skip_batch on Triton's generated
# onnx_dyna_sequence_int32 (Direct, max_batch_size 1, 4 instances, TRITONSERVER_DELAY_SCHEDULER=12;
# the ONNX model also stands in for the TensorRT twin the test runs too),
# then test_corrid_data_type on Triton's Python add_sub model with a CORRID control of each type.
# Usage: scripts/triton_qa_corrid.sh TRITON_SERVER_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?path to a triton-inference-server/server checkout}
. scripts/triton_harness.sh
cp "$SRC"/qa/common/*.py "$SRC"/qa/L0_sequence_corrid_batcher/sequence_corrid_batcher_test.py "$WORK"/
"$PY" -m pip install -q onnx >/dev/null
cd "$WORK"
"$PY" gen_qa_dyna_sequence_models.py --onnx --models_dir dyna >/dev/null
mkdir -p models4
# The test also runs the TensorRT twin plan_dyna_sequence_int32 (no TensorRT here): the ONNX model
# stands in under that name, the same graph and controls.
cp -r dyna/onnx_dyna_sequence_int32 dyna/plan_dyna_sequence_int32
sed -i "s/onnx_dyna_sequence_int32/plan_dyna_sequence_int32/" dyna/plan_dyna_sequence_int32/config.pbtxt
for m in onnx_dyna_sequence_int32 plan_dyna_sequence_int32; do
  cp -r dyna/$m models4/
  (cd models4/$m &&
    sed -i -z "s/oldest.*{.*}.*control_input/control_input/" config.pbtxt &&
    sed -i "s/^max_batch_size:.*/max_batch_size: 1/" config.pbtxt &&
    sed -i "s/kind: KIND_GPU/kind: KIND_CPU/; s/kind: KIND_CPU/kind: KIND_CPU\\ncount: 4/" config.pbtxt)
done

run() {  # REPOSITORY TEST LABEL
  qa_served "$2 $3" "$WORK/$1" -- \
    timeout 300 "$PY" sequence_corrid_batcher_test.py "SequenceCorrIDBatcherTest.$2"
}
export NO_BATCHING=0 MODEL_INSTANCES=4 TRITONSERVER_BACKLOG_DELAY_SCHEDULER=0 TRITONSERVER_DELAY_SCHEDULER=12
run models4 test_skip_batch "onnx_dyna_sequence_int32 (and its plan stand-in)"
unset TRITONSERVER_BACKLOG_DELAY_SCHEDULER TRITONSERVER_DELAY_SCHEDULER
mkdir -p corrid_data_type/add_sub/1
cp "$SRC"/qa/python_models/add_sub/model.py corrid_data_type/add_sub/1/
for t in TYPE_STRING TYPE_UINT32 TYPE_INT32 TYPE_UINT64 TYPE_INT64; do
  cp "$SRC"/qa/python_models/add_sub/config.pbtxt corrid_data_type/add_sub/
  printf 'sequence_batching { control_input [{ name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: %s }] }] }\n' \
    "$t" >>corrid_data_type/add_sub/config.pbtxt
  export TRITONSERVER_CORRID_DATA_TYPE=$t
  run corrid_data_type test_corrid_data_type "$t"
done
qa_summary "L0_sequence_corrid_batcher (onnx + python add_sub)"
