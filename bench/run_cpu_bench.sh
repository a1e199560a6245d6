#!/usr/bin/env bash
# CPU benchmarks in one run: SGEMM vs OpenBLAS, then HTTP latency/throughput of the example models on a
# freshly started server. Prints tables; append them to bench/RESULTS.md with the date and machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
scripts/build.sh >/dev/null
.venv/bin/python examples/generate_models.py >/dev/null
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo
echo "## SGEMM (build/bench_gemm)"
build/bench_gemm --reps "${GEMM_REPS:-7}"
echo
PYTHON=.venv/bin/python
. bench/common.sh
PORT=$(free_port)
build/nereid serve --model-repository=examples/models --http-port="$PORT" --allow-metrics=false --log-info=false &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
wait_ready "http://localhost:$PORT/v2/health/ready" 100 || true
echo "## HTTP, binary tensors, keep-alive (build/nereid-perf)"
for m in simple recommend_model; do
  echo "### $m"
  build/nereid-perf -m "$m" -u "localhost:$PORT" --concurrency-range 1:8:x8 -p "${MEASURE_MS:-5000}" -q
done
