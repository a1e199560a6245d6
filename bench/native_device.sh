#!/usr/bin/env bash
# Runs on the lent device machine (16 cores): the native engine against ONNX Runtime 1.30 (the
# host's, CPU) on torchvision's ResNet-50 and MobileNetV2 (exported there with the host's PyTorch,
# random weights) and the small CNN, batch 1 and 8, at 1 thread and at every core, one table per
# thread count (bench/native_vs_ort.py). Expects .devcarry/ from
#   NATIVE_BENCH=1 MODELS= scripts/device_carry.sh
# and the onnx + protobuf wheels for the host's Python in .whl/ (the host has no onnx package).
set -euo pipefail
cd "$(dirname "$0")/.."
C=.devcarry
export LD_LIBRARY_PATH="$PWD/$C/lib:${LD_LIBRARY_PATH:-}"
[ -x "$C/bin/bench_native" ] || tar -C "$C" -xJf "$C/bundle.tar.xz"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
WHEELS=(.whl/onnx-*.whl .whl/ml_dtypes-*.whl)
python3 -c "import google.protobuf" 2>/dev/null || WHEELS+=(.whl/protobuf-*.whl)
python3 -m pip install -q --no-deps --target /tmp/pylib "${WHEELS[@]}" 2>&1 | tail -2
export PYTHONPATH=/tmp/pylib
python3 -c "import onnxruntime, torch; print('onnxruntime', onnxruntime.__version__, 'torch', torch.__version__)"
python3 scripts/vision_models.py /tmp/vm --models resnet50,mobilenet_v2 --torchvision
python3 scripts/vision_models.py /tmp/vm --models small_cnn
for threads in 1 "$(nproc)"; do
  echo "== $threads thread(s)"
  python3 bench/native_vs_ort.py --bench-native="$C/bin/bench_native" --batch=1,8 \
    --threads="$threads" --rounds="${ROUNDS:-3}" --iterations="${ITERATIONS:-10}" \
    /tmp/vm/resnet50.onnx /tmp/vm/mobilenet_v2.onnx /tmp/vm/small_cnn.onnx | tee "$OUT/native_vs_ort_t$threads.txt" || true
done
