#!/usr/bin/env bash
# Side by side with NVIDIA Triton: PyPI's nvidia-pytriton ships a real `tritonserver` (with the Python
# backend only). Serves `simple` from Triton (Python backend) and from Nereid (its ONNX Runtime backend,
# or with NEREID_BACKEND=python the same model.py on Nereid's Python backend), and drives
# both with the same load generator runs over HTTP and gRPC at concurrency 1, 8, 64: perf_analyzer when
# PERF_ANALYZER names its binary (it needs glibc >= 2.38, so not on Debian 12: scripts/device_cpu_bench.sh
# runs it this way on the device host), else `nereid-perf`.
#   bench/triton_vs_nereid.sh      (MEASURE_MS, WARMUP_MS override the windows)
# Prebuilt pieces (the device host) skip the installs: NEREID, MODELS, TRITON_HOME, TRITON_LIBS, PYVER,
# PYTHON, SKIP_BUILD; SERVER_CPUS/CLIENT_CPUS pin the servers and the load generator apart.
set -euo pipefail
cd "$(dirname "$0")/.."
MEASURE_MS="${MEASURE_MS:-4000}"
WARMUP_MS="${WARMUP_MS:-1000}"
NEREID="${NEREID:-build/nereid}"
MODELS="${MODELS:-examples/models}"
PYTHON="${PYTHON:-.venv/bin/python}"
PERF_ANALYZER="${PERF_ANALYZER:-}"
NEREID_BACKEND="${NEREID_BACKEND:-onnx}"
if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/install-deps.sh >/dev/null
  scripts/build.sh >/dev/null
  .venv/bin/python examples/generate_models.py >/dev/null
fi
if [ -z "${TRITON_HOME:-}" ]; then
  # The Python backend's stub embeds the system libpython3.11 and imports numpy from Debian's packages.
  dpkg-query -W -f='${Status}' python3-numpy 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null
  . bench/triton_env.sh
fi
TRITON_VERSION="${TRITON_VERSION:-unknown}"
PYVER="${PYVER:-$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}"
SERVER_RUN=()
CLIENT_RUN=()
[ -n "${SERVER_CPUS:-}" ] && SERVER_RUN=(taskset -c "$SERVER_CPUS")
[ -n "${CLIENT_CPUS:-}" ] && CLIENT_RUN=(taskset -c "$CLIENT_CPUS")

WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/triton/simple/1" "$WORK/backends"
. bench/common.sh
triton_python_backend "$WORK/backends"
cp bench/triton_simple/model.py "$WORK/triton/simple/1/model.py"
sed -e 's/^platform: .*/backend: "python"/' "$MODELS/simple/config.pbtxt" > "$WORK/triton/simple/config.pbtxt"
NEREID_MODELS="$MODELS"
if [ "$NEREID_BACKEND" = python ]; then
  # The very same model directory (config.pbtxt and model.py) on Nereid's Python backend, its stubs
  # in an interpreter with numpy (NEREID_PYTHON; default: $PYTHON).
  NEREID_MODELS="$WORK/nereid"
  mkdir -p "$NEREID_MODELS"
  cp -r "$WORK/triton/simple" "$NEREID_MODELS/simple"
  export NEREID_PYTHON="${NEREID_PYTHON:-$(realpath -s "$(command -v "$PYTHON")")}"  # a venv stays a venv
fi

T_HTTP=$(free_port); T_GRPC=$(free_port); N_HTTP=$(free_port); N_GRPC=$(free_port)
# The copied stub finds PyTriton's bundled CUDA runtime through LD_LIBRARY_PATH.
LD_LIBRARY_PATH="$TRITON_LIBS:${LD_LIBRARY_PATH:-}" \
  ${SERVER_RUN[@]+"${SERVER_RUN[@]}"} "$TRITON_HOME/bin/tritonserver" --model-repository="$WORK/triton" --backend-directory="$WORK/backends" \
  --http-port="$T_HTTP" --grpc-port="$T_GRPC" --allow-metrics=false --log-info=false > "$WORK/triton.log" 2>&1 &
PIDS+=($!)
${SERVER_RUN[@]+"${SERVER_RUN[@]}"} "$NEREID" serve --model-repository="$NEREID_MODELS" --http-port="$N_HTTP" --grpc-port="$N_GRPC" \
  --allow-metrics=false --log-info=false > "$WORK/nereid.log" 2>&1 &
PIDS+=($!)
for p in $T_HTTP $N_HTTP; do
  wait_ready "http://localhost:$p/v2/models/simple/ready" || { cat "$WORK"/*.log; exit 1; }
done
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "Triton: tritonserver from PyTriton $TRITON_VERSION, Python backend; Nereid: $([ "$NEREID_BACKEND" = python ] && echo "Python backend, the same model.py (stubs in $NEREID_PYTHON)" || echo "examples/models/simple (ONNX Runtime backend)")"
echo "servers on cores ${SERVER_CPUS:-any}, load generator on ${CLIENT_CPUS:-any}: $([ -n "$PERF_ANALYZER" ] && echo "perf_analyzer (sync)" || echo "nereid-perf")"
for proto in http grpc; do
  for server in triton nereid; do
    if [ $server = triton ]; then url="localhost:$([ $proto = http ] && echo $T_HTTP || echo $T_GRPC)";
    else url="localhost:$([ $proto = http ] && echo $N_HTTP || echo $N_GRPC)"; fi
    if [ -n "$PERF_ANALYZER" ]; then
      # One run per concurrency (its ranges are linear), rows joined into one CSV.
      for c in 1 8 64; do
        "${CLIENT_RUN[@]+"${CLIENT_RUN[@]}"}" "$PERF_ANALYZER" -m simple -i $proto -u "$url" \
          --concurrency-range "$c:$c" --measurement-interval "$MEASURE_MS" --stability-percentage 50 \
          --max-trials 4 -f "$WORK/pa_${server}_${proto}_$c.csv" > "$WORK/pa_${server}_${proto}_$c.log" 2>&1 ||
          { echo "perf_analyzer $server $proto c=$c failed:"; tail -5 "$WORK/pa_${server}_${proto}_$c.log"; exit 1; }
      done
      { head -1 "$WORK/pa_${server}_${proto}_1.csv"; for c in 1 8 64; do tail -n +2 "$WORK/pa_${server}_${proto}_$c.csv"; done; } \
        > "$WORK/${server}_${proto}.csv"
    else
      ${CLIENT_RUN[@]+"${CLIENT_RUN[@]}"} "$NEREID-perf" -m simple -i $proto -u "$url" --concurrency-range 1:64:x8 \
        -p "$MEASURE_MS" --warmup "$WARMUP_MS" -q -f "$WORK/${server}_${proto}.csv" > /dev/null
    fi
  done
done
"$PYTHON" - "$WORK" <<'PY'
import csv, os, sys
w = sys.argv[1]
def load(n):
    with open(os.path.join(w, n)) as f:
        return {int(float(r["Concurrency"])): r for r in csv.DictReader(f)}
print("| protocol | concurrency | Triton infer/s | Triton p50 us | Nereid infer/s | Nereid p50 us | p50 Nereid/Triton | throughput Nereid/Triton |")
print("|---|---|---|---|---|---|---|---|")
for proto in ("http", "grpc"):
    t, n = load(f"triton_{proto}.csv"), load(f"nereid_{proto}.csv")
    for c in sorted(t):
        tt, tp = float(t[c]["Inferences/Second"]), float(t[c]["p50 latency"])
        nt, np_ = float(n[c]["Inferences/Second"]), float(n[c]["p50 latency"])
        print(f"| {proto} | {c} | {tt:.0f} | {tp:.0f} | {nt:.0f} | {np_:.0f} | {np_ / tp:.2f} | {nt / tt:.2f}x |")
PY
