#!/usr/bin/env bash
# Runs every test: installs what is missing, checks the formatting (scripts/lint.sh), builds, runs
# clang-tidy (scripts/tidy.sh), runs
# the C++ unit tests and fuzz corpora (ctest), the end-to-end tests (pytest: the real binary on
# ports it picks, driven by the real tritonclient), the arm64 cross build with its unit tests and
# smoke test under qemu-user (scripts/cross_arm64.sh), then the sanitizer pass (scripts/sanitize.sh).
# See docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
echo "== lint (scripts/lint.sh: clang-format, layering, ruff)"
scripts/lint.sh
scripts/build.sh
echo "== clang-tidy (scripts/tidy.sh: the checks of .clang-tidy, against the build's compile commands)"
scripts/tidy.sh
echo "== unit tests (ctest)"
ctest --test-dir build --output-on-failure -j "$(nproc)"
echo "== end-to-end tests (pytest)"
NEREID_BINARY="$PWD/build/nereid" .venv/bin/python -m pytest -q tests/e2e "$@"
if [ "${NEREID_SKIP_ARM64:-0}" != 1 ]; then
  echo "== arm64 (scripts/cross_arm64.sh: cross build, unit tests and smoke test under qemu-user; NEREID_SKIP_ARM64=1 leaves it out)"
  scripts/cross_arm64.sh
fi
if [ "${NEREID_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== sanitizers (scripts/sanitize.sh; NEREID_SKIP_SANITIZERS=1 leaves them out)"
  scripts/sanitize.sh
fi
