#!/usr/bin/env bash
# Runs on the lent device machine: recommend_model on the GPU under the configurations
# model_analyzer tried (bench/results/model_analyzer_h200/recommend_remote), each loaded through the
# repository API with a config override and driven by the real perf_analyzer over gRPC at one
# concurrency (three windows, the last reported); beside each row, Nereid's own statistics over the
# whole run: rows per execution, and queue and compute time per request. Says where the time of a
# slow configuration goes. Carry: .devcarry (SERVE_ONLY=1 MODELS= scripts/device_carry.sh).
# Usage: [CONCURRENCY=8 SECONDS_EACH=4 KIND=KIND_GPU PA=perf_analyzer] bench/gpu_batching_configs.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/device_env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
M=/tmp/batching_models
device_models "$M" examples/models_gpu/recommend_model || exit 1
"$C/bin/nereid" serve --model-repository="$M" --model-control-mode=explicit \
  --http-port=8000 --grpc-port=8001 --metrics-port=8002 > "$OUT/nereid.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
PYTHON=python3
. bench/common.sh
wait_ready http://localhost:8000/v2/health/ready 300 || { tail "$OUT/nereid.log"; exit 1; }
python3 - "${PA:-$C/bin/perf_analyzer}" "${CONCURRENCY:-8}" "${SECONDS_EACH:-4}" "$OUT" "${KIND:-KIND_GPU}" <<'EOF'
import json, subprocess, sys, urllib.request

pa, conc, secs, out, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
base = "http://localhost:8000/v2"
load = [pa, "-m", "recommend_model", "-i", "grpc", "-u", "localhost:8001", "--concurrency-range", str(conc)]

def call(path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=120) as r:
        text = r.read()
    return json.loads(text) if text else {}

def stats():
    s = call("/models/recommend_model/stats")["model_stats"]
    return s[0] if s else {}

# (label, instances, max_batch_size, max_queue_delay_us or None for no dynamic batching)
variants = [("shipped: 2 inst, mb 256, delay 100us", 2, 256, 100),
            ("2 inst, mb 256, delay 0", 2, 256, 0),
            ("1 inst, mb 256, delay 100us", 1, 256, 100),
            ("1 inst, mb 256, delay 0", 1, 256, 0),
            ("1 inst, mb 1 (MA config_0)", 1, 1, 0),
            ("2 inst, mb 2 (MA config_3)", 2, 2, 0),
            ("2 inst, mb 256, no batcher", 2, 256, None)]
print(f"perf_analyzer gRPC, concurrency {conc}, {secs} s windows; server columns from "
      "/v2/models/recommend_model/stats over the same run")
print(f"{'configuration':40s} {'infer/s':>9s} {'p50 ms':>7s} {'p99 ms':>7s} {'rows/exec':>9s} "
      f"{'queue us':>8s} {'compute us':>10s} {'request us':>10s}")
for label, inst, mb, delay in variants:
    cfg = {"name": "recommend_model", "backend": "native", "max_batch_size": mb,
           "input": [{"name": "input__0", "data_type": "TYPE_FP32", "dims": [1024]}],
           "output": [{"name": "output__0", "data_type": "TYPE_FP32", "dims": [1000]}],
           "instance_group": [{"kind": kind, "count": inst}],
           "parameters": {"precision": {"string_value": "tf32"}}}
    if delay is not None:
        cfg["dynamic_batching"] = {"max_queue_delay_microseconds": delay}
    call("/repository/models/recommend_model/load", {"parameters": {"config": json.dumps(cfg)}})
    # Warm the configuration (CUDA graphs, clocks) before the window that counts.
    subprocess.run(load + ["--measurement-interval", "1500", "--max-trials", "1"],
                   capture_output=True, timeout=120)
    before = stats()
    csv = f"{out}/pa_{inst}_{mb}_{delay}.csv"
    r = subprocess.run(load + ["--measurement-interval", str(secs * 1000), "--stability-percentage", "100",
                               "--max-trials", "3", "-f", csv], capture_output=True, text=True, timeout=300)
    after = stats()
    if r.returncode != 0:
        print(f"{label:40s} perf_analyzer failed: {r.stdout[-300:]} {r.stderr[-300:]}")
        continue
    head, row = open(csv).read().splitlines()[:2]
    col = dict(zip(head.split(","), row.split(",")))
    inf = max(after["inference_count"] - before.get("inference_count", 0), 1)
    exe = max(after["execution_count"] - before.get("execution_count", 0), 1)

    def per_request_us(key):
        was = before.get("inference_stats", {}).get(key, {}).get("ns", 0)
        return (after["inference_stats"][key]["ns"] - was) / inf / 1e3

    print(f"{label:40s} {float(col['Inferences/Second']):9.0f} {float(col['p50 latency']) / 1e3:7.2f} "
          f"{float(col['p99 latency']) / 1e3:7.2f} {inf / exe:9.2f} {per_request_us('queue'):8.1f} "
          f"{per_request_us('compute_infer'):10.1f} {per_request_us('success'):10.1f}")
EOF
