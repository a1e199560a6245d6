#!/usr/bin/env bash
# Runs on the lent device machine (no podman, not Debian): the nereid-cuda package's own files on a
# real GPU. The package tree (dpkg-deb -x of dist/nereid-cuda_*.deb, without its 600 MB of cuBLAS
# and without ONNX Runtime) comes in .debcarry/tree.tar.xz; the host's cuBLAS 13 stands in for the
# package's, linked into /usr/lib/nereid/cuda — the absolute RUNPATH the package's binaries carry —
# and the Debian libraries the package Depends on come from .devcarry/lib (without its libcudart,
# so the package's own is the one loaded). Serves examples/models_gpu's recommend_model on KIND_GPU
# and checks: which libraries the loader picked, a GPU-served inference against float64 on the
# host, the GPU metrics.
# Make the carry: dpkg-deb -x dist/nereid-cuda_*.deb T; tar -C T -cf - --exclude='libcublas*'
#   --exclude='libonnxruntime*' . | xz -9 > .debcarry/tree.tar.xz; SERVE_ONLY=1 MODELS=
#   scripts/device_carry.sh. Usage (carry .debcarry and .devcarry): scripts/device_cuda_deb.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
R=/tmp/nereid_deb_root
rm -rf "$R" && mkdir -p "$R" && tar -C "$R" -xJf .debcarry/tree.tar.xz
if [ -e /usr/lib/nereid ] && [ "$(readlink -f /usr/lib/nereid)" != "$R/usr/lib/nereid" ]; then
  echo "/usr/lib/nereid exists on this host: not touching it"; exit 1
fi
ln -sfn "$R/usr/lib/nereid" /usr/lib/nereid
SERVER=
trap 'rm -f /usr/lib/nereid; [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null' EXIT
. scripts/device_env.sh  # the bundle's Debian libraries and the host's cuBLAS (found, not used)
[ -n "$CUBLAS" ] || { echo "no cuBLAS 13 on this host"; exit 1; }
ln -sf "$CUBLAS" "$R/usr/lib/nereid/cuda/libcublasLt.so.13"
ln -sf "$(dirname "$CUBLAS")"/libcublas.so.13 "$R/usr/lib/nereid/cuda/libcublas.so.13"
L=/tmp/nereid_deb_libs
rm -rf "$L" && mkdir -p "$L"
find "$C/lib" -maxdepth 1 -type f ! -name 'libcudart*' ! -name 'libcublas*' -exec cp {} "$L/" \;
export LD_LIBRARY_PATH="$L"
BIN="$R/usr/bin/nereid"
echo "== the loader's choice for the package's native backend (CUDA libraries)"
ldd "$R/usr/lib/nereid/backends/libnereid_backend_native.so" | grep -E 'cuda|cublas' | sed 's/^/  /'
M=/tmp/nereid_deb_models
device_models "$M" examples/models_gpu/recommend_model || exit 1
"$BIN" serve --model-repository="$M" --http-port=8000 --grpc-port=8001 --metrics-port=8002 \
  > "$OUT/nereid_deb.log" 2>&1 &
SERVER=$!
PYTHON=python3
. bench/common.sh
wait_ready http://localhost:8000/v2/health/ready 300 || { tail -20 "$OUT/nereid_deb.log"; exit 1; }
PYTHONPATH=tests/e2e python3 - "$M" <<'EOF'
import json, sys, urllib.request
import numpy as np
from references import TOLERANCE, recommend_reference

rng = np.random.default_rng(7)
x = rng.standard_normal((4, 1024)).astype(np.float32)
body = {"inputs": [{"name": "input__0", "shape": [4, 1024], "datatype": "FP32",
                    "data": x.flatten().tolist()}]}
req = urllib.request.Request("http://localhost:8000/v2/models/recommend_model/infer",
                             data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=60) as r:
    out = json.loads(r.read())["outputs"][0]
got = np.array(out["data"], dtype=np.float64).reshape(out["shape"])
err = float(np.max(np.abs(got - recommend_reference(sys.argv[1], x))))
print(f"== recommend_model over HTTP: shape {out['shape']}, max abs diff vs float64 {err:.2e} "
      f"(tf32 tolerance {TOLERANCE['tf32']})")
sys.exit(0 if err <= TOLERANCE["tf32"] else 1)
EOF
rc=$?
echo "== the server's log on instances and libraries"
grep -E "KIND_GPU|instance|cuBLAS|GPU" "$OUT/nereid_deb.log" | head -8 | sed 's/^/  /'
echo "== GPU metrics"
curl -s localhost:8002/metrics | grep -E '^nv_gpu_(memory_used_bytes|power_usage|utilization)' | head -4 | sed 's/^/  /'
echo "== the process's mapped CUDA libraries"
grep -E 'libcu(dart|blas)' "/proc/$SERVER/maps" | awk '{print $6}' | sort -u | sed 's/^/  /'
exit $rc
