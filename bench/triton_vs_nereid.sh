#!/usr/bin/env bash
# Side by side with NVIDIA Triton on this machine: PyPI's nvidia-pytriton ships a real `tritonserver`
# (with the Python backend only). Serves `simple` from Triton (Python backend) and from Nereid (native
# engine), and drives both with the same `nereid perf` runs over HTTP and gRPC at concurrency 1, 8, 64.
# perf_analyzer itself needs glibc 2.38 and does not run on Debian 12 (see bench/RESULTS.md).
#   bench/triton_vs_nereid.sh      (MEASURE_MS, WARMUP_MS override the windows)
set -euo pipefail
cd "$(dirname "$0")/.."
MEASURE_MS="${MEASURE_MS:-4000}"
WARMUP_MS="${WARMUP_MS:-1000}"
scripts/install-deps.sh >/dev/null
scripts/build.sh >/dev/null
.venv/bin/python examples/generate_models.py >/dev/null
# The Python backend's stub embeds the system libpython3.11 and imports numpy from Debian's packages.
dpkg-query -W -f='${Status}' python3-numpy 2>/dev/null | grep -q "install ok installed" ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null
if [ ! -x .venv-triton/bin/python ]; then
  python3 -m venv .venv-triton
  .venv-triton/bin/python -m pip install -q nvidia-pytriton
fi
TRITON_HOME=$(.venv-triton/bin/python -c 'import pytriton, os; print(os.path.join(os.path.dirname(pytriton.__file__), "tritonserver"))')
PYVER=$(.venv-triton/bin/python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/triton/simple/1" "$WORK/backends"
cp -r "$TRITON_HOME/backends/python" "$WORK/backends/python"
cp "$TRITON_HOME/python_backend_stubs/$PYVER/triton_python_backend_stub" "$WORK/backends/python/"
cp bench/triton_simple/model.py "$WORK/triton/simple/1/model.py"
sed -e 's/^platform: .*/backend: "python"/' examples/models/simple/config.pbtxt > "$WORK/triton/simple/config.pbtxt"

port() { .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
T_HTTP=$(port); T_GRPC=$(port); N_HTTP=$(port); N_GRPC=$(port)
# The copied stub finds PyTriton's bundled CUDA runtime through LD_LIBRARY_PATH.
LD_LIBRARY_PATH="$TRITON_HOME/../../nvidia_pytriton.libs:${LD_LIBRARY_PATH:-}" \
  "$TRITON_HOME/bin/tritonserver" --model-repository="$WORK/triton" --backend-directory="$WORK/backends" \
  --http-port="$T_HTTP" --grpc-port="$T_GRPC" --allow-metrics=false --log-info=false > "$WORK/triton.log" 2>&1 &
PIDS+=($!)
build/nereid serve --model-repository=examples/models --http-port="$N_HTTP" --grpc-port="$N_GRPC" \
  --allow-metrics=false --log-info=false > "$WORK/nereid.log" 2>&1 &
PIDS+=($!)
for p in $T_HTTP $N_HTTP; do
  for _ in $(seq 300); do curl -sf "localhost:$p/v2/models/simple/ready" >/dev/null && break; sleep 0.1; done
  curl -sf "localhost:$p/v2/models/simple/ready" >/dev/null || { cat "$WORK"/*.log; exit 1; }
done
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "Triton: tritonserver from PyTriton $(.venv-triton/bin/python -c 'import importlib.metadata as m; print(m.version("nvidia-pytriton"))'), Python backend; Nereid: native engine"
for proto in http grpc; do
  for server in triton nereid; do
    if [ $server = triton ]; then url="localhost:$([ $proto = http ] && echo $T_HTTP || echo $T_GRPC)";
    else url="localhost:$([ $proto = http ] && echo $N_HTTP || echo $N_GRPC)"; fi
    build/nereid perf -m simple -i $proto -u "$url" --concurrency-range 1:64:x8 -p "$MEASURE_MS" \
      --warmup "$WARMUP_MS" -q -f "$WORK/${server}_${proto}.csv" > /dev/null
  done
done
.venv/bin/python - "$WORK" <<'PY'
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
