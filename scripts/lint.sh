#!/usr/bin/env bash
# clang-format check and clang-tidy over the project's own sources (uses build/compile_commands.json).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v '^tests/e2e/')
clang-format --dry-run -Werror "${files[@]}"
mapfile -t sources < <(git ls-files 'src/*.cc' 'backends/*.cc' 'kernels/*.cc')
clang-tidy -p build --quiet "${sources[@]}"
