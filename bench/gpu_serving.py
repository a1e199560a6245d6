"""GPU serving benchmark, run on the device machine by scripts/gpu_device_run.sh (one run, side by
side, printed as tables):

1. recommend_model per batch, host input to host output: PyTorch with a CUDA graph and pinned
   staging (the reference a user would pick instead) next to Nereid's server-side compute per
   execution (statistics extension: compute_infer ns / count, one request in flight, over HTTP
   and over gRPC), batch 1, 32, 256, precisions fp32, tf32, bf16.
2. Throughput over HTTP at concurrency 64 (perf_analyzer, else nereid-perf): recommend_model on
   KIND_GPU, the same model on a KIND_CPU instance group, and the same server's `simple`.
3. matmul_model on KIND_GPU with pinned staging vs pageable (--pinned-memory-pool-byte-size=0),
   1024 rows per request (4 MiB in, 4 MiB out).

Usage: python3 bench/gpu_serving.py NEREID_BINARY [PERF_ANALYZER] [--out DIR]
"""
import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
os.environ.setdefault("NEREID_BINARY", "")


def mlp_graph(layers, batch, dtype):
    """recommend_model's MLP ('layers': three (weight, bias) on the GPU in 'dtype') captured in a
    CUDA graph, host to host: pinned input -> device -> the layers -> pinned output. Returns the
    graph and its pinned input (bench/energy_batching.py replays it too)."""
    import torch
    host_in = torch.randn(batch, 1024).pin_memory()
    host_out = torch.empty(batch, 1000).pin_memory()
    dev_in = torch.empty(batch, 1024, device="cuda")

    def forward():
        dev_in.copy_(host_in, non_blocking=True)
        h = dev_in.to(dtype)
        for i, (wi, bi) in enumerate(layers):
            h = torch.nn.functional.linear(h, wi, bi)
            h = torch.relu(h) if i < 2 else torch.sigmoid(h)
        host_out.copy_(h.float(), non_blocking=True)

    return capture_graph(forward), host_in


def replay_times(graph, iters):
    """(mean, median) us of 'iters' replays of a captured graph, each waited for, after 10 warm-up
    replays: PyTorch's best per batch as gpu_vision.py and gpu_text.py compare against it."""
    import torch
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.fmean(times), statistics.median(times)


def replay_paced(graph, period, duration):
    """Replays the CUDA graph once every 'period' seconds (waiting for each; a late one runs at
    once) until 'duration' seconds of slots have passed: how many replays ran."""
    import torch
    start, k = time.perf_counter(), 0
    while True:
        due = start + k * period
        now = time.perf_counter()
        if due - start >= duration:
            return k
        if due > now:
            time.sleep(due - now)
        graph.replay()
        torch.cuda.synchronize()
        k += 1


def capture_graph(forward):
    """'forward' warmed up three times on a side stream (as PyTorch asks before capture), then
    captured into a CUDA graph, which is returned."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    return graph


def torch_reference(onnx_path, batches, precisions, iters=300):
    """us per batch, host to host: pinned input -> device -> 3 layers -> pinned output, replayed
    from a CUDA graph, timed by wall clock around replay + synchronize: (median, mean)."""
    import onnx
    import torch
    from onnx import numpy_helper
    model = onnx.load(onnx_path)
    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    results = {}
    for precision in precisions:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        layers = [(w[f"fc{i}.weight"].cuda().to(dtype), w[f"fc{i}.bias"].cuda().to(dtype)) for i in range(3)]
        for batch in batches:
            graph, host_in = mlp_graph(layers, batch, dtype)
            for _ in range(20):
                graph.replay()
            torch.cuda.synchronize()
            times, fresh_times, idle_times = [], [], []
            fresh = [torch.randn(batch, 1024) for _ in range(2)]
            for i in range(iters):
                # As a server's instance thread has it between requests: asleep (not timed).
                time.sleep(0.0002)
                t0 = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize()
                idle_times.append((time.perf_counter() - t0) * 1e6)
                t0 = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e6)
                # As a server has it: the input written by the CPU just before (not timed), so the
                # copy engine reads lines still dirty in the CPU's caches.
                host_in.copy_(fresh[i % 2])
                t0 = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize()
                fresh_times.append((time.perf_counter() - t0) * 1e6)
            results[(precision, batch)] = (statistics.median(times), statistics.fmean(times),
                                           statistics.fmean(fresh_times),
                                           statistics.fmean(idle_times))
    torch.backends.cuda.matmul.allow_tf32 = False
    return results


def server_compute(server, model, batch, protocol, iters=300):
    """Mean server-side compute per execution (us), one request in flight (binary tensors)."""
    if protocol == "grpc":
        import tritonclient.grpc as mod
        client = mod.InferenceServerClient(server.grpc_url)
    else:
        import tritonclient.http as mod
        client = mod.InferenceServerClient(server.url)
    x = np.random.default_rng().standard_normal((batch, 1024)).astype(np.float32)
    t = mod.InferInput("input__0", [batch, 1024], "FP32")
    t.set_data_from_numpy(x)
    for _ in range(30):
        client.infer(model, [t])

    def snapshot():
        s = (client.get_inference_statistics(model, as_json=True) if protocol == "grpc"
             else client.get_inference_statistics(model))["model_stats"][0]
        c = s["inference_stats"]["compute_infer"]
        return int(c.get("ns", 0)), int(c.get("count", 0)), int(s.get("execution_count", 0))

    ns0, n0, e0 = snapshot()
    for _ in range(iters):
        client.infer(model, [t])
    ns1, n1, e1 = snapshot()
    client.close()
    return (ns1 - ns0) / max(n1 - n0, 1) / 1e3


def throughput(perf_analyzer, nereid_perf, url, model, concurrency, out_dir, shape=None):
    """(inferences/s, p50 us) over HTTP."""
    csv_path = os.path.join(tempfile.mkdtemp(), f"pa_{model}_c{concurrency}.csv")
    if perf_analyzer:
        cmd = [perf_analyzer, "-m", model, "-u", url, "-i", "http", "--concurrency-range",
               str(concurrency), "--measurement-interval", "3000", "--stability-percentage", "50",
               "--max-trials", "4", "-f", csv_path]
        if shape:
            cmd += ["--shape", shape]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0 and os.path.exists(csv_path):
            with open(csv_path) as f:
                row = next(csv.DictReader(f))
            return float(row["Inferences/Second"]), float(row["p50 latency"])
        log = os.path.join(out_dir, f"pa_failed_{model}_c{concurrency}.txt")
        with open(log, "w") as f:
            f.write(r.stdout + "\n--- stderr\n" + r.stderr)
        print(f"perf_analyzer failed on {model} (exit {r.returncode}; {log}): {r.stderr[-300:]!r}; "
              "nereid-perf measures instead")
    cmd = [nereid_perf, "-m", model, "-u", url, "--concurrency-range", str(concurrency), "-p", "3000",
           "-q", "-f", csv_path]
    if shape:
        cmd += ["--shape", shape]
    subprocess.run(cmd, check=True, capture_output=True)
    with open(csv_path) as f:
        row = next(csv.DictReader(f))
    return float(row["Inferences/Second"]), float(row["p50 latency"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("perf_analyzer", nargs="?", default="")
    parser.add_argument("--out", default=tempfile.mkdtemp())
    args = parser.parse_args()
    os.environ["NEREID_BINARY"] = args.binary
    import conftest
    conftest.BINARY = args.binary
    from conftest import Server
    from test_gpu import write_repo
    nereid_perf = os.path.join(os.path.dirname(args.binary), "nereid-perf")
    root = tempfile.mkdtemp()
    simple_cpu = open(os.path.join(ROOT, "examples", "models", "simple", "config.pbtxt")).read()
    repo = write_repo(root, precisions=("fp32", "tf32", "bf16"))
    os.makedirs(os.path.join(repo, "simple_cpu", "1"))
    shutil.copy(os.path.join(repo, "simple", "1", "model.onnx"), os.path.join(repo, "simple_cpu", "1"))
    with open(os.path.join(repo, "simple_cpu", "config.pbtxt"), "w") as f:
        f.write(simple_cpu.replace('name: "simple"', 'name: "simple_cpu"'))
    # Variants with room for batch 256 on the CPU too.
    batches, precisions = [1, 32, 256], ["fp32", "tf32", "bf16"]

    print("== 1. recommend_model per batch, host to host (us): PyTorch CUDA graph + pinned vs Nereid server compute")
    print("   (the statistics extension gives Nereid's mean; ratios are PyTorch's mean over Nereid's;")
    print("   'fresh': PyTorch's mean when the CPU rewrites its pinned input before each replay;")
    print("   'idle': its mean when the thread sleeps 200 us before each replay, as a server's does)")
    torch_us = torch_reference(os.path.join(repo, "recommend_model", "1", "model.onnx"), batches, precisions)
    server = Server(repo, "--log-verbose=1")  # the GPU engine's per-phase lines (below)
    try:
        print(f"{'precision':>9} {'batch':>6} | {'PyTorch p50':>11} {'mean':>7} {'fresh':>7} {'idle':>7} | "
              f"{'Nereid HTTP':>11} {'ratio':>6} | {'Nereid gRPC':>11} {'ratio':>6}")
        for p in precisions:
            for b in batches:
                http = server_compute(server, f"recommend_{p}", b, "http")
                grpc = server_compute(server, f"recommend_{p}", b, "grpc")
                median, mean, fresh, idle = torch_us[(p, b)]
                print(f"{p:>9} {b:>6} | {median:11.1f} {mean:7.1f} {fresh:7.1f} {idle:7.1f} | {http:11.1f} "
                      f"{mean / http:5.2f}x | {grpc:11.1f} {mean / grpc:5.2f}x")
        print("   where Nereid's runs spend their time (server log, every 100 runs of a row count; "
              "HTTP's runs come first, then gRPC's):")
        with open(server.log_path) as f:
            for line in f:
                if "GPU runs of" in line:
                    print("   " + line.split("] ", 1)[-1].rstrip())
        print()
        print("== 2. HTTP throughput at concurrency 64 (same server)")
        print(f"{'model':>22} | {'infer/s':>9} | {'p50 us':>8}")
        rows = {}
        for model in ["recommend_tf32", "recommend_fp32", "recommend_cpu", "simple", "simple_cpu"]:
            rows[model] = throughput(args.perf_analyzer, nereid_perf, server.url, model, 64, args.out)
            print(f"{model:>22} | {rows[model][0]:9.0f} | {rows[model][1]:8.0f}")
        best_simple = max(rows["simple"][0], rows["simple_cpu"][0])
        print(f"recommend_tf32 (KIND_GPU) / simple: {rows['recommend_tf32'][0] / best_simple:.2f}; "
              f"KIND_GPU / KIND_CPU recommend: {rows['recommend_tf32'][0] / rows['recommend_cpu'][0]:.1f}x")
    finally:
        server.stop()
        shutil.copy(server.log_path, os.path.join(args.out, "server.log"))

    print()
    print("== 3. matmul_model on KIND_GPU, 1024 rows (4 MiB in and out), concurrency 4: pinned vs pageable staging")
    print(f"{'staging':>9} | {'infer/s':>9} | {'p50 us':>8} | {'compute us':>10}")
    for label, flags in [("pinned", []), ("pageable", ["--pinned-memory-pool-byte-size=0"])]:
        s = Server(repo, *flags)
        try:
            # One tool for both rows (perf_analyzer was killed mid-run here once, and a table
            # mixing the two tools compares nothing).
            rate, p50 = throughput("", nereid_perf, s.url, "matmul_model", 4, args.out,
                                   shape="input__0:1024,1024")
            import tritonclient.grpc as grpcclient
            c = grpcclient.InferenceServerClient(s.grpc_url)
            st = c.get_inference_statistics("matmul_model", as_json=True)["model_stats"][0]["inference_stats"]
            compute = int(st["compute_infer"]["ns"]) / max(int(st["compute_infer"]["count"]), 1) / 1e3
            print(f"{label:>9} | {rate:9.1f} | {p50:8.0f} | {compute:10.1f}")
        finally:
            s.stop()


if __name__ == "__main__":
    main()
