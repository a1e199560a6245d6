#!/usr/bin/env bash
# Runs Triton's Python client examples for strings, unchanged, against build/nereid:
# simple_{http,grpc}_string_infer_client.py and simple_{http,grpc}_shm_string_client.py on
# Triton's example models (docs/examples/model_repository): simple_string with its own config and,
# as its ONNX file is not in Triton's repository (its QA generates it), an ONNX graph written here
# that does what the example expects (INPUT0 and INPUT1 strings of integers -> OUTPUT0 = sum,
# OUTPUT1 = difference, as strings; served by the onnxruntime backend, which casts strings), and
# simple_identity, Triton's Python model as it is.
# Usage: scripts/triton_string_examples.sh TRITON_SERVER_CHECKOUT TRITON_CLIENT_CHECKOUT
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER_SRC=${1:?path to a triton-inference-server/server checkout}
CLIENT_SRC=${2:?path to a triton-inference-server/client checkout}
. scripts/triton_harness.sh
"$PY" -m pip install -q onnx >/dev/null  # the graph below
M=$WORK/models
mkdir -p "$M/simple_string/1"
cp "$SERVER_SRC/docs/examples/model_repository/simple_string/config.pbtxt" "$M/simple_string/"
cp -r "$SERVER_SRC/docs/examples/model_repository/simple_identity" "$M/"
"$PY" - "$M/simple_string/1/model.onnx" <<'PY'
import sys
from onnx import TensorProto, helper, save
cast = lambda src, dst, to: helper.make_node("Cast", [src], [dst], to=to)
nodes = [cast("INPUT0", "a", TensorProto.INT32), cast("INPUT1", "b", TensorProto.INT32),
         helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Sub", ["a", "b"], ["diff"]),
         cast("sum", "OUTPUT0", TensorProto.STRING), cast("diff", "OUTPUT1", TensorProto.STRING)]
io = lambda name: helper.make_tensor_value_info(name, TensorProto.STRING, ["N", 16])
graph = helper.make_graph(nodes, "simple_string", [io("INPUT0"), io("INPUT1")],
                          [io("OUTPUT0"), io("OUTPUT1")])
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PY
serve "$M" "$WORK/server.log"
example() {  # FILE: the example exits 0 and says PASS
  local out rc=0
  out=$(timeout 120 "$PY" "$CLIENT_SRC/src/python/examples/$1" 2>&1) || rc=$?
  echo "$out"
  [ $rc = 0 ] && grep -q PASS <<<"$out" || { echo "FAIL: exit status $rc"; return 1; }
}
for e in simple_http_string_infer_client.py simple_grpc_string_infer_client.py \
         simple_http_shm_string_client.py simple_grpc_shm_string_client.py; do
  qa_case $e "$WORK/client.log" example $e
done
stop
echo "Triton's string client examples: $pass/$total passed"
