#!/usr/bin/env bash
# Energy accounting on vs off, one binary, two servers in alternating rounds (ROUNDS, default 5):
# `simple` over HTTP at concurrency 1 and 64 (p50 and throughput). Usage: bench/energy_overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
. bench/common.sh
.venv/bin/python examples/generate_models.py >/dev/null
start() {  # start LOG ARGS... -> "pid http_port"
  local log=$1 h
  shift
  h=$(free_port)
  build/nereid serve --model-repository=examples/models --http-port="$h" --grpc-port=0 \
    --metrics-port=0 "$@" >"$log" 2>&1 &
  echo "$! $h"
}
LOGS=$(mktemp -d)
read -r PON HON < <(start "$LOGS/on.log")
read -r POFF HOFF < <(start "$LOGS/off.log" --energy-accounting=false)
trap 'kill $PON $POFF 2>/dev/null; wait 2>/dev/null || true; rm -rf "$LOGS"' EXIT
wait_ready "http://localhost:$HON/v2/health/ready"
wait_ready "http://localhost:$HOFF/v2/health/ready"
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-5s %-5s %-4s %10s %10s\n' conc round acct 'p50 us' 'infer/s'
for c in 1 64; do
  for r in $(seq "${ROUNDS:-5}"); do
    for who in on off; do
      port=$HON; [ $who = off ] && port=$HOFF
      line=$(build/nereid-perf -m simple -u "localhost:$port" --concurrency-range $c -p 3000 \
        --warmup 500 -q | grep '^| concurrency')
      printf '%-5s %-5s %-4s %10s %10s\n' "$c" "$r" "$who" "$(echo "$line" | cut -d'|' -f5 | xargs)" \
        "$(echo "$line" | cut -d'|' -f4 | xargs)"
    done
  done
done
