#!/usr/bin/env bash
# Runs on the lent device machine (16 cores; its GPU unused here): Nereid's CPU serving measured with
# the real perf_analyzer (which needs glibc >= 2.38, so it cannot run on our Debian 12 machines) next to
# `nereid-perf` on the same runs, Triton vs Nereid driven by perf_analyzer (SECTIONS=triton, carry made
# with TRITON=1), then the batching benchmark with server and client on separate cores.
# Expects .devcarry/ made by scripts/device_carry.sh; writes logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
C=.devcarry
export LD_LIBRARY_PATH="$PWD/$C/lib:${LD_LIBRARY_PATH:-}"
NEREID="$PWD/$C/bin/nereid"
PA="$PWD/$C/bin/perf_analyzer"
[ -x "$NEREID" ] || tar -C "$C" -xJf "$C/bundle.tar.xz"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(ldd --version | head -1)"
taskset -c 0-3 "$NEREID" serve --model-repository="$PWD/$C/models" --http-port=8000 --grpc-port=8001 \
  --allow-metrics=false --log-info=false &
SERVER=$!
PYTHON=python3
. bench/common.sh
wait_ready http://localhost:8000/v2/health/ready 100 || true
SECTIONS="${SECTIONS:-http batching}"
if [[ " $SECTIONS " == *" gemm "* ]]; then
  echo "== SGEMM: Nereid's kernels vs OpenBLAS, one thread (bench/bench_gemm.cc)"
  taskset -c 4 "$C/bin/bench_gemm" --reps 5 | tee "$OUT/bench_gemm.txt"
fi
if [[ " $SECTIONS " == *" grpc "* ]]; then
  echo "== perf_analyzer over gRPC: sync, async, streaming (simple)"
  for mode in sync async streaming; do
    flag="--$mode"
    taskset -c 4-15 "$PA" -m simple -u localhost:8001 -i grpc $flag --concurrency-range 1:8:7 \
      --measurement-interval 3000 --stability-percentage 50 --max-trials 4 -f "$OUT/pa_simple_grpc_${mode}.csv" \
      > "$OUT/pa_simple_grpc_${mode}.log" 2>&1 || echo "perf_analyzer grpc $mode failed: $(tail -5 "$OUT/pa_simple_grpc_${mode}.log")"
    [ -f "$OUT/pa_simple_grpc_${mode}.csv" ] && sed 's/^/  /' "$OUT/pa_simple_grpc_${mode}.csv" | cut -d, -f1-2,9-12
  done
  taskset -c 4-15 "$NEREID-perf" -m simple -i grpc -u localhost:8001 --concurrency-range 1:8:7 -p 3000 -q
fi
if [[ " $SECTIONS " == *" http "* ]]; then
echo "== perf_analyzer vs nereid-perf (server on cores 0-3, clients on 4-15)"
for model in simple recommend_model; do
  for mode in sync async; do
    taskset -c 4-15 "$PA" -m "$model" -u localhost:8000 -i http --"$mode" --concurrency-range 1:8:7 \
      --measurement-interval 3000 --stability-percentage 50 --max-trials 4 -f "$OUT/pa_${model}_${mode}.csv" \
      > "$OUT/pa_${model}_${mode}.log" 2>&1 || echo "perf_analyzer $model $mode failed: $(tail -3 "$OUT/pa_${model}_${mode}.log")"
  done
  taskset -c 4-15 "$NEREID-perf" -m "$model" -u localhost:8000 --concurrency-range 1:8:7 -p 3000 -q \
    -f "$OUT/np_${model}.csv" > /dev/null
done
python3 bench/compare_perf_tools.py "$OUT"
fi
kill $SERVER; wait $SERVER 2>/dev/null
if [[ " $SECTIONS " == *" triton "* ]]; then
  echo
  echo "== Triton (PyTriton's tritonserver, Python backend) vs Nereid on simple, driven by perf_analyzer"
  TRITON_DIR=/tmp/nereid-triton
  [ -x "$TRITON_DIR/pytriton/tritonserver/bin/tritonserver" ] ||
    { mkdir -p "$TRITON_DIR" && tar -C "$TRITON_DIR" -xJf "$C/triton.tar.xz"; }
  SKIP_BUILD=1 NEREID="$NEREID" MODELS="$PWD/$C/models" PYTHON=python3 PERF_ANALYZER="$PA" \
    TRITON_HOME="$TRITON_DIR/pytriton/tritonserver" TRITON_LIBS="$TRITON_DIR/nvidia_pytriton.libs" \
    TRITON_VERSION="$(cat "$C/triton.version")" SERVER_CPUS=0-3 CLIENT_CPUS=4-15 \
    MEASURE_MS="${MEASURE_MS:-4000}" bench/triton_vs_nereid.sh 2>&1 | tee "$OUT/triton_vs_nereid.txt"
fi
if [[ " $SECTIONS " == *" triton_python "* ]]; then
  echo
  echo "== Triton's Python backend vs Nereid's Python backend, the same model.py, driven by perf_analyzer"
  TRITON_DIR=/tmp/nereid-triton
  [ -x "$TRITON_DIR/pytriton/tritonserver/bin/tritonserver" ] ||
    { mkdir -p "$TRITON_DIR" && tar -C "$TRITON_DIR" -xJf "$C/triton.tar.xz"; }
  NEREID_BACKEND=python SKIP_BUILD=1 NEREID="$NEREID" MODELS="$PWD/$C/models" PYTHON=python3 PERF_ANALYZER="$PA" \
    TRITON_HOME="$TRITON_DIR/pytriton/tritonserver" TRITON_LIBS="$TRITON_DIR/nvidia_pytriton.libs" \
    TRITON_VERSION="$(cat "$C/triton.version")" SERVER_CPUS=0-3 CLIENT_CPUS=4-15 \
    MEASURE_MS="${MEASURE_MS:-4000}" bench/triton_vs_nereid.sh 2>&1 | tee "$OUT/triton_python_vs_nereid.txt"
fi
[[ " $SECTIONS " == *" batching "* ]] || exit 0
echo
echo "== batching benchmark (recommend_model; server on cores 0-3, client on 4-15)"
SKIP_BUILD=1 NEREID="$NEREID" MODEL_ONNX="$PWD/$C/models/recommend_model/1/model.onnx" PYTHON=python3 \
  SERVER_CPUS=0-3 CLIENT_CPUS=4-15 GOAL_US="${GOAL_US:-20000}" MEASURE_MS=3000 WARMUP_MS=700 \
  bench/batching.sh 1:64:x2 2>&1 | tee "$OUT/batching.txt" | tail -12
