#!/usr/bin/env bash
# The server's CPU time per request of two nereid binaries under the same load, alternating rounds
# (ROUNDS, default 4): utime+stime of each server process from /proc/<pid>/stat around a 4 s
# nereid-perf run of `simple` (PROTO http or grpc, default grpc; concurrency C, default 1), divided
# by the requests answered. Work per request, free of the scheduling noise that moves latency.
# Usage: bench/ab_cpu_per_request.sh BASELINE_BINARY [CANDIDATE_BINARY (default build/nereid)]
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?baseline nereid binary}
CAND=${2:-build/nereid}
PROTO=${PROTO:-grpc}
PYTHON=.venv/bin/python
. bench/common.sh
REPO=$(mktemp -d)
cp -r examples/models/. "$REPO/"
ab_pair "$BASE" "$CAND" "$REPO"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores; $PROTO, concurrency ${C:-1}"
for r in $(seq "${ROUNDS:-4}"); do
  for who in baseline candidate; do
    if [ $who = baseline ]; then pid=$PA; port=$GA; [ "$PROTO" = http ] && port=$HA
    else pid=$PB; port=$GB; [ "$PROTO" = http ] && port=$HB; fi
    c0=$(cpu_ticks $pid)
    build/nereid-perf -m simple -i "$PROTO" -u "localhost:$port" --concurrency-range "${C:-1}" \
      -p 4000 --warmup 500 -q --json /tmp/ab_cpu.json >/dev/null
    c1=$(cpu_ticks $pid)
    "$PYTHON" - "$who" "$r" "$c0" "$c1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
row = json.load(open("/tmp/ab_cpu.json"))
row = row[0] if isinstance(row, list) else row.get("results", [row])[0]
tput = row.get("throughput", row.get("infer_per_sec"))
requests = tput * 4.5  # the measured 4 s and the 0.5 s warm-up both load the server
seconds = (float(sys.argv[4]) - float(sys.argv[3])) / float(sys.argv[5])
print(f"{sys.argv[1]:<10} round {sys.argv[2]}  infer/s {tput:8.0f}  p50 {row.get('p50_us'):6.0f} us"
      f"  server CPU per request {seconds * 1e6 / requests:6.1f} us")
PY
  done
done
