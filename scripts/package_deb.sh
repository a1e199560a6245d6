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
# least the versions built against. Usage: scripts/package_deb.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-dist}
BUILD=${BUILD:-}
if [ -z "$BUILD" ]; then
  BUILD=build-deb
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNEREID_CUDA=OFF \
    -DNEREID_BUILD_TESTS=OFF > /dev/null
  cmake --build "$BUILD" --target nereid nereid-perf nereid_backend_native nereid_backend_python \
    nereid_backend_onnxruntime nereid_backend_identity nereid_backend_repeat
fi
VERSION=$("$BUILD/nereid" --version | awk '{print $2}')
ARCH=$(dpkg --print-architecture)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
PKG="$STAGE/nereid"
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
done < <(for f in "$PKG/usr/bin/"* "$BACKENDS"/*.so; do ldd "$f"; done |
  awk '$3 ~ /^\// {print $3}' | grep -v '/onnxruntime/' | sort -u)
DEPENDS=""
for p in $(printf '%s\n' "${!DEPS[@]}" | sort); do
  DEPENDS+="${DEPENDS:+, }$p (>= $(dpkg-query -W -f='${Version}' "$p"))"
done

cat > "$PKG/DEBIAN/control" <<EOF
Package: nereid
Version: $VERSION
Architecture: $ARCH
Maintainer: Nereid <nereid@localhost>
Section: net
Priority: optional
Depends: adduser, $DEPENDS
Recommends: python3, python3-numpy
Installed-Size: $(du -sk "$PKG" | cut -f1)
Description: inference server for Triton's protocols and model repositories
 Nereid serves models from a Triton model repository over the KServe v2
 protocol (HTTP and gRPC) with Triton's extensions: the native engine's CPU
 kernels, ONNX Runtime and Python models. The nereid systemd unit serves
 /var/lib/nereid/models; its flags are in /etc/default/nereid.
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
dpkg-deb --root-owner-group --build "$PKG" "$OUT/nereid_${VERSION}_${ARCH}.deb" > /dev/null
echo "$OUT/nereid_${VERSION}_${ARCH}.deb ($(du -h "$OUT/nereid_${VERSION}_${ARCH}.deb" | cut -f1))"
