#!/usr/bin/env bash
# Everything GPU in one device call: the GPU unit tests (kernels against float64 references), the
# GPU end-to-end tests (tests/e2e/test_gpu.py with the real tritonclient), the kernel benchmarks
# (bench/bench_gpu.cc) and the serving benchmark (bench/gpu_serving.py), then one summary table.
# Prepare here:  GPU=1 MODELS= scripts/device_carry.sh   (and the tritonclient wheels in .whl/,
#                docs/gpu.md says how)
# Run there:     device run, carry [".devcarry", ".whl"], command: scripts/gpu_device_run.sh
# SECTIONS (default "tests e2e bench serving"; also "vision", "text", "images", "precision", "policy", "energy", "batching", "pytorch", "split"; "scaling" needs two GPUs) picks parts, BENCH the
# sections of bench_gpu, GTEST_FILTER the GPU unit tests; logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
. scripts/device_env.sh
# The wheels carried (.whl: tritonclient and its dependencies; .whl_min: onnx only, for the models).
for wheels in .whl .whl_min; do
  if compgen -G "$wheels/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl &&
      export PYTHONPATH=/tmp/site
  fi
done
export PYTHONUNBUFFERED=1
# (NEREID_PACKAGE_ROOT set by the caller: model files carried in a call of their own.)
[ -z "${NEREID_PACKAGE_ROOT:-}" ] && [ -d .devcarry/pkgs ] && export NEREID_PACKAGE_ROOT="$PWD/.devcarry/pkgs"
# Model files carried compressed (device_carry.sh), unpacked beside themselves once.
[ -n "${NEREID_PACKAGE_ROOT:-}" ] && find "$NEREID_PACKAGE_ROOT" -name '*.onnx.xz' -exec xz -dkf {} \;
# The ONNX node tests the GPU engine's conformance test runs: Debian's, else the ones
# device_carry.sh carried, else the onnx wheel's (recent wheels ship none).
if [ -d .devcarry/onnx-node ]; then
  export NEREID_ONNX_NODE_TESTS="$PWD/.devcarry/onnx-node"
elif [ ! -d /usr/share/libonnx-testdata/data/node ]; then
  NEREID_ONNX_NODE_TESTS=$(python3 -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node"))' 2>/dev/null) &&
    export NEREID_ONNX_NODE_TESTS
fi
SECTIONS="${SECTIONS:-tests e2e bench serving}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,power.limit --format=csv,noheader | sed 's/^/gpu: /'
echo "cuBLAS from: ${CUBLAS:-not found}"
declare -A RESULT
if [[ " $SECTIONS " == *" tests "* ]]; then
  echo "== GPU unit tests (nereid_gpu_tests)"
  "$C/bin/nereid_gpu_tests" --gtest_brief=1 ${GTEST_FILTER:+--gtest_filter="$GTEST_FILTER"} 2>&1 | tee "$OUT/gpu_tests.txt" | tail -15
  RESULT[tests]=$(grep -E '^\[  (PASSED|FAILED)' "$OUT/gpu_tests.txt" | tr '\n' ' ')
fi
if [[ " $SECTIONS " == *" e2e "* ]]; then
  # E2E (default: both files) picks the test files.
  E2E="${E2E:-tests/e2e/test_gpu.py tests/e2e/test_gpu_vision.py tests/e2e/test_gpu_zoo.py tests/e2e/test_pipeline.py}"
  echo "== GPU end-to-end tests ($E2E)"
  # shellcheck disable=SC2086
  NEREID_BINARY="$PWD/$C/bin/nereid" NEREID_PYTHON="$(command -v python3)" \
    python3 -m pytest -q -s -p no:cacheprovider $E2E > "$OUT/e2e_gpu.txt" 2>&1
  grep -E "max abs diff" "$OUT/e2e_gpu.txt" | sort | uniq | sed 's/^/  /' | head -40
  tail -25 "$OUT/e2e_gpu.txt"
  RESULT[e2e]=$(tail -1 "$OUT/e2e_gpu.txt")
fi
if [[ " $SECTIONS " == *" bench "* ]]; then
  echo "== kernel benchmarks (bench_gpu)"
  # BENCH="gemm epilogue ..." picks bench_gpu's sections (default: all).
  "$C/bin/bench_gpu" ${BENCH:-} 2>&1 | tee "$OUT/bench_gpu.txt"
fi
if [[ " $SECTIONS " == *" vision "* ]]; then
  echo "== ResNet-50 on the native GPU engine vs PyTorch (bench/gpu_vision.py)"
  PA="$PWD/$C/bin/perf_analyzer"; [ -x "$PA" ] || PA=""
  python3 bench/gpu_vision.py "$PWD/$C/bin/nereid" $PA --batches "${VISION_BATCHES:-1,64,256}" \
    --precisions "${VISION_PRECISIONS:-fp32,bf16,fp16,int8}" --iters "${VISION_ITERS:-200}" \
    --rate "${VISION_RATE:-500}" 2>&1 |
    tee "$OUT/gpu_vision.txt"
fi
if [[ " $SECTIONS " == *" split "* ]]; then
  echo "== a split run's first part, ResNet-50 (bench/gpu_split.py)"
  python3 bench/gpu_split.py "$PWD/$C/bin/nereid" --variants "${SPLIT_VARIANTS:-off,50,37,25,19}" \
    --rounds "${SPLIT_ROUNDS:-2}" --precisions "${SPLIT_PRECISIONS:-bf16,int8}" 2>&1 |
    tee "$OUT/gpu_split.txt"
fi
if [[ " $SECTIONS " == *" text "* ]]; then
  echo "== BERT-base on the native GPU engine vs PyTorch (bench/gpu_text.py)"
  python3 bench/gpu_text.py "$PWD/$C/bin/nereid" --batches "${TEXT_BATCHES:-1,64}" \
    --precisions "${TEXT_PRECISIONS:-fp32,bf16,fp16}" --iters "${TEXT_ITERS:-100}" \
    --lengths "${TEXT_LENGTHS-32,64,96,128}" 2>&1 |
    tee "$OUT/gpu_text.txt"
fi
if [[ " $SECTIONS " == *" images "* ]]; then
  # Triton's image_client.py, grpc_image_client.py and ensemble_image_client.py, unchanged, against
  # a ResNet-50 on KIND_GPU (the examples carried by CLIENT_SRC=... scripts/device_carry.sh; grpcio
  # in .whl).
  echo "== Triton's image examples against ResNet-50 on the native GPU engine"
  KIND=KIND_GPU HARNESS_PYTHON="$(command -v python3)" NEREID_BINARY="$PWD/$C/bin/nereid" \
    scripts/triton_image_examples.sh "$PWD/.devcarry/client" 2>&1 | tee "$OUT/images.txt" | tail -12
  RESULT[images]=$(tail -1 "$OUT/images.txt")
fi
if [[ " $SECTIONS " == *" precision "* ]]; then
  echo "== recommend_model in tf32, bf16 and int8 at saturation (bench/precision.sh)"
  DEVICE=gpu NEREID="$PWD/$C/bin/nereid" PERF="$PWD/$C/bin/nereid-perf" PYTHON=python3 \
    bench/precision.sh 2>&1 | tee "$OUT/precision.txt"
fi
if [[ " $SECTIONS " == *" policy "* ]]; then
  echo "== the precision-variant policy under a load step (bench/precision_policy.py)"
  python3 bench/precision_policy.py "$PWD/$C/bin/nereid" "$PWD/$C/bin/nereid-perf" --out "$OUT" 2>&1 |
    tee "$OUT/policy.txt"
fi
if [[ " $SECTIONS " == *" serving "* ]]; then
  echo "== serving benchmark (bench/gpu_serving.py)"
  PA="$PWD/$C/bin/perf_analyzer"; [ -x "$PA" ] || PA=""
  python3 bench/gpu_serving.py "$PWD/$C/bin/nereid" $PA --out "$OUT" 2>&1 | tee "$OUT/serving.txt"
fi
if [[ " $SECTIONS " == *" energy "* ]]; then
  echo "== energy attribution on one GPU, accounting overhead (bench/energy_attribution.py)"
  EM=/tmp/energy_models && rm -rf $EM && cp -r examples/models $EM &&
    python3 examples/generate_models.py --out $EM > /dev/null
  python3 bench/energy_attribution.py "$PWD/$C/bin/nereid" "$PWD/$C/bin/nereid-perf" --models $EM 2>&1 |
    tee "$OUT/energy.txt"
  RESULT[energy]=$(grep -E "mixed/alone" "$OUT/energy.txt" | tr '\n' ' ')
fi
if [[ " $SECTIONS " == *" batching "* ]]; then
  echo "== energy-aware batching against fixed queue delays and a PyTorch loop (bench/energy_batching.py)"
  EM=/tmp/batching_models && rm -rf $EM && cp -r examples/models_gpu $EM &&
    python3 examples/generate_models.py --out $EM > /dev/null
  python3 bench/energy_batching.py "$PWD/$C/bin/nereid" "$PWD/$C/bin/nereid-perf" --models $EM 2>&1 |
    tee "$OUT/batching.txt"
  RESULT[batching]=$(grep -E "^load " "$OUT/batching.txt" | tr '\n' ' ')
fi
if [[ " $SECTIONS " == *" pytorch "* ]]; then
  echo "== PyTorch backend, built here against this machine's PyTorch (tests/e2e/test_pytorch.py)"
  TORCH_DIR=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  ABI=$(python3 -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))')
  CUDA_LIB=(); [ -e "$TORCH_DIR/lib/libtorch_cuda.so" ] && CUDA_LIB=(-Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed)
  # c10's CUDA headers include cuda_runtime.h: the toolkit's, else the one in PyTorch's wheels.
  for d in /usr/local/cuda/include "$TORCH_DIR/../nvidia/cuda_runtime/include" "$TORCH_DIR/../nvidia/cu13/include"; do
    [ -e "$d/cuda_runtime.h" ] && CUDA_LIB=(-isystem "$d" "${CUDA_LIB[@]}") && break
  done
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  g++ -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI="$ABI" \
    -Iinclude -Ibackends -I"$C/include" -isystem "$TORCH_DIR/include" \
    -isystem "$TORCH_DIR/include/torch/csrc/api/include" backends/pytorch/pytorch_backend.cc \
    -L"$TORCH_DIR/lib" "${CUDA_LIB[@]}" -ltorch -ltorch_cpu -lc10 -Wl,-rpath,"$TORCH_DIR/lib" \
    -Wl,--version-script=include/nereid/backend.map -o "$C/bin/backends/libnereid_backend_pytorch.so" \
    2>&1 | tail -20
  NEREID_TORCH_PYTHON="$(command -v python3)" NEREID_BINARY="$PWD/$C/bin/nereid" \
    python3 -m pytest -q -s -p no:cacheprovider tests/e2e/test_pytorch.py > "$OUT/pytorch.txt" 2>&1
  grep -E "max abs diff|passed|failed|Error" "$OUT/pytorch.txt" | head -20
  RESULT[pytorch]=$(tail -1 "$OUT/pytorch.txt")
fi
if [[ " $SECTIONS " == *" scaling "* ]]; then
  echo "== instances on one GPU vs two (bench/gpu_scaling.py; nvidia-h200-x2)"
  if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    python3 bench/gpu_scaling.py "$PWD/$C/bin/nereid" "$PWD/$C/bin/nereid-perf" --out "$OUT" 2>&1 |
      tee "$OUT/scaling.txt"
    RESULT[scaling]=$(grep "^scaling:" "$OUT/scaling.txt")
  else
    RESULT[scaling]="skipped: one GPU"
  fi
fi
echo
echo "== summary"
printf '%-10s %s\n' "unit" "${RESULT[tests]:-not run}" "e2e" "${RESULT[e2e]:-not run}" \
  "scaling" "${RESULT[scaling]:-not run}" "pytorch" "${RESULT[pytorch]:-not run}" \
  "energy" "${RESULT[energy]:-not run}" "batching" "${RESULT[batching]:-not run}" \
  "images" "${RESULT[images]:-not run}"
