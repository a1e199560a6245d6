#!/usr/bin/env bash
# Runs every test: installs what is missing, checks the formatting (scripts/lint.sh), builds, runs
# clang-tidy (scripts/tidy.sh), runs
# the C++ unit tests and fuzz corpora (ctest), the end-to-end tests (pytest: the real binary on
# ports it picks, driven by the real tritonclient), the arm64 cross build with its unit tests and
# smoke test under qemu-user (scripts/cross_arm64.sh), then the sanitizer pass (scripts/sanitize.sh).
# Each stage's time is printed as it ends and again, all together, at the end. See docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every build below (plain, ASan, TSan, arm64) shares ccache across clones (see scripts/build.sh).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
STAGES=()
START=$SECONDS
stage() {  # NAME COMMAND...: runs COMMAND as one timed stage
  local name=$1 begun=$SECONDS
  shift
  echo "== $name"
  "$@"
  STAGES+=("$(printf '%6d s  %s' $((SECONDS - begun)) "$name")")
  echo "== $name: $((SECONDS - begun)) s"
}
summary() {
  echo "== stage times (total $((SECONDS - START)) s)"
  printf '%s\n' "${STAGES[@]}"
}
trap summary EXIT
stage "install (scripts/install-deps.sh)" scripts/install-deps.sh
stage "lint (scripts/lint.sh: clang-format, layering, ruff)" scripts/lint.sh
stage "build (scripts/build.sh)" scripts/build.sh
stage "clang-tidy (scripts/tidy.sh: the checks of .clang-tidy)" scripts/tidy.sh
stage "unit tests (ctest)" ctest --test-dir build --output-on-failure -j "$(nproc)"
# (A passing test's temporary repositories and models are deleted at the end: a run left 1-2 GB
# under /tmp, and CI's disk once filled in the ASan build after it.)
stage "end-to-end tests (pytest; the 20 slowest listed)" \
  env NEREID_BINARY="$PWD/build/nereid" .venv/bin/python -m pytest -q --durations=20 \
  -o tmp_path_retention_policy=failed tests/e2e "$@"
if [ "${NEREID_SKIP_ARM64:-0}" != 1 ]; then
  stage "arm64 (scripts/cross_arm64.sh; NEREID_SKIP_ARM64=1 leaves it out)" scripts/cross_arm64.sh
fi
if [ "${NEREID_SKIP_SANITIZERS:-0}" != 1 ]; then
  stage "sanitizers (scripts/sanitize.sh; NEREID_SKIP_SANITIZERS=1 leaves them out)" \
    scripts/sanitize.sh
fi
