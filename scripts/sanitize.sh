#!/usr/bin/env bash
# The test suite under sanitizers (part of scripts/test.sh; also runs alone):
#   ASan+UBSan (build-asan/): every unit test, the four fuzz corpora, and the end-to-end tests of
#                             memory, threads and parsers against the instrumented server binary
#   TSan (build-tsan/):       the batcher, sequence-batcher, request-queue, adaptive-delay,
#                             repository, response-cache, energy-ledger and rate-limiter tests
#                             (the code where threads meet), repeated
# Any report fails the run (halt_on_error; UBSan reports are fatal too).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"

echo "== ASan+UBSan build (build-asan)"
# What the pass runs, not the benchmarks and the load generator (no sanitized test uses them).
BUILD_DIR=build-asan CMAKE_BUILD_TYPE=RelWithDebInfo CMAKE_ARGS="-DNEREID_SANITIZE=ON -DNEREID_CUDA=OFF" \
  NINJA_TARGETS="nereid nereid_unit_tests request_fuzz http_route_fuzz infer_wire_fuzz server_fuzz
    nereid_backend_native
    nereid_backend_identity nereid_backend_onnxruntime nereid_backend_python nereid_backend_repeat
    nereid_backend_dyna_sequence" scripts/build.sh
echo "== ASan+UBSan: unit tests and fuzz corpora"
# One process for all unit tests (ctest starts one per test: 0.1 s each under ASan).
build-asan/nereid_unit_tests --gtest_brief=1
ctest --test-dir build-asan --output-on-failure -R corpus_replay
# The instrumented binary serves the end-to-end files that drive the code where memory is owned,
# shared and freed across threads and where outside bytes are parsed: the wire parsers and bad
# input, shared memory, zero-copy hand-offs, the schedulers and ensembles, the backend ABI and the
# Python stubs, cancellation and isolation, the repository's load and unload, tracing, the soak.
# Left to the plain pass: files whose subject is elsewhere (deploy manifests and load balancers,
# Prometheus, the perf tool, real-model accuracy on ONNX Runtime and PyTorch, precision, energy,
# config checks, warmup, poll mode, GPU and ARM64 smoke tests). NEREID_SANITIZE_E2E=all runs every
# file.
SANITIZED_E2E=(test_bad_input test_infer test_grpc test_endpoints test_hardening test_security
  test_shared_memory test_copies test_scheduling test_sequence test_ensemble
  test_ensemble_decoupled test_response_cache test_backend_abi test_identity_backend
  test_python_backend test_isolation test_repository test_file_override test_trace test_soak)
files=()
if [ "${NEREID_SANITIZE_E2E:-}" = all ]; then
  files=(tests/e2e)
else
  for f in "${SANITIZED_E2E[@]}"; do files+=("tests/e2e/$f.py"); done
fi
echo "== ASan+UBSan: end-to-end tests against the instrumented binary (${#files[@]} file(s))"
NEREID_SANITIZED=1 NEREID_SOAK_SECS="${NEREID_SOAK_SECS:-20}" NEREID_BINARY="$PWD/build-asan/nereid" \
  .venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 \
  -o tmp_path_retention_policy=failed "${files[@]}"

echo "== TSan build (build-tsan: unit tests only)"
if [ ! -f build-tsan/build.ninja ]; then
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEREID_SANITIZE_THREAD=ON -DNEREID_CUDA=OFF
fi
ninja -C build-tsan nereid_unit_tests nereid_backend_native
echo "== TSan: batcher, repository and intra-op thread team tests"
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" build-tsan/nereid_unit_tests \
  --gtest_filter='DecideBatch*:RequestQueue*:DynamicBatcher*:AdaptiveDelay*:RepositoryTest*:ModelControl*:InferApi*:ResponseCache*:EnergyLedger*:SequenceBatcher*:RateLimiter*:ThreadTeam*' \
  --gtest_repeat=5 --gtest_brief=1
