#!/usr/bin/env bash
# Runs the fuzz targets under libFuzzer with ASan/UBSan: scripts/fuzz.sh [seconds-each] [target...]
# (default 60 s each; targets request_fuzz, http_route_fuzz, infer_wire_fuzz and server_fuzz, see
# tests/fuzz/). Builds with clang in
# build-fuzz/; each target starts from its seed corpus in tests/fuzz/corpus/<target> and keeps new
# interesting inputs in build-fuzz/corpus/<target>. A crash leaves crash-* files in build-fuzz/ and
# fails the script: reduce it, add it to the seed corpus, fix it.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-60}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(request_fuzz http_route_fuzz infer_wire_fuzz server_fuzz)
scripts/install-deps.sh >/dev/null
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DNEREID_FUZZ=ON -DNEREID_BUILD_TESTS=OFF \
    -DNEREID_SANITIZE=ON -DNEREID_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
for target in "${TARGETS[@]}"; do
  ninja -C build-fuzz "${target}_libfuzzer" nereid_backend_native
  mkdir -p "build-fuzz/corpus/$target"
  cp -n "tests/fuzz/corpus/$target"/* "build-fuzz/corpus/$target/" 2>/dev/null || true
  echo "== $target: $SECONDS_TO_RUN s"
  # The whole output (the in-process server logs too) goes to build-fuzz/<target>.log.
  status=0
  (cd build-fuzz && ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" "./${target}_libfuzzer" \
    -max_total_time="$SECONDS_TO_RUN" -max_len=131072 -timeout=30 -print_final_stats=1 \
    "corpus/$target" >"$target.log" 2>&1) || status=$?
  grep -v "^[IWE]1" "build-fuzz/$target.log" | tail -25
  if [ "$status" != 0 ]; then
    echo "$target failed (exit $status); full log: build-fuzz/$target.log"
    exit "$status"
  fi
done
