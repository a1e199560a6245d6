#!/usr/bin/env bash
# recommend_model in each precision at saturation, models alternating per round (ROUNDS, default 3,
# of 4 s) on one server; nereid-perf over HTTP at CONCURRENCY sends one row per request.
#   DEVICE=cpu (default): the native engine in fp32 and int8 (`precision: int8`), and ONNX Runtime
#     in fp32, dynamic int8 and static QDQ int8 (tests/e2e/precision_models.py; dynamic batching
#     up to 32 rows, 2 instances of one thread each); CONCURRENCY default 16. Energy: the server's
#     accounting, on machines without RAPL an ESTIMATE (this process's CPU time x 10 W per busy
#     core, idle not included): it ranks CPU time per inference more than it meters joules.
#   DEVICE=gpu: recommend_model on KIND_GPU (examples/models_gpu: 2 instances, dynamic batching up
#     to 256 rows) in tf32, bf16 and int8; CONCURRENCY default 256. Energy: the server's accounting
#     of NVML's counter (a METER, GPU 0), idle share included.
# J/inference = the model's nereid_energy_joules_total / nereid_energy_inferences_total over its
# window. NEREID, PERF and PYTHON name the binaries (default: this checkout's build and venv).
# Usage: [DEVICE=gpu] bench/precision.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
NEREID=${NEREID:-build/nereid}
PERF=${PERF:-build/nereid-perf}
DEVICE=${DEVICE:-cpu}
. bench/common.sh
REPO=$(mktemp -d)/models
PID=""
trap 'kill $PID 2>/dev/null; wait 2>/dev/null || true; rm -rf "$(dirname "$REPO")"' EXIT
if [ "$DEVICE" = gpu ]; then
  cp -r examples/models_gpu "$REPO"
  "$PYTHON" examples/generate_models.py --out "$REPO" >/dev/null
  MODELS="recommend_tf32 recommend_bf16 recommend_int8"
  for p in tf32 bf16 int8; do
    "$PYTHON" -c 'import sys; sys.path.insert(0, "tests/e2e"); import precision_models as p; p.add_native_variant(*sys.argv[1:])' \
      "$REPO" "recommend_$p" "$p"
  done
  CONCURRENCY=${CONCURRENCY:-256}
else
  cp -r examples/models "$REPO"
  "$PYTHON" examples/generate_models.py --out "$REPO" >/dev/null
  "$PYTHON" tests/e2e/precision_models.py "$REPO" \
    'dynamic_batching { preferred_batch_size: [ 8, 16, 32 ] max_queue_delay_microseconds: 200 }'
  MODELS="recommend_model recommend_int8 recommend_ort recommend_ort_dynamic recommend_ort_qdq"
  CONCURRENCY=${CONCURRENCY:-16}
fi
H=$(free_port)
M=$(free_port)
"$NEREID" serve --model-repository="$REPO" --http-port="$H" --grpc-port=0 --metrics-port="$M" \
  >"$REPO/../server.log" 2>&1 &
PID=$!
wait_ready "http://localhost:$H/v2/health/ready"
# joules and inferences attributed to MODEL so far (the estimate's scope).
energy() {
  curl -s "localhost:$M/metrics" | "$PYTHON" -c '
import re, sys
j = i = 0.0
for line in sys.stdin:
    if "model=\"%s\"" % sys.argv[1] not in line: continue
    v = float(line.rsplit(" ", 1)[1])
    if line.startswith("nereid_energy_joules_total"): j += v
    elif line.startswith("nereid_energy_inferences_total"): i += v
print(j, i)' "$1"
}
echo "date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "ISA: $(grep -o -w 'avx2\|avx512f\|avx512_vnni\|avx_vnni\|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
grep -o "model 'recommend_int8'.*micro-kernel [a-z0-9-]*\|model 'recommend_int8' on GPU.*" "$REPO/../server.log" | head -1
printf '%-22s %-5s %10s %10s %10s %12s\n' model round 'infer/s' 'p50 us' 'p99 us' 'mJ/inf'
for r in $(seq "${ROUNDS:-3}"); do
  for m in $MODELS; do
    read -r j0 i0 < <(energy "$m")
    line=$("$PERF" -m "$m" -u "localhost:$H" --concurrency-range "$CONCURRENCY" \
      -p 4000 --warmup 1000 -q | grep '^| concurrency')
    sleep 0.5  # the accounting's last ticks
    read -r j1 i1 < <(energy "$m")
    printf '%-22s %-5s %10s %10s %10s %12s\n' "$m" "$r" \
      "$(echo "$line" | cut -d'|' -f4 | xargs)" "$(echo "$line" | cut -d'|' -f5 | xargs)" \
      "$(echo "$line" | cut -d'|' -f8 | xargs)" \
      "$("$PYTHON" -c "import sys; a, b, c, d = map(float, sys.argv[1:]); print('%.3f' % (1e3 * (c - a) / (d - b) if d > b else 0))" \
         "$j0" "$i0" "$j1" "$i1")"
  done
done
