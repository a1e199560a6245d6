#!/usr/bin/env bash
# The house rules a machine can check. Default (what scripts/test.sh and CI run): clang-format over
# the project's C++, CUDA and proto sources (a generated file turns it off inside itself, as
# kernels/cuda/wgmma.cuh does). --tidy adds clang-tidy over the sources (uses
# build/compile_commands.json); it is not part of CI yet, since .clang-tidy does not yet match the
# code.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.proto' | grep -v '^tests/e2e/')
if ! clang-format --dry-run -Werror "${files[@]}"; then
  echo "lint: run clang-format -i on the files above (clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1))" >&2
  exit 1
fi
echo "lint: clang-format clean (${#files[@]} files)"
if [ "${1:-}" = "--tidy" ]; then
  mapfile -t sources < <(git ls-files 'src/*.cc' 'backends/*.cc' 'kernels/*.cc')
  clang-tidy -p build --quiet "${sources[@]}"
fi
