#!/usr/bin/env bash
# Runs on the lent device machine (16 cores): the native engine against ONNX Runtime 1.30 (the
# host's, CPU) on torchvision's ResNet-50, MobileNetV2 and ResNeXt-50 32x4d (exported there with
# the host's PyTorch, random weights) and the small CNN, batch 1 and 8, at 1 thread and at every core, one table per
# thread count (bench/native_vs_ort.py). Expects .devcarry/ from
#   NATIVE_BENCH=1 MODELS= scripts/device_carry.sh
# (or GPU=1: its bench_native serves as well) and, where the host's Python has no onnx package, the
# onnx + protobuf wheels in .whl/. Other builds of bench_native as .devcarry/cpu/NAME.xz (strip,
# xz -9; a CPU-only build is ~1 MB) add a section at every core: bench/ab_native.py, the builds
# alternating round by round (CPU.xz, if present, is the "new" one instead of the bundle's).
# INT8=1 adds an int8 table per thread count; RapidOCR's models join where .devcarry/pkgs holds
# them. MODELS_AB: the models of that section (default small_cnn, mobilenet_v2, resnet50).
# LAYERS="resnet50 mobilenet_v2": those models layer by layer against ONNX Runtime at every core
# first (bench/conv_layers_vs_ort.py, batch 1), where a gap at 16 threads lies.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.devcarry
export LD_LIBRARY_PATH="$PWD/$C/lib:${LD_LIBRARY_PATH:-}"
[ -x "$C/bin/bench_native" ] || tar -C "$C" -xJf "$C/bundle.tar.xz"
NEW="$C/bin/bench_native"
OTHERS=()
for xz in "$C"/cpu/*.xz; do
  [ -f "$xz" ] || continue
  name=$(basename "$xz" .xz)
  xz -dc "$xz" > "/tmp/bn_$name" && chmod +x "/tmp/bn_$name"
  if [ "$name" = CPU ]; then NEW="/tmp/bn_$name"; else OTHERS+=("/tmp/bn_$name"); fi
done
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
if ! python3 -c "import onnx" 2>/dev/null; then
  WHEELS=(.whl/onnx-*.whl .whl/ml_dtypes-*.whl)
  python3 -c "import google.protobuf" 2>/dev/null || WHEELS+=(.whl/protobuf-*.whl)
  python3 -m pip install -q --no-deps --target /tmp/pylib "${WHEELS[@]}" 2>&1 | tail -2
  export PYTHONPATH=/tmp/pylib
fi
python3 -c "import onnxruntime, torch; print('onnxruntime', onnxruntime.__version__, 'torch', torch.__version__)"
python3 scripts/vision_models.py /tmp/vm --models resnet50,mobilenet_v2,resnext50 --torchvision
python3 scripts/vision_models.py /tmp/vm --models small_cnn
for model in ${LAYERS:-}; do
  echo "== layer by layer, $(nproc) threads, batch 1: $model"
  python3 bench/conv_layers_vs_ort.py --bench-native="$NEW" --threads="$(nproc)" \
    --iterations="${ITERATIONS:-10}" "/tmp/vm/$model.onnx" | tee "$OUT/layers_$model.txt" || true
done
if [ ${#OTHERS[@]} -gt 0 ]; then
  for model in ${MODELS_AB:-small_cnn mobilenet_v2 resnet50}; do
    echo "== A/B, $(nproc) threads: $model"
    python3 bench/ab_native.py "/tmp/vm/$model.onnx" "${OTHERS[@]}" "$NEW" --threads="$(nproc)" \
      --rounds="${ROUNDS:-3}" --iterations="${ITERATIONS:-10}" | tee "$OUT/ab_$model.txt" || true
  done
fi
# RapidOCR's detector, recogniser and classifier (real weights), where .devcarry/pkgs holds them
# (GPU=1 scripts/device_carry.sh), at the input sizes of docs/native-engine.md's OCR rows.
OCR=()
OCR_DIR="$C/pkgs/rapidocr_onnxruntime/models"
[ -f "$OCR_DIR/ch_PP-OCRv4_det_infer.onnx" ] &&
  OCR=("$OCR_DIR/ch_PP-OCRv4_det_infer.onnx:3,96,128" "$OCR_DIR/ch_PP-OCRv4_rec_infer.onnx:3,48,320"
       "$OCR_DIR/ch_ppocr_mobile_v2.0_cls_infer.onnx:3,48,192")
# INT8=1: each thread count again with the native engine in int8 (against ONNX Runtime's fp32).
for threads in ${THREADS:-1 $(nproc)}; do
  for int8 in "" ${INT8:+--int8}; do
    echo "== $threads thread(s) ${int8:-fp32}"
    python3 bench/native_vs_ort.py --bench-native="$NEW" --batch=1,8 $int8 \
      --threads="$threads" --rounds="${ROUNDS:-3}" --iterations="${ITERATIONS:-10}" \
      /tmp/vm/resnet50.onnx /tmp/vm/mobilenet_v2.onnx /tmp/vm/resnext50.onnx /tmp/vm/small_cnn.onnx \
      "${OCR[@]}" | tee "$OUT/native_vs_ort_t$threads${int8:+_int8}.txt" || true
  done
done
