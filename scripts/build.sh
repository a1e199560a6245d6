#!/usr/bin/env bash
# Configures and builds Nereid (Release with debug info) into build/ with Ninja and ccache.
# BUILD_DIR, CMAKE_BUILD_TYPE, CMAKE_ARGS and NINJA_TARGETS pick another build.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: paths relative to the checkout and the working directory left out of the hash, so a clone
# elsewhere (CI's) hits what another clone compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" ${CMAKE_ARGS:-}
fi
# NINJA_TARGETS: only those (default: everything).
# shellcheck disable=SC2086
ninja -C "$BUILD_DIR" ${NINJA_TARGETS:-}
