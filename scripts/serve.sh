#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a serving Nereid: installs what is missing, builds,
# generates the example models and starts `nereid serve` on examples/models
# (HTTP 8000; gRPC 8001 and metrics 8002 reserved). Extra arguments go to `nereid serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
.venv/bin/python examples/generate_models.py
# Python models (backend: "python") run in .venv's interpreter, which has numpy.
export NEREID_PYTHON="${NEREID_PYTHON:-$PWD/.venv/bin/python}"
exec build/nereid serve --model-repository=examples/models "$@"
