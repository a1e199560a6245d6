#!/usr/bin/env bash
# The response cache: a hit against the same model computing (no cache), one server, alternating
# rounds (ROUNDS, default 3) over HTTP at concurrency 1 and 16. nereid-perf sends the same tensors
# every request, so with the cache every request after the first is a hit.
# Models: simple (ONNX Runtime, microseconds) and recommend_model (the native engine's CPU path,
# about a millisecond a row). Usage: bench/response_cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
. bench/common.sh
.venv/bin/python examples/generate_models.py >/dev/null
REPO=$(mktemp -d)
PID=""
trap 'kill $PID 2>/dev/null; wait 2>/dev/null || true; rm -rf "$REPO"' EXIT
for m in simple recommend_model; do
  cp -r "examples/models/$m" "$REPO/$m"
  cp -r "examples/models/$m" "$REPO/${m}_cached"
  sed -i "s/^name: \"$m\"/name: \"${m}_cached\"/" "$REPO/${m}_cached/config.pbtxt"
  echo 'response_cache { enable: true }' >> "$REPO/${m}_cached/config.pbtxt"
done
H=$(free_port)
build/nereid serve --model-repository="$REPO" --http-port="$H" --grpc-port=0 --metrics-port=0 \
  --cache-config=local,size=67108864 >"$REPO/server.log" 2>&1 &
PID=$!
wait_ready "http://localhost:$H/v2/health/ready"
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-16s %-5s %-5s %-7s %10s %10s %10s\n' model conc round cache 'p50 us' 'p99 us' 'infer/s'
for m in simple recommend_model; do
  for c in 1 16; do
    for r in $(seq "${ROUNDS:-3}"); do
      for who in off on; do
        name=$m; [ $who = on ] && name=${m}_cached
        line=$(build/nereid-perf -m "$name" -u "localhost:$H" --concurrency-range $c -p 3000 \
          --warmup 500 -q | grep '^| concurrency')
        printf '%-16s %-5s %-5s %-7s %10s %10s %10s\n' "$m" "$c" "$r" "$who" \
          "$(echo "$line" | cut -d'|' -f5 | xargs)" "$(echo "$line" | cut -d'|' -f8 | xargs)" \
          "$(echo "$line" | cut -d'|' -f4 | xargs)"
      done
    done
  done
done
cache_stats "localhost:$H" recommend_model_cached recommend_model_cached
