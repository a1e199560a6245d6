"""What an ensemble step costs: a two-step ensemble of `simple` (sum/difference, then again)
against the client calling `simple` twice back to back with the first answer's outputs, and one
call of `simple` alone, all over HTTP from one tritonclient at concurrency 1, interleaved rounds.
Also the server's own view: nereid-perf at concurrency 1 and 16 on the ensemble and on simple.

Usage: .venv/bin/python bench/ensemble_overhead.py [--rounds 3] [--requests 2000]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import tritonclient.http as httpclient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from conftest import Server  # noqa: E402

TWICE = """name: "twice"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
    output_map { key: "OUTPUT0" value: "s" } output_map { key: "OUTPUT1" value: "d" } },
  { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "s" } input_map { key: "INPUT1" value: "d" }
    output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } }
] }
"""


def inputs(a, b):
    out = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    out[0].set_data_from_numpy(a)
    out[1].set_data_from_numpy(b)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    root = tempfile.mkdtemp()
    repo = os.path.join(root, "models")
    subprocess.check_call([sys.executable, os.path.join(ROOT, "examples", "generate_models.py"),
                           "--out", os.path.join(root, "gen")], stdout=subprocess.DEVNULL)
    shutil.copytree(os.path.join(ROOT, "examples", "models", "simple"), os.path.join(repo, "simple"))
    shutil.copytree(os.path.join(root, "gen", "simple", "1"), os.path.join(repo, "simple", "1"))
    os.makedirs(os.path.join(repo, "twice", "1"))
    with open(os.path.join(repo, "twice", "config.pbtxt"), "w") as f:
        f.write(TWICE)
    server = Server(repo)
    client = httpclient.InferenceServerClient(server.url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)

    def single():
        client.infer("simple", inputs(a, b))

    def pair():
        r = client.infer("simple", inputs(a, b))
        client.infer("simple", inputs(r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")))

    def ensemble():
        r = client.infer("twice", inputs(a, b))
        assert (r.as_numpy("OUTPUT0") == 2 * a).all()

    print(f"date: {time.strftime('%Y-%m-%d', time.gmtime())}, machine: {os.cpu_count()} cores; "
          f"HTTP, one tritonclient, concurrency 1, {args.requests} requests per cell")
    print(f"{'round':>5} {'case':<26} {'p50 us':>8} {'p99 us':>8}")
    results = {}
    try:
        for case in (single, pair, ensemble):  # warm
            for _ in range(200):
                case()
        for r in range(args.rounds):
            for name, case in (("simple once", single), ("simple twice (client)", pair),
                               ("ensemble of two steps", ensemble)):
                times = []
                for _ in range(args.requests):
                    t = time.perf_counter_ns()
                    case()
                    times.append((time.perf_counter_ns() - t) / 1000)
                p50, p99 = np.percentile(times, 50), np.percentile(times, 99)
                results.setdefault(name, []).append(p50)
                print(f"{r + 1:>5} {name:<26} {p50:>8.0f} {p99:>8.0f}")
        one = np.median(results["simple once"])
        two = np.median(results["simple twice (client)"])
        ens = np.median(results["ensemble of two steps"])
        print(f"median p50: once {one:.0f} us, twice from the client {two:.0f} us, ensemble {ens:.0f} us;"
              f" a step costs {ens - one:.0f} us inside the ensemble against {two - one:.0f} us as a"
              f" second client call")
        perf = os.path.join(ROOT, "build", "nereid-perf")
        print("\nnereid-perf (the server's view, HTTP): model, concurrency, infer/s, p50 us")
        for model in ("simple", "twice"):
            for c in (1, 16):
                out = subprocess.run([perf, "-m", model, "-u", server.url, "--concurrency-range", str(c),
                                      "-p", "3000", "--warmup", "500", "-q"], capture_output=True, text=True).stdout
                line = [x for x in out.splitlines() if x.startswith("| concurrency")][-1]
                cols = [x.strip() for x in line.split("|")]
                print(f"  {model:<8} c={c:<3} {cols[3]:>10} {cols[4]:>8}")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
