#!/usr/bin/env bash
# Dynamic batching benchmark on recommend_model (CPU): the same model served unbatched, with hand-tuned
# queue delays, and in Nereid's latency-goal mode, all from one server, each driven by `nereid-perf`
# over a concurrency sweep (interleaved). Prints one table per configuration and a summary.
#   bench/batching.sh [concurrency-range, default 1:64:x2]   (MEASURE_MS, WARMUP_MS, GOAL_US override)
set -euo pipefail
cd "$(dirname "$0")/.."
RANGE="${1:-1:64:x2}"
MEASURE_MS="${MEASURE_MS:-3000}"
WARMUP_MS="${WARMUP_MS:-1000}"
GOAL_US="${GOAL_US:-5000}"
DELAYS="${DELAYS:-0 100 500 1000 2000}"
# Prebuilt binaries (e.g. on the device machine) skip the build: NEREID, MODEL_ONNX, PYTHON, *_CPUS.
NEREID="${NEREID:-build/nereid}"
MODEL_ONNX="${MODEL_ONNX:-$PWD/examples/models/recommend_model/1/model.onnx}"
PYTHON="${PYTHON:-.venv/bin/python}"
SERVER_CPUS="${SERVER_CPUS:-}"  # e.g. 0-3: pin the server ...
CLIENT_CPUS="${CLIENT_CPUS:-}"  # ... and the load generator apart
SERVER_RUN=("$NEREID")
CLIENT_RUN=("$NEREID-perf")
[ -n "$SERVER_CPUS" ] && SERVER_RUN=(taskset -c "$SERVER_CPUS" "$NEREID")  # taskset execs: $! stays the server
[ -n "$CLIENT_CPUS" ] && CLIENT_RUN=(taskset -c "$CLIENT_CPUS" "$NEREID-perf")
if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/install-deps.sh >/dev/null
  scripts/build.sh >/dev/null
  .venv/bin/python examples/generate_models.py >/dev/null
fi

REPO=$(mktemp -d)
CSV_DIR=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; wait 2>/dev/null; rm -rf "$REPO" "$CSV_DIR"' EXIT
make_model() {  # name, extra config
  mkdir -p "$REPO/$1/1"
  ln -s "$MODEL_ONNX" "$REPO/$1/1/model.onnx"
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

. bench/common.sh
PORT=$(free_port)
"${SERVER_RUN[@]}" serve --model-repository="$REPO" --http-port="$PORT" --allow-metrics=false \
  --log-info=false ${SERVER_ARGS:-} &
SERVER=$!
wait_ready "http://localhost:$PORT/v2/health/ready" 100 || true

echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores (server on ${SERVER_CPUS:-any}, client on ${CLIENT_CPUS:-any}), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "goal: p99 <= ${GOAL_US} us; windows: ${WARMUP_MS} ms warm-up + ${MEASURE_MS} ms measured per step"
# Interleaved: at each concurrency every configuration runs once, back to back, so drift on a shared
# host (other tenants, clocks) hits all configurations alike instead of the ones measured last.
MODELS_RUN="unbatched $(for d in $DELAYS; do echo "delay_$d"; done) goal"
LEVELS=$("$PYTHON" - "$RANGE" <<'PY'
import sys
start, end, step = (sys.argv[1].split(":") + ["x2"])[:3]
c, end = int(start), int(end)
while c <= end:
    print(c)
    c = c * int(step[1:]) if step.startswith("x") else c + int(step)
PY
)
for c in $LEVELS; do
  for m in $MODELS_RUN; do
    "${CLIENT_RUN[@]}" -m "$m" -u "localhost:$PORT" --concurrency-range "$c" -p "$MEASURE_MS" \
      --warmup "$WARMUP_MS" -q -f "$CSV_DIR/$m.$c.csv" > /dev/null
    [ -f "$CSV_DIR/$m.csv" ] || head -1 "$CSV_DIR/$m.$c.csv" > "$CSV_DIR/$m.csv"
    tail -n +2 "$CSV_DIR/$m.$c.csv" >> "$CSV_DIR/$m.csv"
  done
  echo "concurrency $c done" >&2
done
echo
"$PYTHON" bench/summarize_batching.py "$CSV_DIR" "$GOAL_US" $DELAYS
