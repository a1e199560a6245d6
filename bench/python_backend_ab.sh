#!/usr/bin/env bash
# A/B of two Python backends (two backend directories) under one server binary, measured in
# alternating rounds (ROUNDS, default 3) so that noise hits both: examples/models_python's add_sub
# over HTTP at concurrency 1 and 8 (nereid-perf, 3 s windows).
# Usage: bench/python_backend_ab.sh BASELINE_BACKEND_DIR [CANDIDATE_BACKEND_DIR (build/backends)]
# A baseline from any commit: git worktree add /tmp/base <ref> && (cd /tmp/base &&
#   cmake -S . -B build -G Ninja -DNEREID_CUDA=OFF && ninja -C build nereid_backend_python)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?baseline backend directory}
NEW=${2:-build/backends}
ROUNDS=${ROUNDS:-3}
PYTHON=.venv/bin/python
. bench/common.sh
start() {  # start BACKEND_DIR -> "pid http_port"
  local h
  h=$(free_port)
  NEREID_PYTHON=$PWD/.venv/bin/python build/nereid serve --model-repository=examples/models_python \
    --backend-directory="$1" --http-port="$h" --grpc-port=0 --allow-metrics=false \
    --log-info=false >/dev/null 2>&1 &
  echo "$! $h"
}
read -r PA HA < <(start "$OLD")
read -r PB HB < <(start "$NEW")
trap 'kill $PA $PB 2>/dev/null; wait 2>/dev/null || true' EXIT
wait_ready "http://localhost:$HA/v2/health/ready"
wait_ready "http://localhost:$HB/v2/health/ready"
for r in $(seq "$ROUNDS"); do
  for c in 1 8; do
    for side in baseline candidate; do
      port=$HA
      [ $side = candidate ] && port=$HB
      line=$(build/nereid-perf -m add_sub -u "localhost:$port" --concurrency-range "$c" -p 3000 \
        --warmup 500 -q 2>&1 | tail -1)
      echo "round $r c=$c $side: $line"
    done
  done
done
