#!/usr/bin/env bash
# One binary, one server per flag set, measured in alternating rounds (ROUNDS, default 5) so that
# noise hits each alike: `simple` over PROTOS (default http) at concurrency CONCS (default "1 64"),
# p50 and throughput. Usage: bench/flags_overhead.sh LABEL='FLAGS' LABEL='FLAGS' ...
# (a label with empty flags is the server as it starts by default). Used by energy_overhead.sh
# and trace_overhead.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
. bench/common.sh
.venv/bin/python examples/generate_models.py >/dev/null
LOGS=$(mktemp -d)
LABELS=() PIDS=() HTTP=() GRPC=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$LOGS"' EXIT
for spec in "$@"; do
  label=${spec%%=*}
  read -r -a flags <<<"${spec#*=}"
  h=$(free_port); g=$(free_port)
  build/nereid serve --model-repository=examples/models --http-port="$h" --grpc-port="$g" \
    --metrics-port=0 "${flags[@]}" >"$LOGS/$label.log" 2>&1 &
  LABELS+=("$label") PIDS+=($!) HTTP+=("$h") GRPC+=("$g")
done
for h in "${HTTP[@]}"; do wait_ready "http://localhost:$h/v2/health/ready"; done
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-5s %-5s %-5s %-8s %10s %10s\n' proto conc round server 'p50 us' 'infer/s'
for proto in ${PROTOS:-http}; do
  for c in ${CONCS:-1 64}; do
    for r in $(seq "${ROUNDS:-5}"); do
      for i in "${!LABELS[@]}"; do
        port=${HTTP[$i]}; [ "$proto" = grpc ] && port=${GRPC[$i]}
        line=$(build/nereid-perf -m simple -i "$proto" -u "localhost:$port" --concurrency-range "$c" \
          -p 3000 --warmup 500 -q | grep '^| concurrency')
        printf '%-5s %-5s %-5s %-8s %10s %10s\n' "$proto" "$c" "$r" "${LABELS[$i]}" \
          "$(echo "$line" | cut -d'|' -f5 | xargs)" "$(echo "$line" | cut -d'|' -f4 | xargs)"
      done
    done
  done
done
