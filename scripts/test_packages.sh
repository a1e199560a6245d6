#!/usr/bin/env bash
# The packages for real (docs/deploy.md; root, network to Debian's archive):
#  1. the .deb installs with apt on a fresh Debian 12 root (debootstrap) and, run there as its
#     'nereid' user, serves the example repository to tritonclient;
#  2. the CPU image built from it (scripts/build_image.sh) runs deploy/kubernetes/nereid.yaml under
#     `podman kube play` (Deployment, PVC; podman ignores Services and probes) and serves the same
#     repository from the claim's volume, then stops cleanly on `podman kube down`;
#  3. where nvcc is found (CUDA=0 leaves it out): the nereid-cuda .deb and the CUDA image built from
#     it run under podman and serve the same repository; the native backend loads with the CUDA
#     runtime and cuBLAS the package carries, and a KIND_GPU model on a host without a GPU fails
#     its load with the reason while the rest serves. (On a GPU host, run the image with the NVIDIA
#     container toolkit: --device nvidia.com/gpu=all.)
# Installs podman, runc and debootstrap when missing; podman gets runc and the lower ulimits this
# sandbox allows (containers.conf). Prints the image size.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for tool in podman runc debootstrap; do command -v "$tool" > /dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; fi
if [ ! -e /etc/containers/containers.conf ]; then
  mkdir -p /etc/containers
  cat > /etc/containers/containers.conf <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
fi
PY=.venv/bin/python
MODELS=$(mktemp -d /var/tmp/nereid-models.XXXXXX)
CHROOT=""
cleanup() {
  podman kube down deploy/kubernetes/nereid.yaml > /dev/null 2>&1 || true
  podman volume rm -f nereid-models > /dev/null 2>&1 || true
  if [ -n "$CHROOT" ]; then
    pkill -f "$CHROOT/usr/bin/nereid" 2> /dev/null || true
    umount "$CHROOT/proc" 2> /dev/null || true
    rm -rf "$CHROOT"
  fi
  rm -rf "$MODELS"
}
trap cleanup EXIT
cp -r examples/models/. "$MODELS/"
$PY examples/generate_models.py --out "$MODELS" > /dev/null
chmod -R a+rX "$MODELS"

infer() {  # infer <host:port>: ready, then 'simple' answers INPUT0 + INPUT1
  $PY - "$1" <<'EOF'
import sys, time
import numpy as np
import tritonclient.http as httpclient
c = httpclient.InferenceServerClient(sys.argv[1])
deadline = time.time() + 120
while True:
    try:
        if c.is_server_ready():
            break
    except Exception:
        pass
    if time.time() > deadline:
        sys.exit("not ready in 120 s")
    time.sleep(0.5)
a = np.arange(16, dtype=np.int32).reshape(1, 16)
inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
inputs[0].set_data_from_numpy(a)
inputs[1].set_data_from_numpy(np.ones_like(a))
assert (c.infer("simple", inputs).as_numpy("OUTPUT0") == a + 1).all()
print(f"  {sys.argv[1]}: ready, simple answered; models:",
      ", ".join(m["name"] for m in c.get_model_repository_index()))
EOF
}

echo "== the .deb and the image (scripts/build_image.sh)"
DEB=$(CUDA=0 scripts/package_deb.sh dist | tail -1 | cut -d' ' -f1)  # the CPU one, whatever CUDA says
echo "  $DEB: $(du -h "$DEB" | cut -f1)"
scripts/build_image.sh "$DEB"

echo "== the .deb on a fresh Debian 12 root"
CACHE=${ROOTFS_CACHE:-/var/tmp/nereid-debootstrap-bookworm}
CHROOT=$(mktemp -d /var/tmp/nereid-deb-test.XXXXXX)
cp -a "$CACHE/." "$CHROOT/"
cp "$DEB" "$CHROOT/tmp/nereid.deb"
cp /etc/resolv.conf "$CHROOT/etc/resolv.conf" 2> /dev/null || true
mount -t proc proc "$CHROOT/proc"
chroot "$CHROOT" /bin/sh -c 'export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq /tmp/nereid.deb > /dev/null'
chroot "$CHROOT" dpkg -s nereid | grep -E '^(Status|Version):' | sed 's/^/  /'
test -f "$CHROOT/lib/systemd/system/nereid.service" && chroot "$CHROOT" getent passwd nereid > /dev/null
cp -r "$MODELS/." "$CHROOT/var/lib/nereid/models/"
chroot --userspec=nereid:nereid "$CHROOT" /usr/bin/nereid serve \
  --model-repository=/var/lib/nereid/models --http-port=18100 --grpc-port=18101 --metrics-port=18102 \
  > /var/tmp/nereid-deb-test.log 2>&1 &
infer localhost:18100
kill -TERM %1 && wait %1 && echo "  SIGTERM: exit 0"

echo "== podman kube play deploy/kubernetes/nereid.yaml"
podman volume rm -f nereid-models > /dev/null 2>&1 || true
# Created, not started: the claim's volume gets the repository first, as a provisioned PV would.
podman kube play --start=false deploy/kubernetes/nereid.yaml > /dev/null
cp -r "$MODELS/." "$(podman volume inspect nereid-models --format '{{.Mountpoint}}')/"
podman pod start "$(podman pod ps --format '{{.Name}}' | head -1)" > /dev/null
podman pod ps --format '  pod {{.Name}}: {{.Status}}, {{.NumberOfContainers}} containers'
CTR=$(podman ps --filter label=io.kubernetes.container.name=nereid --format '{{.Names}}' | head -1)
[ -n "$CTR" ] || CTR=$(podman ps --format '{{.Names}}' | grep -v infra | head -1)
IP=$(podman inspect "$(podman pod ps --format '{{.InfraId}}' | head -1)" \
  --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}')
infer "$IP:8000"
podman exec "$CTR" /usr/bin/nereid --version | sed 's/^/  in the container: /'
POD=$(podman pod ps --format '{{.Name}}' | head -1)
podman pod stop -t 60 "$POD" > /dev/null  # SIGTERM: the drain grace, then the exit
podman logs "$CTR" 2>&1 | grep -E "signal 15|all requests answered" | sed 's/^/  /'
podman logs "$CTR" 2>&1 | grep -q "all requests answered"
podman kube down deploy/kubernetes/nereid.yaml > /dev/null

if [ "${CUDA:-1}" = 1 ] && { command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  echo "== the CUDA .deb and image (CUDA=1 scripts/package_deb.sh, scripts/build_image.sh)"
  CUDA_DEB=$(CUDA=1 scripts/package_deb.sh dist | tail -1 | cut -d' ' -f1)
  echo "  $CUDA_DEB: $(du -h "$CUDA_DEB" | cut -f1)"
  scripts/build_image.sh "$CUDA_DEB"
  mkdir -p "$MODELS/recommend_gpu"
  cp -r "$MODELS/recommend_model/1" "$MODELS/recommend_model/item_labels.txt" "$MODELS/recommend_gpu/"
  sed 's/name: "recommend_model"/name: "recommend_gpu"/' examples/models_gpu/recommend_model/config.pbtxt \
    > "$MODELS/recommend_gpu/config.pbtxt"
  chmod -R a+rX "$MODELS"
  podman rm -f nereid-cuda-test > /dev/null 2>&1 || true
  podman run -d --name nereid-cuda-test --network host -v "$MODELS:/models:ro" localhost/nereid:cuda \
    serve --model-repository=/models --http-port=18200 --grpc-port=18201 --metrics-port=18202 \
    --exit-on-error=false > /dev/null
  infer localhost:18200
  podman logs nereid-cuda-test 2>&1 | grep -q "loaded backend 'native'"
  if [ -e /dev/nvidiactl ]; then
    echo "  a GPU here: run the image with --device nvidia.com/gpu=all to serve recommend_gpu"
  else
    podman logs nereid-cuda-test 2>&1 | grep -E "failed to load 'recommend_gpu'" | head -1 | sed 's/^/  /'
    podman logs nereid-cuda-test 2>&1 | grep -q "KIND_GPU, but no GPU is available"
  fi
  podman stop -t 30 nereid-cuda-test > /dev/null
  podman logs nereid-cuda-test 2>&1 | grep -q "all requests answered"
  podman rm nereid-cuda-test > /dev/null
fi
echo "packages: OK"
