#!/usr/bin/env bash
# The response cache beside Triton's: PyPI's nvidia-pytriton ships a real tritonserver with the
# Python backend and Triton's local cache library. Both servers serve the same model directories:
# `simple` as a Python model (bench/triton_simple/model.py, one instance) without a cache, and
# `simple_cached`, the same with `response_cache { enable: true }`; both run with a 64 MiB local
# cache. nereid-perf sends the same tensors every request, so every request to simple_cached after
# the first is a hit: the hit path against the model computing, on each server. Rounds (ROUNDS,
# default 3) alternate the servers and models; HTTP and gRPC at concurrency 1 and 16.
#   bench/response_cache_vs_triton.sh     (MEASURE_MS, WARMUP_MS override the windows)
set -euo pipefail
cd "$(dirname "$0")/.."
MEASURE_MS="${MEASURE_MS:-3000}"
WARMUP_MS="${WARMUP_MS:-500}"
PYTHON=.venv/bin/python
. bench/triton_env.sh
. bench/common.sh
PYVER=$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/models" "$WORK/backends"
triton_python_backend "$WORK/backends"
for m in simple simple_cached; do
  mkdir -p "$WORK/models/$m/1"
  cp bench/triton_simple/model.py "$WORK/models/$m/1/model.py"
  sed -e 's/^platform: .*/backend: "python"/' -e "s/^name: .*/name: \"$m\"/" \
    examples/models/simple/config.pbtxt >"$WORK/models/$m/config.pbtxt"
done
echo 'response_cache { enable: true }' >>"$WORK/models/simple_cached/config.pbtxt"
T_HTTP=$(free_port); T_GRPC=$(free_port); N_HTTP=$(free_port); N_GRPC=$(free_port)
LD_LIBRARY_PATH="$TRITON_LIBS:${LD_LIBRARY_PATH:-}" "$TRITON_HOME/bin/tritonserver" \
  --model-repository="$WORK/models" --backend-directory="$WORK/backends" \
  --cache-directory="$TRITON_HOME/caches" --cache-config=local,size=67108864 \
  --http-port="$T_HTTP" --grpc-port="$T_GRPC" --allow-metrics=false --log-info=false \
  >"$WORK/triton.log" 2>&1 &
PIDS+=($!)
NEREID_PYTHON="$(realpath -s "$(command -v "$PYTHON")")" build/nereid serve \
  --model-repository="$WORK/models" --cache-config=local,size=67108864 --http-port="$N_HTTP" \
  --grpc-port="$N_GRPC" --allow-metrics=false --log-info=false >"$WORK/nereid.log" 2>&1 &
PIDS+=($!)
for p in $T_HTTP $N_HTTP; do
  for m in simple simple_cached; do
    wait_ready "http://localhost:$p/v2/models/$m/ready" || { tail -20 "$WORK"/*.log; exit 1; }
  done
done
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "Triton: tritonserver from PyTriton $TRITON_VERSION (Python backend, local cache); Nereid: the same model directories"
printf '%-5s %-5s %-5s %-7s %-14s %10s %10s %10s\n' proto conc round server model 'p50 us' 'p99 us' 'infer/s'
for proto in http grpc; do
  for c in 1 16; do
    for r in $(seq "${ROUNDS:-3}"); do
      for server in triton nereid; do
        if [ $server = triton ]; then port=$([ $proto = http ] && echo $T_HTTP || echo $T_GRPC)
        else port=$([ $proto = http ] && echo $N_HTTP || echo $N_GRPC); fi
        for m in simple simple_cached; do
          line=$(build/nereid-perf -m "$m" -i $proto -u "localhost:$port" --concurrency-range "$c" \
            -p "$MEASURE_MS" --warmup "$WARMUP_MS" -q | grep '^| concurrency')
          printf '%-5s %-5s %-5s %-7s %-14s %10s %10s %10s\n' $proto "$c" "$r" $server $m \
            "$(echo "$line" | cut -d'|' -f5 | xargs)" "$(echo "$line" | cut -d'|' -f8 | xargs)" \
            "$(echo "$line" | cut -d'|' -f4 | xargs)"
        done
      done
    done
  done
done
for server in triton nereid; do
  cache_stats "localhost:$([ $server = triton ] && echo $T_HTTP || echo $N_HTTP)" simple_cached \
    "$server simple_cached"
done
