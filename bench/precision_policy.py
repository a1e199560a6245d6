"""The precision-variant policy under a load step on one GPU (docs/precision.md, issue 24).

A wide MLP (256 -> 8192, then one 8192 x 8192 weight applied 8 times with ReLU, -> 256; ~1 GFLOP
per row, heavy enough that the GPU, not the HTTP path, sets the capacity) served on KIND_GPU with
dynamic batching up to 128 rows; nereid-perf sends 64-row requests open loop at 10% -> 90% -> 10%
of static tf32's measured capacity (PHASE seconds each, default 10), after LEAD seconds (default 2)
at 10% that are not measured. One server per run, in this
order, all in one invocation: static tf32, bf16, int8 (`precision`), then the variants
`tf32,bf16,int8` under the goal policy (p99 goal GOAL_MS, default 25), the same with a power budget
(BUDGET_W, default: 75% of what static tf32 drew in the 90% phase), and the article's rule
("low precision at low load"). RUNS (default "tf32 bf16 int8 goal budget article") picks the runs and
their order; a budget run needs tf32's run before it, or BUDGET_W.

Energy: NVML's total-energy counter of the GPU the model runs on (a METER; the whole device, idle
included), read at the run's edges and every 100 ms for the per-second power windows. Latency: the
client's per-second p99 (nereid-perf --windows-file). Reports per run: joules over the step, J per
inference, the share of 1 s windows whose p99 met the goal, of windows under the budget, the
switches (server log) and the guard's measurements (statistics extension).

Usage: python3 bench/precision_policy.py NEREID NEREID_PERF [--out DIR]
"""
import argparse
import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

WIDTH, IN, OUT, REPEAT, ROWS, MAX_BATCH = 8192, 256, 256, 8, 64, 128


def write_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)

    def weight(name, k, n):
        return numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k) * 1.4)
                                       .astype(np.float32), name)
    inits = [weight("w_in", IN, WIDTH), weight("w", WIDTH, WIDTH), weight("w_out", WIDTH, OUT)]
    nodes, x = [], "input__0"
    for i, w in enumerate(["w_in"] + ["w"] * REPEAT):
        nodes.append(helper.make_node("MatMul", [x, w], [f"m{i}"]))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
        x = f"r{i}"
    nodes.append(helper.make_node("MatMul", [x, "w_out"], ["output__0"]))
    graph = helper.make_graph(
        nodes, "wide_mlp",
        [helper.make_tensor_value_info("input__0", TensorProto.FLOAT, ["N", IN])],
        [helper.make_tensor_value_info("output__0", TensorProto.FLOAT, ["N", OUT])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


CONFIG = """name: "wide"
backend: "native"
max_batch_size: %d
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ %d ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ %d ] } ]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
""" % (MAX_BATCH, IN, OUT)


def param(key, value):
    return 'parameters { key: "%s" value { string_value: "%s" } }\n' % (key, value)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Power:
    """NVML's energy counter of GPU 0, sampled every 100 ms on a thread."""

    def __init__(self):
        import pynvml
        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples, self.stop = [], False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def mj(self):
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)

    def run(self):
        while not self.stop:
            self.samples.append((time.time(), self.mj()))
            time.sleep(0.1)

    def joules(self, t0, t1):
        s = [(t, e) for t, e in self.samples if t0 <= t <= t1]
        return (s[-1][1] - s[0][1]) / 1e3, s[-1][0] - s[0][0]

    def windows(self, t0, seconds):
        out = []
        for k in range(int(seconds)):
            j, dt = self.joules(t0 + k, t0 + k + 1)
            out.append(j / dt if dt > 0 else 0)
        return out


def serve(nereid, repo, log):
    h, m = free_port(), free_port()
    proc = subprocess.Popen([nereid, "serve", f"--model-repository={repo}", f"--http-port={h}",
                             "--grpc-port=0", f"--metrics-port={m}"], stdout=log, stderr=log)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://localhost:{h}/v2/models/wide/ready").status == 200:
                return proc, h, m
        except Exception:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"server exited: see {log.name}")
        time.sleep(0.5)
    raise SystemExit("server not ready in 300 s")


def run(args, name, extra, schedule, power, goal_ms, budget):
    repo = tempfile.mkdtemp() + "/models"
    os.makedirs(repo + "/wide/1")
    os.link(args.model, repo + "/wide/1/model.onnx")
    shutil.copytree(args.calibration, repo + "/wide/calibration")
    with open(repo + "/wide/config.pbtxt", "w") as f:
        f.write(CONFIG + extra)
    log_path = os.path.join(args.out, f"policy_{name}.log")
    with open(log_path, "w") as log:
        started = time.time()
        proc, h, m = serve(args.nereid, repo, log)
        load_s = time.time() - started
        try:
            windows = os.path.join(args.out, f"policy_{name}_windows.csv")
            # A lead-in at the low rate (args.lead seconds) before the measured step: the first
            # second after idle (clocks ramping, first batches) is not the step.
            lead = [(schedule[0][0], args.lead)] if args.lead > 0 else []
            sched = ",".join(f"{r:.1f}:{s:g}" for r, s in lead + schedule)
            t0 = time.time() + args.lead
            subprocess.run([args.perf, "-m", "wide", "-u", f"localhost:{h}", "-b", str(ROWS),
                            "--rate-schedule", sched, "--windows-file", windows,
                            "--max-threads", "64", "-q"], check=True, stdout=subprocess.DEVNULL)
            t1 = time.time()
            stats = json.load(urllib.request.urlopen(
                f"http://localhost:{h}/v2/models/wide/stats"))["model_stats"][0]
            metrics = urllib.request.urlopen(f"http://localhost:{m}/metrics").read().decode()
        finally:
            proc.terminate()
            proc.wait()
    rows = list(csv.DictReader(open(windows)))[int(args.lead):]
    total = sum(s for _, s in schedule)
    answered = sum(int(r["answered"]) for r in rows)
    errors = sum(int(r["errors"]) for r in rows)
    timed = [r for r in rows if int(r["answered"]) > 0]
    met = sum(float(r["p99_us"]) <= goal_ms * 1e3 for r in timed) / max(1, len(timed))
    joules, dt = power.joules(t0, t1)
    watts = power.windows(t0, total)
    log = open(log_path).read()
    switches = re.findall(r"switches variant (.*)", log)
    return {
        "run": name, "answered": answered, "errors": errors, "load_s": load_s,
        "joules": joules, "seconds": dt, "mj_per_inf": joules / max(1, answered * ROWS) * 1e3,
        "p99_met": met, "windows": len(timed),
        "under_budget": (sum(w <= budget for w in watts) / len(watts)) if budget else None,
        "max_window_w": max(watts) if watts else 0, "watts": watts,
        "switches": switches, "variants": stats.get("variants"),
        "active_metric": re.findall(r'nereid_model_variant_active\{[^}]*variant="(\w+)"\} 1',
                                    metrics),
    }


def measure_capacity(args):
    repo = tempfile.mkdtemp() + "/models"
    os.makedirs(repo + "/wide/1")
    os.link(args.model, repo + "/wide/1/model.onnx")
    with open(repo + "/wide/config.pbtxt", "w") as f:
        f.write(CONFIG + param("precision", "tf32"))
    with open(os.path.join(args.out, "policy_capacity.log"), "w") as log:
        proc, h, _ = serve(args.nereid, repo, log)
        subprocess.run([args.perf, "-m", "wide", "-u", f"localhost:{h}", "-b", str(ROWS),
                        "--concurrency-range", "8", "-p", "5000", "-q", "-f",
                        os.path.join(args.out, "policy_capacity.csv")],
                       check=True, capture_output=True)
        proc.terminate()
        proc.wait()
    capacity = float(list(csv.DictReader(open(os.path.join(args.out, "policy_capacity.csv"))))[0]
                     ["Inferences/Second"])
    return capacity


def main():
    p = argparse.ArgumentParser()
    p.add_argument("nereid")
    p.add_argument("perf")
    p.add_argument("--out", default=tempfile.mkdtemp())
    p.add_argument("--phase", type=float, default=float(os.environ.get("PHASE", 10)))
    p.add_argument("--lead", type=int, default=int(os.environ.get("LEAD", 2)))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp()
    args.model = os.path.join(work, "wide.onnx")
    write_model(args.model)
    args.calibration = os.path.join(work, "calibration")
    os.makedirs(args.calibration)
    np.save(os.path.join(args.calibration, "input__0.npy"),
            np.random.default_rng(4).standard_normal((128, IN)).astype(np.float32))
    goal_ms = float(os.environ.get("GOAL_MS", 25))
    power = Power()
    print(f"date: {time.strftime('%Y-%m-%d')}, GPU: "
          f"{power.nvml.nvmlDeviceGetName(power.handle)}; model: {IN} -> {WIDTH} x{REPEAT + 1} "
          f"-> {OUT}, {ROWS} rows per request, max batch {MAX_BATCH}")

    # Static tf32's capacity: closed loop, 5 s (CAPACITY=rows/s skips it).
    capacity = float(os.environ.get("CAPACITY", 0)) or measure_capacity(args)
    low, high = 0.1 * capacity / ROWS, 0.9 * capacity / ROWS  # requests/s
    schedule = [(low, args.phase), (high, args.phase), (low, args.phase)]
    print(f"tf32 capacity {capacity:.0f} rows/s; step {low:.0f} -> {high:.0f} -> {low:.0f} "
          f"requests/s ({args.phase:g} s each); p99 goal {goal_ms:g} ms")
    results = []
    header = (f"{'run':<15}{'answered':>9}{'errors':>7}{'joules':>9}{'vs tf32':>8}{'mJ/inf':>8}"
              f"{'p99 ok':>8}{'<=budget':>9}{'max W':>7}  switches")
    print(header)

    def report(r):
        results.append(r)
        ub = "" if r["under_budget"] is None else f"{100 * r['under_budget']:.0f}%"
        print(f"{r['run']:<15}{r['answered']:>9}{r['errors']:>7}{r['joules']:>9.0f}"
              f"{r['joules'] / results[0]['joules']:>8.2f}{r['mj_per_inf']:>8.3f}"
              f"{100 * r['p99_met']:>7.0f}%{ub:>9}{r['max_window_w']:>7.0f}  "
              f"{len(r['switches'])} (load {r['load_s']:.0f} s)", flush=True)
        json.dump(results, open(os.path.join(args.out, "policy.json"), "w"), indent=1)

    runs = os.environ.get("RUNS", "tf32 bf16 int8 goal budget article").split()
    variants = (param("nereid.precision_variants", "tf32,bf16,int8") +
                param("nereid.accuracy_guard", "max_rel=0.05") +
                param("nereid.latency_goal_us", str(int(goal_ms * 1000))))
    budget = float(os.environ.get("BUDGET_W", 0))
    ph = int(args.phase)
    for name in runs:  # in the order given
        if name in ("tf32", "bf16", "int8"):
            report(run(args, f"static_{name}", param("precision", name), schedule, power,
                       goal_ms, 0))
            if name == "tf32" and not budget and len(results[-1]["watts"]) >= 2 * ph:
                # The budget: below what tf32 draws at 90% (its mean over the middle phase).
                high_w = float(np.mean(results[-1]["watts"][ph + 1:2 * ph]))
                budget = round(0.75 * high_w)
                print(f"tf32 draws {high_w:.0f} W at 90%; budget {budget:.0f} W", flush=True)
        elif name == "goal":
            report(run(args, "policy_goal", variants, schedule, power, goal_ms, 0))
        elif name == "budget":
            if budget <= 0:
                raise SystemExit("the budget run needs static tf32's run before it, or BUDGET_W")
            report(run(args, "policy_budget",
                       variants + param("nereid.power_budget_w", str(budget)) +
                       param("nereid.batching_objective", "energy"), schedule, power, goal_ms,
                       budget))
        elif name == "article":
            report(run(args, "article_rule",
                       variants + param("nereid.variant_policy", "low_load_low_precision"),
                       schedule, power, goal_ms, 0))
        else:
            raise SystemExit(f"unknown run '{name}' in RUNS")
    power.stop = True
    for r in results:
        for s in r["switches"]:
            print(f"  {r['run']}: {s}")
        if r["under_budget"] is not None:
            print(f"  {r['run']}: watts per 1 s window: " +
                  " ".join(f"{w:.0f}" for w in r["watts"]))
    guard = next((r["variants"] for r in results if r["variants"]), None)
    if guard:
        for v in guard["variants"]:
            print(f"  guard {v['name']}: admitted {v['admitted']}, top-1 {v['top1_agreement']}, "
                  f"max abs {v['max_abs_error']:.3g}, max rel {v['max_rel_error']:.3g}")
            for c in v.get("table", []):
                print(f"    batch {c['batch_size']:>4}: {c['exec_us']:.0f} us, {c['watts']:.0f} W")


if __name__ == "__main__":
    sys.exit(main())
