#!/usr/bin/env bash
# clang-tidy with the checks of .clang-tidy (each finding an error) over the C++ sources of src/,
# backends/ (the PyTorch backend aside: libtorch's headers take minutes), kernels/ and tools/.
# Needs a configured and built tree (its compile_commands.json and generated protobuf headers):
# scripts/test.sh runs it after scripts/build.sh. BUILD_DIR picks the tree (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
# Only what this build compiles: the other architecture's kernels (kernels/cpu/arm on x86-64,
# kernels/cpu/x86 on AArch64) have no compile command here.
mapfile -t sources < <(git ls-files 'src/*.cc' 'backends/*.cc' 'kernels/*.cc' 'tools/*.cc' |
  grep -v '^backends/pytorch/' | while read -r f; do
    grep -qF "/$f\"" "$BUILD_DIR/compile_commands.json" && echo "$f"
  done)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Two files per process, as many processes as cores: about a minute on 2 cores.
if ! printf '%s\n' "${sources[@]}" |
  xargs -P "$(nproc)" -n 2 clang-tidy -p "$BUILD_DIR" --quiet >"$out" 2>&1; then
  grep -E 'error:|warning:' "$out" | grep -v 'warnings generated' | sort -u >&2 || cat "$out" >&2
  echo "tidy: clang-tidy found the problems above (.clang-tidy lists the checks)" >&2
  exit 1
fi
echo "tidy: clang-tidy clean (${#sources[@]} files)"
