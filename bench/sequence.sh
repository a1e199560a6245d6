#!/usr/bin/env bash
# The sequence batcher under load: throughput and client p99 at 1, 64 and 1,024 concurrent
# sequences (nereid-perf --sequence-length 20 over gRPC: each connection runs one sequence after
# another), for an accumulator with implicit state (ONNX Runtime, OUTPUT = STATE + INPUT) under
# Direct (max_batch_size 8 x 2 instances = 16 slots: the rest wait in the backlog) and Oldest
# (1,024 candidate sequences per instance, batches of up to 64), and for the same model without
# sequence batching (state fed by nobody: a plain request per call) as the floor.
# Usage: bench/sequence.sh   (CONCURRENCY="1 64 1024" ROUNDS=2 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
. bench/common.sh
REPO=$(mktemp -d)
PID=""
trap 'kill $PID 2>/dev/null; wait 2>/dev/null || true; rm -rf "$REPO"' EXIT
.venv/bin/python - "$REPO" <<'EOF'
import os, sys
from onnx import TensorProto, helper
repo = sys.argv[1]
io = lambda n: helper.make_tensor_value_info(n, TensorProto.INT32, ["b", 1])
graph = helper.make_graph([helper.make_node("Add", ["INPUT", "STATE_IN"], ["OUTPUT"]),
                           helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"])], "acc",
                          [io("INPUT"), io("STATE_IN")], [io("OUTPUT"), io("STATE_OUT")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
tensor = 'input [ { name: "%s" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
state = ('state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 '
         'dims: [ 1 ] initial_state: [ { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true '
         'name: "z" } ] } ]')
# IDLE_US (default 60 s): max_sequence_idle_microseconds. With Triton's default of 1 s, 1,024
# client threads on a small machine can leave a sequence idle that long between two of its
# requests, and its next request is refused for want of START (counted as errors).
idle = "max_sequence_idle_microseconds: %s" % os.environ.get("IDLE_US", "60000000")
configs = {
    "acc_direct": "max_batch_size: 8\nsequence_batching { direct { } %s %s }\n" % (idle, state),
    "acc_oldest": "max_batch_size: 64\nsequence_batching { oldest { max_candidate_sequences: 1024 } %s %s }\n" % (idle, state),
    "acc_plain": "max_batch_size: 64\ndynamic_batching { }\n" + tensor % "STATE_IN",
}
for name, extra in configs.items():
    os.makedirs(f"{repo}/{name}/1")
    open(f"{repo}/{name}/1/model.onnx", "wb").write(model)
    open(f"{repo}/{name}/config.pbtxt", "w").write(
        f'name: "{name}"\nbackend: "onnxruntime"\n' + extra + tensor % "INPUT"
        + 'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        + 'instance_group [ { kind: KIND_CPU count: 2 } ]\n')
EOF
G=$(free_port)
build/nereid serve --model-repository="$REPO" --http-port=0 --grpc-port="$G" --metrics-port=0 \
  >"$REPO/server.log" 2>&1 &
PID=$!
for _ in $(seq 100); do grep -q "Started GRPCInferenceService" "$REPO/server.log" && break; sleep 0.2; done
sleep 1
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-11s %-6s %-5s %10s %10s %10s %8s %7s\n' model conc round 'infer/s' 'p50 us' 'p99 us' batch errors
for c in ${CONCURRENCY:-1 64 1024}; do
  for r in $(seq "${ROUNDS:-2}"); do
    for m in acc_direct acc_oldest acc_plain; do
      seq_flag="--sequence-length 20"; [ $m = acc_plain ] && seq_flag=""
      line=$(build/nereid-perf -m $m -i grpc -u "localhost:$G" $seq_flag --concurrency-range "$c" \
        -p 4000 --warmup 1000 -q | grep '^| concurrency')
      field() { echo "$line" | cut -d'|' -f"$1" | xargs; }
      printf '%-11s %-6s %-5s %10s %10s %10s %8s %7s\n' $m "$c" "$r" "$(field 4)" "$(field 5)" \
        "$(field 8)" "$(field 11)" "$(field 10)"
    done
  done
done
if grep -q "must specify the START flag" "$REPO/server.log"; then echo "START errors in the log"; fi
