#!/usr/bin/env bash
# Builds dist/nereid_<version>_<arch>.deb, the CPU package (docs/deploy.md), from its own release
# tree build-deb/ (NEREID_CUDA=OFF: nothing links CUDA's libraries, which no Debian package holds;
# BUILD=dir packages another tree, if every library it links is a Debian package's):
#   /usr/bin/nereid, /usr/bin/nereid-perf
#   /usr/lib/nereid/backends/  native, python (with its stub), onnxruntime (with the ONNX Runtime
#                              library it was built against), identity, repeat — not pytorch, which
#                              needs a libtorch the package cannot promise
#   /lib/systemd/system/nereid.service, /etc/default/nereid (the server's flags; a conffile)
#   /var/lib/nereid/models     the unit's model repository (empty), owned by the 'nereid' user
# Depends: the Debian packages that hold the shared libraries the binaries link (dpkg -S), at
# least the versions built against.
# CUDA=1 builds dist/nereid-cuda_<version>_<arch>.deb instead (it replaces nereid): release tree
# build-deb-cuda/ with the GPU path (nvcc; sm_90a), and the CUDA runtime and cuBLAS it links in
# /usr/lib/nereid/cuda, taken from NVIDIA's PyPI wheels (nvidia-cuda-runtime, nvidia-cublas) of
# the versions the build's toolkit has; the native backend finds them by its RUNPATH. The driver
# (libcuda.so.1) and NVML come from the host (the NVIDIA container toolkit puts them into a
# container). Usage: [CUDA=1] scripts/package_deb.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-dist}
BUILD=${BUILD:-}
CUDA=${CUDA:-0}
NAME=nereid
CUDA_LIBDIR=/usr/lib/nereid/cuda
if [ "$CUDA" = 1 ]; then
  NAME=nereid-cuda
  NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [ -x "$NVCC" ] || { echo "CUDA=1 needs nvcc (NVCC=...)" >&2; exit 1; }
fi
if [ -z "$BUILD" ]; then
  BUILD=build-deb
  FLAGS=(-DNEREID_CUDA=OFF)
  if [ "$CUDA" = 1 ]; then
    BUILD=build-deb-cuda
    # No build-tree RUNPATH (it would name this machine's toolkit): the package's own directory.
    FLAGS=(-DNEREID_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_SKIP_BUILD_RPATH=ON
      "-DCMAKE_MODULE_LINKER_FLAGS=-Wl,-rpath,$CUDA_LIBDIR")
  fi
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${FLAGS[@]}" \
    -DNEREID_BUILD_TESTS=OFF > /dev/null
  cmake --build "$BUILD" --target nereid nereid-perf nereid_backend_native nereid_backend_python \
    nereid_backend_onnxruntime nereid_backend_identity nereid_backend_repeat
fi
VERSION=$("$BUILD/nereid" --version | awk '{print $2}')
ARCH=$(dpkg --print-architecture)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
PKG="$STAGE/$NAME"
BACKENDS="$PKG/usr/lib/nereid/backends"
mkdir -p "$PKG/DEBIAN" "$PKG/usr/bin" "$BACKENDS/python" "$PKG/lib/systemd/system" \
  "$PKG/etc/default" "$PKG/usr/share/doc/nereid"

strip -o "$PKG/usr/bin/nereid" "$BUILD/nereid"
strip -o "$PKG/usr/bin/nereid-perf" "$BUILD/nereid-perf"
for b in native python onnxruntime identity repeat; do
  strip -o "$BACKENDS/libnereid_backend_$b.so" "$BUILD/backends/libnereid_backend_$b.so"
done
cp "$BUILD"/backends/python/nereid_python_stub.py "$BUILD"/backends/python/triton_python_backend_utils.py \
  "$BACKENDS/python/"
# The ONNX Runtime library the backend loads (from PyPI's wheel at build time, not a Debian package).
if [ -e "$BUILD/backends/onnxruntime/libonnxruntime.so" ]; then
  mkdir -p "$BACKENDS/onnxruntime"
  cp -L "$BUILD/backends/onnxruntime/libonnxruntime.so" "$BACKENDS/onnxruntime/"
fi
chmod 0644 "$BACKENDS"/*.so "$BACKENDS"/python/*.py
find "$BACKENDS" -name '*.so' -path '*/onnxruntime/*' -exec chmod 0644 {} +
# CUDA=1: the CUDA runtime and cuBLAS libraries of NVIDIA's wheels, the versions of the toolkit the
# GPU path was compiled with (cached in $WHEELS).
if [ "$CUDA" = 1 ]; then
  TOOLKIT=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  ver() { grep -E "define $1 " "$TOOLKIT/include/$2" | awk '{print $3}'; }
  CUBLAS_VERSION="$(ver CUBLAS_VER_MAJOR cublas_api.h).$(ver CUBLAS_VER_MINOR cublas_api.h).$(ver CUBLAS_VER_PATCH cublas_api.h).$(ver CUBLAS_VER_BUILD cublas_api.h)"
  CUDART_VERSION=$("$NVCC" --version | sed -n 's/.*, V\([0-9.]*\)$/\1/p')
  WHEELS=${WHEELS:-dist/wheels}
  mkdir -p "$WHEELS" "$PKG$CUDA_LIBDIR"
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$WHEELS" "nvidia-cublas==$CUBLAS_VERSION" \
    "nvidia-cuda-runtime==$CUDART_VERSION"
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    python3 - "$WHEELS" "$lib" "$PKG$CUDA_LIBDIR/$lib" <<'PY'
import glob, sys, zipfile
wheels, lib, out = sys.argv[1:]
for w in sorted(glob.glob(f"{wheels}/nvidia_*.whl")):
    names = [n for n in zipfile.ZipFile(w).namelist() if n.endswith("/lib/" + lib)]
    if names:
        open(out, "wb").write(zipfile.ZipFile(w).read(names[0]))
        sys.exit(0)
sys.exit(f"{lib}: in none of the wheels in {wheels}")
PY
  done
  chmod 0644 "$PKG$CUDA_LIBDIR"/*
fi

cat > "$PKG/lib/systemd/system/nereid.service" <<'EOF'
[Unit]
Description=Nereid inference server (Triton's protocols and model repositories)
Documentation=https://github.com/ file:///usr/share/doc/nereid/README.md
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=nereid
Group=nereid
EnvironmentFile=-/etc/default/nereid
ExecStart=/usr/bin/nereid serve $NEREID_ARGS
# SIGTERM: the drain grace and the exit timeout (in NEREID_ARGS) run before the exit.
KillSignal=SIGTERM
TimeoutStopSec=90
Restart=on-failure
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ReadOnlyPaths=/var/lib/nereid/models
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
EOF
sed -i 's|^Documentation=.*|Documentation=file:///usr/share/doc/nereid/README.md|' \
  "$PKG/lib/systemd/system/nereid.service"
cat > "$PKG/etc/default/nereid" <<'EOF'
# Flags of the nereid systemd unit (nereid serve --help; docs/server.md).
NEREID_ARGS="--model-repository=/var/lib/nereid/models --http-port=8000 --grpc-port=8001 --metrics-port=8002 --exit-timeout-secs=30"
EOF
cp README.md "$PKG/usr/share/doc/nereid/README.md"

# Depends: the package of each shared library any binary links, outside glibc's loader.
declare -A DEPS=()
while read -r lib; do
  real=$(readlink -f "$lib")
  owner=""
  for candidate in "$lib" "$real" "/usr$lib" "/usr$real" "${lib#/usr}" "${real#/usr}"; do
    owner=$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$owner" ] && break
  done
  [ -n "$owner" ] || { echo "no Debian package holds $lib" >&2; exit 1; }
  DEPS[$owner]=1
done < <(for f in "$PKG/usr/bin/"* "$BACKENDS"/*.so; do
  LD_LIBRARY_PATH="$PKG$CUDA_LIBDIR" ldd "$f"
done | awk '$3 ~ /^\// {print $3}' | grep -v -e '/onnxruntime/' -e "$PKG$CUDA_LIBDIR" | sort -u)
DEPENDS=""
for p in $(printf '%s\n' "${!DEPS[@]}" | sort); do
  DEPENDS+="${DEPENDS:+, }$p (>= $(dpkg-query -W -f='${Version}' "$p:$ARCH" 2>/dev/null || dpkg-query -W -f='${Version}' "$p"))"
done

CUDA_FIELDS=""
CUDA_DESCRIPTION=""
if [ "$CUDA" = 1 ]; then
  CUDA_DESCRIPTION="
 This build adds the native engine's CUDA path for NVIDIA GPUs (KIND_GPU;
 Hopper, sm_90a) with the CUDA runtime and cuBLAS it needs; the GPU driver
 comes from the host."
  CUDA_FIELDS="Provides: nereid
Conflicts: nereid
Replaces: nereid
"
fi
cat > "$PKG/DEBIAN/control" <<EOF
Package: $NAME
Version: $VERSION
Architecture: $ARCH
Maintainer: Nereid <nereid@localhost>
Section: net
Priority: optional
Depends: adduser, $DEPENDS
${CUDA_FIELDS}Recommends: python3, python3-numpy
Installed-Size: $(du -sk "$PKG" | cut -f1)
Description: inference server for Triton's protocols and model repositories
 Nereid serves models from a Triton model repository over the KServe v2
 protocol (HTTP and gRPC) with Triton's extensions: the native engine's CPU
 kernels, ONNX Runtime and Python models.${CUDA_DESCRIPTION}
 The nereid systemd unit serves /var/lib/nereid/models; its flags are in
 /etc/default/nereid.
EOF
echo "/etc/default/nereid" > "$PKG/DEBIAN/conffiles"
cat > "$PKG/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  mkdir -p /var/lib/nereid/models
  getent passwd nereid > /dev/null ||
    adduser --system --group --home /var/lib/nereid --no-create-home nereid > /dev/null
  chown nereid:nereid /var/lib/nereid
  if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
EOF
cat > "$PKG/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
if [ "$1" = purge ]; then
  rm -rf /var/lib/nereid
  getent passwd nereid > /dev/null && deluser --system nereid > /dev/null || true
fi
EOF
chmod 0755 "$PKG/DEBIAN/postinst" "$PKG/DEBIAN/postrm"
mkdir -p "$OUT"
DEB="$OUT/${NAME}_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group --build "$PKG" "$DEB" > /dev/null
echo "$DEB ($(du -h "$DEB" | cut -f1))"
