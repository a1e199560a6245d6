#!/usr/bin/env bash
# Dynamic batching benchmark on recommend_model (CPU): the same model served unbatched, with hand-tuned
# queue delays, and in Nereid's latency-goal mode, all from one server, each driven by `nereid perf`
# over a concurrency sweep. Prints one table per configuration and a summary.
#   bench/batching.sh [concurrency-range, default 1:64:x2]   (MEASURE_MS, WARMUP_MS, GOAL_US override)
set -euo pipefail
cd "$(dirname "$0")/.."
RANGE="${1:-1:64:x2}"
MEASURE_MS="${MEASURE_MS:-3000}"
WARMUP_MS="${WARMUP_MS:-1000}"
GOAL_US="${GOAL_US:-5000}"
DELAYS="${DELAYS:-0 100 500 1000 2000}"
scripts/install-deps.sh >/dev/null
scripts/build.sh >/dev/null
.venv/bin/python examples/generate_models.py >/dev/null

REPO=$(mktemp -d)
OUT=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$REPO"' EXIT
make_model() {  # name, extra config
  mkdir -p "$REPO/$1/1"
  ln -s "$PWD/examples/models/recommend_model/1/model.onnx" "$REPO/$1/1/model.onnx"
  cat > "$REPO/$1/config.pbtxt" <<CFG
name: "$1"
backend: "native"
max_batch_size: 32
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 1024 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]
instance_group [ { kind: KIND_CPU, count: 2 } ]
$2
CFG
}
make_model unbatched ""
for d in $DELAYS; do make_model "delay_$d" "dynamic_batching { max_queue_delay_microseconds: $d }"; done
make_model goal "dynamic_batching { }
parameters { key: \"nereid.latency_goal_us\" value: { string_value: \"$GOAL_US\" } }"

PORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
build/nereid serve --model-repository="$REPO" --http-port="$PORT" --allow-metrics=false --log-info=false &
SERVER=$!
for _ in $(seq 100); do curl -sf "localhost:$PORT/v2/health/ready" >/dev/null && break; sleep 0.1; done

echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "goal: p99 <= ${GOAL_US} us; windows: ${WARMUP_MS} ms warm-up + ${MEASURE_MS} ms measured per step"
for m in unbatched $(for d in $DELAYS; do echo "delay_$d"; done) goal; do
  echo
  echo "### $m"
  build/nereid perf -m "$m" -u "localhost:$PORT" --concurrency-range "$RANGE" -p "$MEASURE_MS" \
    --warmup "$WARMUP_MS" -q -f "$OUT/$m.csv"
done
echo
.venv/bin/python bench/summarize_batching.py "$OUT" "$GOAL_US" $DELAYS
