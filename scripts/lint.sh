#!/usr/bin/env bash
# The house rules a machine can check. Default (what scripts/test.sh and CI run): clang-format over
# the project's C++, CUDA and proto sources (a generated file turns it off inside itself, as
# kernels/cuda/wgmma.cuh does), the layering check (scripts/check_layers.py) and ruff on Python
# (ruff.toml). clang-tidy needs a built tree: scripts/tidy.sh, which scripts/test.sh runs after
# the build.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.proto' | grep -v '^tests/e2e/')
if ! clang-format --dry-run -Werror "${files[@]}"; then
  echo "lint: run clang-format -i on the files above (clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1))" >&2
  exit 1
fi
echo "lint: clang-format clean (${#files[@]} files)"
# The layer order of docs/architecture.md: no include from src/<area>/ up to an area above it.
python3 scripts/check_layers.py
# Python: pyflakes' checks through ruff (ruff.toml), when the virtual environment has it.
if [ -x .venv/bin/ruff ]; then
  .venv/bin/ruff check -q . && echo "lint: ruff clean"
else
  echo "lint: .venv/bin/ruff missing (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
