# Sourced from the repository root by the scripts that run on the lent device machine
# (gpu_device_run.sh, device_model_analyzer.sh, device_cuda_deb.sh, bench/gpu_batching_configs.sh):
# unpacks .devcarry's bundle once and puts its libraries and the host's cuBLAS 13 (not carried:
# 600 MB; the CUDA toolkit's, else PyTorch's wheel) on the library path. Sets C, CUBLAS (the path
# of libcublasLt, empty if the host has none) and CUBLAS_DIR.
# shellcheck shell=bash
C=.devcarry
[ -x "$C/bin/nereid" ] || tar -C "$C" -xJf "$C/bundle.tar.xz"
CUBLAS=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
CUBLAS_DIR=$(dirname "${CUBLAS:-/nonexistent/x}")
export LD_LIBRARY_PATH="$PWD/$C/lib:$CUBLAS_DIR:${LD_LIBRARY_PATH:-}"

# device_models DIR SOURCE/MODEL...: a fresh model repository DIR with the example configurations
# named (e.g. examples/models_gpu/recommend_model) and their model files, generated here where the
# host has the onnx package, else those carried in .devcarry/models (made on the dev machine).
device_models() {
  local dir=$1 src
  shift
  rm -rf "$dir" && mkdir -p "$dir" || return 1
  for src in "$@"; do cp -r "$src" "$dir/" || return 1; done
  if python3 -c 'import onnx' 2>/dev/null; then
    python3 examples/generate_models.py --out "$dir" >/dev/null
  else
    for src in "$@"; do cp -r "$C/models/$(basename "$src")/1" "$dir/$(basename "$src")/" || return 1; done
  fi
}
