#!/usr/bin/env bash
# A/B of two nereid binaries on the same machine in one run, the two servers measured in alternating
# rounds (ROUNDS, default 3) so that noise hits both: `simple` at concurrency 1 and 8 over HTTP and
# gRPC, recommend_model batched (concurrency 16, dynamic batching), and a 1 MiB FP32 input through an
# identity model (binary HTTP and gRPC raw) where copies of tensor bytes show. SET=house: simple and
# recommend_model over HTTP and gRPC at concurrency 1 and 64 instead.
# Usage: bench/ab_servers.sh BASELINE_BINARY [CANDIDATE_BINARY (default build/nereid)]
# Build a baseline from any commit with: git worktree add /tmp/base <ref> && (cd /tmp/base &&
#   cmake -S . -B build -G Ninja && ninja -C build nereid nereid_backend_native)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?baseline nereid binary}
CAND=${2:-build/nereid}
PYTHON=.venv/bin/python
. bench/common.sh
.venv/bin/python examples/generate_models.py >/dev/null
REPO=$(mktemp -d)
cp -r examples/models/. "$REPO/"
.venv/bin/python -c "import sys; sys.path.insert(0, 'tests/e2e'); import models; models.write_identity_models('$REPO')"
ab_pair "$BASE" "$CAND" "$REPO" --http-max-input-size=16777216
for who in baseline candidate; do  # what serves each model, so that a mismatch shows
  echo "$who: $(grep -o "model 'simple'[^;(]*" "$REPO/$who.log" | head -1)"
done
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "baseline: $BASE   candidate: $CAND"
# case: label model protocol concurrency [extra nereid-perf flags]
CASES=(
  "simple simple http 1" "simple simple http 8" "simple simple grpc 1" "simple simple grpc 8"
  "recommend_batched recommend_model http 16"
  "input_1MiB identity_fp32 http 1 --shape INPUT0:1,262144"
  "input_1MiB identity_fp32 grpc 1 --shape INPUT0:1,262144"
)
# SET=house: the request path's own cases (simple and recommend_model over both protocols at
# concurrency 1 and 64), for changes to the core's structure.
if [ "${SET:-}" = house ]; then
  CASES=()
  for model in simple recommend_model; do
    for proto in http grpc; do
      for c in 1 64; do CASES+=("$model $model $proto $c"); done
    done
  done
fi
printf '%-18s %-6s %-5s %-5s %-10s %12s %12s %12s\n' case proto conc round server 'p50 us' 'p99 us' 'infer/s'
for spec in "${CASES[@]}"; do
  read -r label model proto c extra <<<"$spec"
  [ -n "${ONLY:-}" ] && [ "$label" != "$ONLY" ] && continue  # ONLY=<case label> runs one case
  [ -n "${PROTO:-}" ] && [ "$proto" != "$PROTO" ] && continue  # PROTO=http or grpc
  for r in $(seq "${ROUNDS:-3}"); do
    for who in baseline candidate; do
      if [ $who = baseline ]; then port=$HA; [ $proto = grpc ] && port=$GA; else port=$HB; [ $proto = grpc ] && port=$GB; fi
      # shellcheck disable=SC2086
      build/nereid-perf -m "$model" -i $proto -u "localhost:$port" --concurrency-range $c $extra \
        -p "${MEASURE_MS:-3000}" --warmup 500 -q --json /tmp/ab.json >/dev/null
      "$PYTHON" - "$label" "$proto" "$c" "$r" "$who" <<'PY'
import json, sys
row = json.load(open("/tmp/ab.json"))
row = row[0] if isinstance(row, list) else row.get("results", [row])[0]
get = lambda *ks: next((row[k] for k in ks if k in row), float("nan"))
a = sys.argv
print(f"{a[1]:<18} {a[2]:<6} {a[3]:<5} {a[4]:<5} {a[5]:<10} {get('p50_us'):>12.0f} {get('p99_us'):>12.0f} {get('throughput', 'infer_per_sec'):>12.0f}")
PY
    done
  done
done
