#!/usr/bin/env bash
# Runs Triton's Python client examples, unchanged, against build/nereid as Triton's
# qa/L0_http/test.sh and qa/L0_grpc/test.sh run them: the model-control examples on Triton's
# example repository in explicit mode (seven models: simple, simple_int8, simple_identity,
# simple_sequence, simple_dyna_sequence, simple_string and simple_string_dyna_sequence, which
# Triton's QA makes from its C++ dyna_sequence test backend, here Nereid's built-in one; the gRPC
# example counts eight, with repeat_int32), then,
# with --allow-client-shm=true, the explicit-content, system shared-memory, decoupled repeat
# (Triton's repeat_int32 model on the repeat backend) and sequence examples, the -d variants on the
# dyna_sequence models. Prints pass/total.
# Usage: scripts/triton_client_examples.sh TRITON_SERVER_CHECKOUT TRITON_CLIENT_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER_SRC=${1:?path to a triton-inference-server/server checkout}
CLIENT_SRC=${2:?path to a triton-inference-server/client checkout}
. scripts/triton_harness.sh
M=$WORK/models
mkdir -p "$M"
for m in simple simple_int8 simple_identity simple_sequence simple_dyna_sequence simple_string; do
  cp -r "$SERVER_SRC/docs/examples/model_repository/$m" "$M/"
done
# As qa/L0_grpc/test.sh makes it.
S=$M/simple_string_dyna_sequence
cp -r "$M/simple_dyna_sequence" "$S"
sed -i "s/simple_dyna_sequence/simple_string_dyna_sequence/g" "$S/config.pbtxt"
sed -i "s/^platform: .*/backend: \"dyna_sequence\"/g" "$S/config.pbtxt"
sed -i "/CONTROL_SEQUENCE_CORRID/{n;s/data_type:.*/data_type: TYPE_STRING/}" "$S/config.pbtxt"
rm -f "$S/1/model.onnx"
EX=$CLIENT_SRC/src/python/examples
# The HTTP example counts seven models in the repository, the gRPC one eight: the eighth is
# Triton's repeat_int32, which the later examples use.
serve "$M" "$WORK/control.log" --model-control-mode=explicit
qa_case simple_http_model_control.py "$WORK/client.log" example simple_http_model_control.py -v
stop
mkdir -p "$M/repeat_int32/1"
cp "$SERVER_SRC/src/test/models/repeat_int32/config.pbtxt" "$M/repeat_int32/"
serve "$M" "$WORK/control.log" --model-control-mode=explicit
qa_case simple_grpc_model_control.py "$WORK/client.log" example simple_grpc_model_control.py -v
stop
serve "$M" "$WORK/server.log" --allow-client-shm=true
for e in grpc_explicit_byte_content_client.py grpc_explicit_int_content_client.py \
         grpc_explicit_int8_content_client.py simple_grpc_custom_repeat.py \
         simple_http_shm_client.py simple_grpc_shm_client.py \
         simple_http_shm_string_client.py simple_grpc_shm_string_client.py; do
  qa_case "$e" "$WORK/client.log" example "$e"
done
for e in simple_grpc_sequence_sync_infer_client.py simple_http_sequence_sync_infer_client.py \
         simple_grpc_sequence_stream_infer_client.py simple_grpc_aio_sequence_stream_infer_client.py; do
  for flag in "" -d; do
    qa_case "$e $flag" "$WORK/client.log" example "$e" $flag
  done
done
stop
echo "Triton's client examples: $pass/$total passed"
[ "$pass" = "$total" ]
