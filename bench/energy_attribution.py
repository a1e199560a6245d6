"""Energy attribution on one GPU, run on the device machine (scripts/gpu_device_run.sh, section
"energy"): recommend_model (one-row requests, dynamic batching: batches of 1-4) and matmul_model
(1024 rows a request) on KIND_GPU, each at a fixed request rate, alone and together, interleaved,
three repeats. Per phase, from the server's metrics port: each model's active mJ per inference
(idle apart) and the meter's joules against NVML's own counter (nv_energy_consumption). Then energy
accounting on vs off (two servers, alternating rounds) at HTTP concurrency 64.

Usage: python3 bench/energy_attribution.py NEREID_BINARY NEREID_PERF [--out DIR]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RATES = {"recommend_model": int(os.environ.get("RECOMMEND_RATE", 2000)),
         "matmul_model": int(os.environ.get("MATMUL_RATE", 100))}
PERF_ARGS = {"recommend_model": [], "matmul_model": ["--shape", "input__0:1024,1024"]}
MEASURE_S = int(os.environ.get("MEASURE_S", 10))
# Idle seconds after each phase: the floor is estimated from ticks with nothing running, and it
# decays for seconds after load stops (docs/energy.md); a longer gap lets every phase start alike.
SETTLE_S = float(os.environ.get("SETTLE_S", 1))


def repository(src):
    repo = tempfile.mkdtemp(prefix="energy_repo_")
    for name in RATES:
        shutil.copytree(os.path.join(src, name), os.path.join(repo, name))
        path = os.path.join(repo, name, "config.pbtxt")
        text = open(path).read()
        text = re.sub(r"instance_group \[[^\]]*\]", "", text)
        text += '\ninstance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n'
        if name == "recommend_model":
            text = re.sub(r"preferred_batch_size: \[[^\]]*\]", "preferred_batch_size: [ 4 ]", text)
        open(path, "w").write(text)
    return repo


class Server:
    def __init__(self, binary, repo, *args, ready="matmul_model"):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary, "serve", f"--model-repository={repo}", "--http-port=0",
                                      "--grpc-port=0", "--metrics-port=0", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            text = open(self.log.name).read()
            http = re.search(r"Started HTTPService at [^ ]+:(\d+)", text)
            metrics = re.search(r"Started Metrics Service at [^ ]+:(\d+)", text)
            if http and metrics and all(f"successfully loaded '{m}'" in text for m in ([ready] if isinstance(ready, str) else ready)):
                self.http, self.metrics = int(http.group(1)), int(metrics.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(text)
            time.sleep(0.2)
        else:
            raise RuntimeError(open(self.log.name).read())
        time.sleep(1)

    def scrape(self):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics").read().decode()
        rows = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                rows[key] = float(value)
        return rows

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def model_key(model):
    return f'model="{model}",version="1",scope="gpu0",source="nvml"'


def phase(server, perf, models):
    procs = [subprocess.Popen([perf, "-m", m, "-u", f"127.0.0.1:{server.http}",
                               "--request-rate-range", str(RATES[m]), "-p", str(MEASURE_S * 1000),
                               "--warmup", "2000", "-q", *PERF_ARGS[m]],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for m in models]
    time.sleep(2.0)  # nereid-perf's warm-up
    before = server.scrape()
    time.sleep(MEASURE_S)
    after_load = server.scrape()
    for p in procs:
        p.wait(timeout=120)
    out = {}
    for m in models:
        k = model_key(m)
        active = after_load[f"nereid_energy_joules_total{{{k},kind=\"active\"}}"] - \
            before[f"nereid_energy_joules_total{{{k},kind=\"active\"}}"]
        idle = after_load[f"nereid_energy_joules_total{{{k},kind=\"idle\"}}"] - \
            before[f"nereid_energy_joules_total{{{k},kind=\"idle\"}}"]
        n = after_load[f"nereid_energy_inferences_total{{{k}}}"] - before[f"nereid_energy_inferences_total{{{k}}}"]
        out[m] = (active / max(n, 1) * 1e3, idle / max(n, 1) * 1e3, n)
    gpu = 'nereid_energy_metered_joules_total{scope="gpu0",source="nvml"}'
    metered = after_load[gpu] - before[gpu]
    nvml = sum(v for k, v in after_load.items() if k.startswith("nv_energy_consumption")) - \
        sum(v for k, v in before.items() if k.startswith("nv_energy_consumption"))
    time.sleep(SETTLE_S)
    return out, metered, nvml


def overhead(binary, perf, repo):
    # "on 1s": the meters read every second instead of at NVML's 100 ms (a read costs ~3 ms).
    servers = {"on": Server(binary, repo), "on 1s": Server(binary, repo, "--energy-poll-ms=1000"),
               "off": Server(binary, repo, "--energy-accounting=false")}
    rows = []
    try:
        for model, concurrency in (("recommend_model", 64), ("recommend_model", 1)):
            for r in range(3):
                for who in servers:
                    res = subprocess.run([perf, "-m", model, "-u", f"127.0.0.1:{servers[who].http}",
                                          "--concurrency-range", str(concurrency), "-p", "5000",
                                          "--warmup", "1000", "-q"],
                                         capture_output=True, text=True, timeout=120)
                    line = [ln for ln in res.stdout.splitlines() if ln.startswith("| concurrency")]
                    cols = [c.strip() for c in line[-1].split("|")] if line else []
                    rows.append((f"{model} c={concurrency}", r + 1, who,
                                 float(cols[3]) if cols else float("nan"),
                                 float(cols[4]) if cols else float("nan")))
    finally:
        for s in servers.values():
            s.stop()
    print("\n== energy accounting on vs off, HTTP concurrency 64 and 1 (infer/s, p50 us)")
    print(f"{'model':<22} {'round':>5} {'accounting':>10} {'infer/s':>10} {'p50 us':>8}")
    for row in rows:
        print(f"{row[0]:<22} {row[1]:>5} {row[2]:>10} {row[3]:>10.0f} {row[4]:>8.0f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("perf")
    ap.add_argument("--models", default=os.path.join(ROOT, "examples", "models"))
    args = ap.parse_args()
    repo = repository(args.models)
    if os.environ.get("ONLY_OVERHEAD"):
        overhead(args.binary, args.perf, repo)
        return
    server = Server(args.binary, repo)
    results = []
    try:
        for repeat in range(3):
            for label, models in (("recommend alone", ["recommend_model"]),
                                  ("matmul alone", ["matmul_model"]),
                                  ("mixed", ["recommend_model", "matmul_model"])):
                out, metered, nvml = phase(server, args.perf, models)
                results.append((repeat + 1, label, out, metered, nvml))
    finally:
        server.stop()
    print(f"== energy attribution on one GPU: recommend_model at {RATES['recommend_model']} req/s "
          f"(1 row), matmul_model at {RATES['matmul_model']} req/s (1024 rows), {MEASURE_S} s windows")
    print(f"{'rep':>3} {'phase':<16} {'model':<16} {'active mJ/inf':>14} {'idle mJ/inf':>12} "
          f"{'inferences':>10} {'metered J':>10} {'NVML J':>9}")
    for rep, label, out, metered, nvml in results:
        for m, (active, idle, n) in out.items():
            print(f"{rep:>3} {label:<16} {m:<16} {active:>14.3f} {idle:>12.3f} {n:>10.0f} "
                  f"{metered:>10.1f} {nvml:>9.1f}")
    for m in RATES:
        alone = [out[m][0] for _, label, out, _, _ in results if label.endswith("alone") and m in out]
        mixed = [out[m][0] for _, label, out, _, _ in results if label == "mixed"]
        a, x = sum(alone) / len(alone), sum(mixed) / len(mixed)
        print(f"{m}: active mJ/inference alone {a:.3f}, mixed {x:.3f}, mixed/alone {x / a:.3f}")
    overhead(args.binary, args.perf, repo)


if __name__ == "__main__":
    sys.exit(main())
