#!/usr/bin/env bash
# Builds the OCI image localhost/nereid:cpu (from the nereid .deb) or localhost/nereid:cuda (from
# nereid-cuda's: the GPU path with the CUDA runtime and cuBLAS; the driver comes from the host
# through the NVIDIA container toolkit) from Debian packages (docs/deploy.md): a minimal Debian 12
# root (debootstrap --variant=minbase), the .deb installed with apt (its Depends from Debian's
# archive), package caches and documentation removed, imported into podman with the server as
# entrypoint and a non-root user. Prints the image's size.
# Needs root, debootstrap and podman (apt); the root is cached in $ROOTFS_CACHE.
# Usage: scripts/build_image.sh [path/to/nereid.deb]   (default: builds one, scripts/package_deb.sh;
#        CUDA=1 builds nereid-cuda's)
set -euo pipefail
cd "$(dirname "$0")/.."
DEB=${1:-}
if [ -z "$DEB" ]; then DEB=$(scripts/package_deb.sh dist | tail -1 | cut -d' ' -f1); fi
TAG=localhost/nereid:cpu
EXTRA=()
if [ "$(dpkg-deb -f "$DEB" Package)" = nereid-cuda ]; then
  TAG=localhost/nereid:cuda
  # What the NVIDIA container toolkit reads to mount the driver's libraries and the GPUs.
  EXTRA=(--change 'ENV NVIDIA_VISIBLE_DEVICES=all'
    --change 'ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility')
fi
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CACHE=${ROOTFS_CACHE:-/var/tmp/nereid-debootstrap-bookworm}
if [ ! -x "$CACHE/usr/bin/apt-get" ]; then
  rm -rf "$CACHE.partial"
  debootstrap --variant=minbase bookworm "$CACHE.partial" "$MIRROR" > /dev/null
  mv "$CACHE.partial" "$CACHE"
fi
ROOT=$(mktemp -d /var/tmp/nereid-image.XXXXXX)
trap 'umount "$ROOT/proc" 2> /dev/null || true; rm -rf "$ROOT"' EXIT
cp -a "$CACHE/." "$ROOT/"
cp "$DEB" "$ROOT/tmp/nereid.deb"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2> /dev/null || true
mount -t proc proc "$ROOT/proc"
# Debian's updates and security archives too: the image gets today's fixes (and the library
# versions the .deb was built against, which may be newer than the release's).
SECURITY=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
  "$MIRROR" "$MIRROR" "$SECURITY" > "$ROOT/etc/apt/sources.list"
chroot "$ROOT" /bin/sh -c 'export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get upgrade -y -qq > /dev/null &&
  apt-get install -y -qq --no-install-recommends /tmp/nereid.deb > /dev/null'
umount "$ROOT/proc"
# What a server image does not need: package lists and caches, documentation, locales, apt itself
# stays (a derived image may add python3 for Python models).
rm -rf "$ROOT"/tmp/nereid.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* \
  "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
  "$ROOT"/usr/share/locale/* "$ROOT"/var/log/*
install -d -o 65532 -g 65532 "$ROOT/models"
tar -C "$ROOT" --numeric-owner -c . |
  podman import \
    --change 'ENTRYPOINT ["/usr/bin/nereid"]' \
    --change 'CMD ["serve", "--model-repository=/models"]' \
    --change 'USER 65532:65532' \
    --change 'EXPOSE 8000' --change 'EXPOSE 8001' --change 'EXPOSE 8002' \
    --change 'STOPSIGNAL SIGTERM' \
    "${EXTRA[@]}" - "$TAG" > /dev/null
echo "$TAG: $(podman image inspect "$TAG" --format '{{.Size}}') bytes"
