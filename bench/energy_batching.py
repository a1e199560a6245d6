"""Energy-aware batching on one GPU, run on the device machine (scripts/gpu_device_run.sh, section
"batching"): recommend_model tf32 on KIND_GPU, one-row requests at fixed offered loads, served by
one Nereid with several copies of the model that differ only in batching:
  none       no dynamic_batching (every request its own batch)
  dNNNN      dynamic_batching with max_queue_delay_microseconds NNNN (no preferred sizes)
  energy     the latency-goal mode with nereid.batching_objective "energy", p99 goal GOAL_US
and, beside them, PyTorch 2.x replaying the same MLP from a CUDA graph at the same rate (batch 1
and batch LOOP_BATCH), the floor of what any server could reach. Per (load, variant): GPU 0's
energy from NVML's total-energy counter over the measured windows (a meter; whole device, idle
included) divided by the inferences completed, the p99 of each 1 s window (nereid-perf), and the
share of windows whose p99 met the goal. Variants run interleaved at each load, in REPEATS rounds.

Usage: python3 bench/energy_batching.py NEREID_BINARY NEREID_PERF --models DIR
Env: KIND (KIND_GPU; KIND_CPU for a smoke run), RATES ("2000 10000 20000"), DELAYS ("0 250 500 1000 2000"), GOAL_US (5000), WINDOWS (8),
     REPEATS (1), INSTANCES (2), LOOP_BATCH (16), DIST (constant)
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from energy_attribution import Server  # noqa: E402
from gpu_serving import mlp_graph, replay_paced  # noqa: E402

RATES = [int(r) for r in os.environ.get("RATES", "2000 10000 20000").split()]
DELAYS = [int(d) for d in os.environ.get("DELAYS", "0 250 500 1000 2000").split()]
GOAL_US = int(os.environ.get("GOAL_US", 5000))
WINDOWS = int(os.environ.get("WINDOWS", 8))
REPEATS = int(os.environ.get("REPEATS", 1))
INSTANCES = int(os.environ.get("INSTANCES", 2))
LOOP_BATCH = int(os.environ.get("LOOP_BATCH", 16))
DIST = os.environ.get("DIST", "constant")
KIND = os.environ.get("KIND", "KIND_GPU")  # KIND_CPU: a smoke run of the bench on a machine without one
MAX_BATCH = 256


def variants():
    out = {"none": ""}
    for d in DELAYS:
        out[f"d{d}"] = f"dynamic_batching {{ max_queue_delay_microseconds: {d} }}\n"
    out["energy"] = (
        "dynamic_batching { }\n"
        f'parameters {{ key: "nereid.latency_goal_us" value {{ string_value: "{GOAL_US}" }} }}\n'
        'parameters { key: "nereid.batching_objective" value { string_value: "energy" } }\n')
    return out


def repository(models):
    repo = tempfile.mkdtemp(prefix="energy_batching_")
    src = os.path.join(models, "recommend_model")
    for name, batching in variants().items():
        dst = os.path.join(repo, f"rec_{name}")
        shutil.copytree(src, dst)
        text = open(os.path.join(src, "config.pbtxt")).read()
        text = re.sub(r'name: "recommend_model"', f'name: "rec_{name}"', text)
        text = re.sub(r"max_batch_size: \d+", f"max_batch_size: {MAX_BATCH}", text)
        text = re.sub(r"instance_group \[[^\]]*\]", "", text)
        text = re.sub(r"dynamic_batching \{.*?\n\}\n", "", text, flags=re.S)
        gpus = " gpus: [ 0 ]" if KIND == "KIND_GPU" else ""
        text += (f"\ninstance_group [ {{ kind: {KIND} count: {INSTANCES}{gpus} }} ]\n"
                 'parameters { key: "precision" value { string_value: "tf32" } }\n' + batching)
        open(os.path.join(dst, "config.pbtxt"), "w").write(text)
    return repo


def gpu_joules(scrape):
    """GPU 0's NVML counter; without one (a smoke run) every scope the server meters."""
    nvml = [v for k, v in scrape.items() if k.startswith("nv_energy_consumption{gpu_uuid=")]
    if nvml:
        return nvml[0]
    return sum(v for k, v in scrape.items() if k.startswith("nereid_energy_metered_joules_total"))


def inferences(scrape, model):
    return sum(v for k, v in scrape.items()
               if k.startswith("nv_inference_count{") and f'model="{model}"' in k)


def perf(perf_bin, server, model, rate, windows, measure_ms=1000):
    # 'windows' consecutive 1 s windows at (almost) the same rate: one line each, after one more
    # that is dropped (it holds nereid-perf opening its connections).
    top = rate + windows
    res = subprocess.run([perf_bin, "-m", model, "-u", f"127.0.0.1:{server.http}",
                          "--request-rate-range", f"{rate}:{top}:1", "--request-distribution", DIST,
                          "-p", str(measure_ms), "--warmup", "0", "-q", "--max-threads", "64"],
                         capture_output=True, text=True, timeout=300)
    rows = []
    for line in res.stdout.splitlines():
        if line.startswith("| request_rate"):
            cols = [c.strip() for c in line.strip("|").split("|")]
            rows.append({"infer_s": float(cols[2]), "p99": float(cols[6]), "errors": int(cols[8]),
                         "batch": float(cols[9])})
    if len(rows) < 2:
        raise RuntimeError(res.stdout + res.stderr)
    return rows[1:]


def measure(server, perf_bin, model, rate):
    perf(perf_bin, server, model, rate, 1, measure_ms=3000)  # warm-up: graphs, fits, controllers
    # The energy between two scrapes taken while the load runs, a window in from each end.
    before, after = {}, {}

    def scrape_at(delay, into):
        time.sleep(delay)
        into.update(server.scrape())
        into["_at"] = time.time()

    first = threading.Thread(target=scrape_at, args=(1.5, before))
    last = threading.Thread(target=scrape_at, args=(1.5 + WINDOWS - 1, after))
    first.start()
    last.start()
    rows = perf(perf_bin, server, model, rate, WINDOWS)
    first.join()
    last.join()
    seconds = after["_at"] - before["_at"]
    joules = gpu_joules(after) - gpu_joules(before)
    n = inferences(after, model) - inferences(before, model)
    p99s = [r["p99"] for r in rows]
    stats = json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{server.http}/v2/models/{model}/stats").read())["model_stats"][0]
    fit = (stats.get("energy") or [{}])[0]  # the ledger's fitted power above the floor
    return {"mj": joules / max(n, 1) * 1e3, "watts": joules / seconds, "n": n,
            "p99_max": max(p99s), "p99_med": statistics.median(p99s),
            "met": sum(p <= GOAL_US for p in p99s) / len(p99s),
            "batch": statistics.fmean(r["batch"] for r in rows),
            "errors": sum(r["errors"] for r in rows),
            "active_w": fit.get("active_watts", 0.0)}


def torch_loop(onnx_path, rate, batch, seconds):
    """The MLP replayed from a CUDA graph, 'batch' rows every batch/rate seconds, host to host:
    GPU 0's joules per inference over 'seconds' (NVML's counter), idle included."""
    import onnx
    import pynvml
    import torch
    from onnx import numpy_helper
    model = onnx.load(onnx_path)
    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    torch.backends.cuda.matmul.allow_tf32 = True
    layers = [(w[f"fc{i}.weight"].cuda(), w[f"fc{i}.bias"].cuda()) for i in range(3)]
    graph, _ = mlp_graph(layers, batch, torch.float32)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    period = batch / rate
    replay_paced(graph, period, 2.0)  # warm: the GPU at its floor, clocks up
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    t0 = time.perf_counter()
    k = replay_paced(graph, period, seconds)
    t1 = time.perf_counter()
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    torch.backends.cuda.matmul.allow_tf32 = False
    joules = (e1 - e0) / 1e3
    return {"mj": joules / (k * batch) * 1e3, "watts": joules / (t1 - t0), "n": k * batch}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("perf")
    ap.add_argument("--models", required=True)
    args = ap.parse_args()
    repo = repository(args.models)
    names = [f"rec_{v}" for v in variants()]
    server = Server(args.binary, repo, ready=names)
    results = {}
    try:
        for repeat in range(REPEATS):
            for rate in RATES:
                order = names if repeat % 2 == 0 else names[::-1]
                for name in order:
                    results.setdefault((rate, name), []).append(
                        measure(server, args.perf, name, rate))
    finally:
        server.stop()
    loop = {}
    onnx_path = os.path.join(args.models, "recommend_model", "1", "model.onnx")
    for rate in RATES:
        for batch in (1, LOOP_BATCH):
            try:
                loop[(rate, batch)] = torch_loop(onnx_path, rate, batch, WINDOWS)
            except Exception as e:  # noqa: BLE001 - the loop is a reference, report and go on
                print(f"torch loop at {rate}/s batch {batch}: {e}")
    print(f"== energy-aware batching: recommend_model tf32, {KIND} x{INSTANCES}, one-row "
          f"requests ({DIST}), {WINDOWS} x 1 s windows per cell, p99 goal {GOAL_US} us; energy: NVML "
          "counter, GPU 0, idle included, per completed inference")
    print(f"{'load':>6} {'variant':<12} {'mJ/inf':>8} {'W':>7} {'batch':>6} {'p99 med':>8} "
          f"{'p99 max':>8} {'met':>5} {'errors':>6} {'fitted W':>8}")
    summary = []
    for rate in RATES:
        cells = {}
        for name in names:
            runs = results[(rate, name)]
            c = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
            c["met"] = min(r["met"] for r in runs)
            cells[name] = c
            print(f"{rate:>6} {name:<12} {c['mj']:>8.2f} {c['watts']:>7.1f} {c['batch']:>6.1f} "
                  f"{c['p99_med']:>8.0f} {c['p99_max']:>8.0f} {c['met']:>5.2f} {c['errors']:>6.0f} "
                  f"{c['active_w']:>8.1f}")
        for batch in (1, LOOP_BATCH):
            if (rate, batch) in loop:
                c = loop[(rate, batch)]
                print(f"{rate:>6} {'torch b' + str(batch):<12} {c['mj']:>8.2f} {c['watts']:>7.1f} "
                      f"{batch:>6}")
        fixed = [cells[f"rec_d{d}"] for d in DELAYS if cells[f"rec_d{d}"]["met"] >= 0.99]
        best = min((c["mj"] for c in fixed), default=float("nan")) or float("nan")
        e, none = cells["rec_energy"], cells["rec_none"]
        loop_best = min((loop[(rate, b)]["mj"] for b in (1, LOOP_BATCH) if (rate, b) in loop),
                        default=float("nan"))
        summary.append(f"load {rate}: energy/best-fixed {e['mj'] / best:.3f}, energy/none "
                       f"{e['mj'] / none['mj']:.3f}, energy/torch-loop {e['mj'] / loop_best:.3f}, "
                       f"goal met in {e['met'] * 100:.0f}% of windows")
    print("\n".join(summary))


if __name__ == "__main__":
    sys.exit(main())
