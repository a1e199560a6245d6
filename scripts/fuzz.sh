#!/usr/bin/env bash
# Runs the network-input fuzz target under libFuzzer with ASan/UBSan for N seconds (default 60).
# Builds with clang in build-fuzz/; new interesting inputs land in build-fuzz/corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-60}"
scripts/install-deps.sh
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DNEREID_FUZZ=ON -DNEREID_BUILD_TESTS=OFF \
    -DNEREID_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
ninja -C build-fuzz request_fuzz_libfuzzer
mkdir -p build-fuzz/corpus
cp -n tests/fuzz/corpus/* build-fuzz/corpus/ 2>/dev/null || true
build-fuzz/request_fuzz_libfuzzer -max_total_time="$SECONDS_TO_RUN" -max_len=65536 build-fuzz/corpus
