#!/usr/bin/env bash
# Runs Triton's Python client examples for sequences, unchanged, against this build: the sync
# (gRPC, HTTP), streaming and asyncio streaming clients, each with integer ids (simple_sequence)
# and with -d (simple_dyna_sequence, and a string id to simple_string_dyna_sequence). The first two
# models are Triton's own (docs/examples/model_repository); Triton's QA builds the third from its
# custom C++ dyna_sequence backend, which Nereid does not load, so here it is an ONNX model with the
# same behaviour: an accumulator in implicit state that adds the string CORRID (cast to an integer)
# on the sequence's last request.
# Usage: scripts/triton_sequence_examples.sh TRITON_SERVER_CHECKOUT TRITON_CLIENT_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER_SRC=${1:?path to a triton-inference-server/server checkout}
CLIENT_SRC=${2:?path to a triton-inference-server/client checkout}
. scripts/triton_harness.sh
M=$WORK/models
mkdir -p "$M"
cp -r "$SERVER_SRC"/docs/examples/model_repository/{simple_sequence,simple_dyna_sequence} "$M"/
S=$M/simple_string_dyna_sequence
mkdir -p "$S/1"
sed 's/simple_dyna_sequence/simple_string_dyna_sequence/; /CONTROL_SEQUENCE_CORRID/{n;s/data_type:.*/data_type: TYPE_STRING/}' \
  "$M/simple_dyna_sequence/config.pbtxt" >"$S/config.pbtxt"
sed -i '0,/sequence_batching {/s//sequence_batching {\n  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]/' "$S/config.pbtxt"
"$PY" - "$S/1/model.onnx" <<'EOF'
import sys
from onnx import TensorProto, helper
io = lambda n, t=TensorProto.INT32: helper.make_tensor_value_info(n, t, ["b", 1])
nodes = [helper.make_node("Cast", ["CORRID"], ["id"], to=TensorProto.INT32),
         helper.make_node("Mul", ["END", "id"], ["last"]),
         helper.make_node("Add", ["INPUT", "STATE_IN"], ["sum"]),
         helper.make_node("Add", ["sum", "last"], ["out"]),
         helper.make_node("Mul", ["READY", "out"], ["OUTPUT"]),
         helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"])]
inputs = [io("INPUT"), io("START"), io("END"), io("READY"), io("CORRID", TensorProto.STRING),
          io("STATE_IN")]
graph = helper.make_graph(nodes, "string_dyna", inputs, [io("OUTPUT"), io("STATE_OUT")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
open(sys.argv[1], "wb").write(model.SerializeToString())
EOF
for f in simple_grpc_sequence_sync_infer_client simple_http_sequence_sync_infer_client \
  simple_grpc_sequence_stream_infer_client simple_grpc_aio_sequence_stream_infer_client; do
  cp "$CLIENT_SRC/src/python/examples/$f.py" "$WORK"/
done
serve "$M" "$WORK/server.log"
pass=0
total=0
cd "$WORK"
for f in simple_grpc_sequence_sync_infer_client simple_http_sequence_sync_infer_client \
  simple_grpc_sequence_stream_infer_client simple_grpc_aio_sequence_stream_infer_client; do
  for flag in "" -d; do
    total=$((total + 1))
    if out=$(timeout 120 "$PY" "$f.py" $flag 2>&1) && echo "$out" | grep -q "^PASS"; then
      pass=$((pass + 1))
      echo "PASS $f $flag"
    else
      echo "FAIL $f $flag: $(echo "$out" | tail -2 | tr '\n' ' ')"
    fi
  done
done
echo "Triton's sequence client examples: $pass/$total passed"
[ "$pass" = "$total" ]
