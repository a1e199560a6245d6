#!/usr/bin/env bash
# ARM64 (aarch64) cross build with Debian 12's cross toolchain against its arm64 multiarch
# libraries, then the unit tests and an end-to-end smoke test under qemu-user (docs/deploy.md,
# "ARM64"). The CPU kernels run their NEON micro-kernels there; speeds under qemu are emulation,
# never a claim about ARM hardware.
#   scripts/cross_arm64.sh            install, build build-arm64/, run the unit tests and the smoke test
#   scripts/cross_arm64.sh build      install and build only
# Installs with apt (as root, or through sudo): the arm64 foreign architecture, crossbuild-essential-arm64,
# qemu-user and the arm64 -dev packages. libonnx-dev and libsimdjson-dev cannot be installed beside
# their amd64 twins (their files clash), so their arm64 libraries are unpacked into
# build-arm64/sysroot instead; the headers are the same for both architectures.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build-arm64}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

ARM_PACKAGES=(libprotobuf-dev libgrpc++-dev libssl-dev zlib1g-dev libgtest-dev libboost-dev libc6-dev)
dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
. scripts/apt_packages.sh
apt_install_missing crossbuild-essential-arm64 qemu-user "${ARM_PACKAGES[@]/%/:arm64}"

# The two libraries that are not co-installable, unpacked (apt-get download: no dpkg state).
SYSROOT="$PWD/$B/sysroot"
if [ ! -f "$SYSROOT/.done" ]; then
  rm -rf "$SYSROOT" && mkdir -p "$SYSROOT/debs"
  # apt fetches as its _apt user where it may write (as root it otherwise warns and falls back).
  if [ "$(id -u)" -eq 0 ] && id _apt > /dev/null 2>&1; then chown _apt "$SYSROOT/debs"; fi
  (cd "$SYSROOT/debs" && apt-get download -qq libonnx-dev:arm64 libonnx1:arm64 libonnxifi:arm64 \
    libsimdjson-dev:arm64 "$(apt-cache depends libsimdjson-dev:arm64 | awk '/Depends: libsimdjson[0-9]/ {print $2; exit}')")
  for d in "$SYSROOT"/debs/*.deb; do dpkg -x "$d" "$SYSROOT"; done
  touch "$SYSROOT/.done"
fi
LIBS="$SYSROOT/usr/lib/aarch64-linux-gnu"

if [ ! -f "$B/build.ninja" ]; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DNEREID_CUDA=OFF -DNEREID_PYTORCH=OFF \
    -DONNX_DIR="$LIBS/cmake/ONNX" -Dsimdjson_DIR="$LIBS/cmake/simdjson" \
    -DCMAKE_BUILD_RPATH="$LIBS"
fi
ninja -C "$B" nereid nereid_unit_tests nereid_backend_native nereid_backend_identity
readelf -h "$B/nereid" | grep -q "Machine:.*AArch64" || { echo "$B/nereid is not an AArch64 binary" >&2; exit 1; }
[ "${1:-}" = build ] && exit 0

# The arm64 dynamic loader and libraries come from the multiarch packages; qemu-aarch64 finds
# them at their usual paths.
echo "== arm64 unit tests under qemu-aarch64 (one process; NEON kernels, emulated)"
qemu-aarch64 "$B/nereid_unit_tests" --gtest_brief=1 ${NEREID_ARM64_GTEST_FILTER:+--gtest_filter=$NEREID_ARM64_GTEST_FILTER}
echo "== arm64 end-to-end smoke test under qemu-aarch64"
NEREID_BINARY="$PWD/$B/nereid" NEREID_EMULATOR=qemu-aarch64 \
  .venv/bin/python -m pytest -q tests/e2e/test_arm64_smoke.py
