"""ResNet-50 on one GPU, side by side in one run (scripts/gpu_device_run.sh, section "vision"):

1. PyTorch's best as a user would write it: torchvision's ResNet-50 (random weights, 224x224),
   eval, a CUDA graph per batch, host to host (pinned input -> device -> network -> pinned
   output), fp32, and fp16 and bf16 channels-last; wall clock around replay + synchronize.
2. Nereid's native GPU engine serving the same network exported to ONNX, configured for ONNX
   Runtime (platform onnxruntime_onnx, KIND_GPU, --onnx-engine=auto), precision fp32, bf16, fp16
   and int8 (against PyTorch's fp16): the server-side compute per execution (statistics extension: the copies and the kernels, host
   to host), one request in flight over gRPC.
3. Agreement with ONNX Runtime fp32 on the CPU: top-1 over 32 random images and the largest
   difference relative to the largest logit, per precision.
4. Served by perf_analyzer over gRPC at concurrency 64, one image per request in system shared
   memory, bf16: with dynamic batching and without, the server's nv_gpu_utilization sampled every 0.5 s during each run (the
   batched model warmed first with one request of every batch size, so that its CUDA graphs are
   captured before the measurement).
5. Energy per image at a fixed offered load (--rate images/s, one image per request, bf16): GPU 0's
   joules from NVML's total-energy counter (a meter: the whole device, idle included) over a
   window inside the run, divided by the images completed in it; Nereid served by perf_analyzer
   (--request-rate-range) with dynamic batching and without, against PyTorch's loop (a CUDA graph
   of batch 1 replayed for each image as it is due, host to host).

Usage: python3 bench/gpu_vision.py NEREID_BINARY [PERF_ANALYZER] [--batches 1,64,256] [--rate 500]
       [--out DIR]
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
os.environ.setdefault("NEREID_BINARY", "")
from gpu_serving import capture_graph, replay_times, replay_paced  # noqa: E402  (bench/, this file's folder)
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
# Nereid's int8 against PyTorch's best (fp16 channels-last): PyTorch has no int8 CUDA-graph path
# for torchvision's ResNet-50 to compare with.
TORCH_OF = {"int8": "fp16"}


def torch_times(batches, iters, precisions):
    """us per batch (mean, median) per (precision, batch), host to host from a CUDA graph."""
    import torch
    import torchvision
    torch.manual_seed(0)
    net = torchvision.models.resnet50().eval().cuda()
    out = {}
    for precision in precisions:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        fmt = torch.contiguous_format if precision == "fp32" else torch.channels_last
        model = net.to(dtype=dtype, memory_format=fmt)
        for batch in batches:
            host_in = torch.randn(batch, 3, 224, 224).pin_memory()
            host_out = torch.empty(batch, 1000).pin_memory()
            dev_in = torch.empty(batch, 3, 224, 224, device="cuda")

            def forward():
                dev_in.copy_(host_in, non_blocking=True)
                x = dev_in.to(dtype).contiguous(memory_format=fmt)
                with torch.no_grad():
                    host_out.copy_(model(x).float(), non_blocking=True)
            graph = capture_graph(forward)
            out[(precision, batch)] = replay_times(
                graph, iters if batch < 64 else max(iters // 10, 10))
            del graph
        net = net.float().to(memory_format=torch.contiguous_format)
    return out


def export(path):
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "vision_models.py"),
                    os.path.dirname(path), "--models", "resnet50", "--torchvision"], check=True)


def exported_resnet50():
    """(a new repository folder, torchvision's ResNet-50 exported under it)."""
    repo = tempfile.mkdtemp()
    onnx_path = os.path.join(repo, "export", "resnet50.onnx")
    export(onnx_path)
    return repo, onnx_path


def server_class(binary):
    """The tests' server harness (tests/e2e/conftest.py's Server) running 'binary'."""
    os.environ["NEREID_BINARY"] = binary
    import conftest
    conftest.BINARY = binary
    return conftest.Server


def config(name, precision, max_batch, batching=""):
    return batching + f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
input [ {{ name: "input" data_type: TYPE_FP32 dims: [3, 224, 224] }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [1000] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 }} ]
parameters {{ key: "precision" value {{ string_value: "{precision}" }} }}
"""


def add_model(repo, name, onnx_path, config_text):
    """Model 'name' in repo/models: the exported file linked (not copied) and its config."""
    os.makedirs(os.path.join(repo, "models", name, "1"))
    os.link(onnx_path, os.path.join(repo, "models", name, "1", "model.onnx"))
    with open(os.path.join(repo, "models", name, "config.pbtxt"), "w") as f:
        f.write(config_text)


def server_compute(client, mod, model, x, iters):
    """Mean server-side compute per execution (us), one request in flight."""
    t = mod.InferInput("input", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    return server_compute_feeds(client, model, [t], iters)


def server_compute_feeds(client, model, inputs, iters):
    """Mean server-side compute per execution (us) of 'inputs', one request in flight."""
    for _ in range(5):
        client.infer(model, inputs)

    def snapshot():
        s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
        c = s["inference_stats"]["compute_infer"]
        return int(c.get("ns", 0)), int(c.get("count", 0))
    ns0, n0 = snapshot()
    for _ in range(iters):
        client.infer(model, inputs)
    ns1, n1 = snapshot()
    return (ns1 - ns0) / max(n1 - n0, 1) / 1e3


def gpu_utilization(metrics_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return [float(v) for v in re.findall(r'^nv_gpu_utilization\{[^}]*\} ([\d.e+-]+)$', text, re.M)]


# perf_analyzer's inputs in system shared memory (section 4 says why).
SHM = ("--shared-memory", "system")


def offered_load(perf_analyzer, server, model, concurrency, out_dir, protocol="grpc", extra=()):
    """(inferences/s, p50 us, mean nv_gpu_utilization) from perf_analyzer over 'protocol'."""
    samples, stop = [], threading.Event()

    def sample():
        while not stop.wait(0.5):
            samples.extend(gpu_utilization(server.metrics_port))
    sampler = threading.Thread(target=sample)
    sampler.start()
    csv_path = os.path.join(out_dir, f"pa_{model}_c{concurrency}_{protocol}.csv")
    url = server.grpc_url if protocol == "grpc" else server.url
    try:
        r = run_perf_analyzer([perf_analyzer, "-m", model, "-u", url, "-i", protocol,
                               "--concurrency-range", str(concurrency), "--shape",
                               "input:3,224,224", "--measurement-interval", "4000",
                               # (10 trials: a batched model's first windows capture a CUDA graph
                               # for each new batch size; 4 did not settle on 2026-12-07.)
                               "--stability-percentage", "50", "--max-trials", "10",
                               "-f", csv_path, *extra], server)
    finally:
        stop.set()
        sampler.join()
    if r.returncode != 0:
        print(f"perf_analyzer failed on {model} (exit {r.returncode}): {r.stdout[-600:]}")
        print_server_tail(server)
        return 0.0, 0.0, 0.0
    with open(csv_path) as f:
        row = next(csv.DictReader(f))
    return (float(row["Inferences/Second"]), float(row["p50 latency"]),
            statistics.fmean(samples) if samples else float("nan"))


def rss_mb(pid):
    """A process's resident memory in MB (-1 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(ln.split()[1]) // 1024 for ln in f if ln.startswith("VmRSS")), -1)
    except OSError:
        return -1


def run_perf_analyzer(args, server, limit_mb=32768):
    """perf_analyzer's completed run (stdout and stderr together), its peak resident memory and
    the server's printed after: a run growing past 'limit_mb' is killed (one grew to 125 GB and
    was OOM-killed driving the batched model; the two peaks say which side grows)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()))
    reader.start()
    peak = server_peak = 0
    while proc.poll() is None:
        peak = max(peak, rss_mb(proc.pid))
        server_peak = max(server_peak, rss_mb(server.proc.pid))
        if peak > limit_mb:
            proc.kill()
            print(f"   perf_analyzer killed at {peak} MB resident")
        time.sleep(0.25)
    reader.join()
    print(f"   perf_analyzer peak {peak} MB resident, the server's {server_peak} MB")
    return subprocess.CompletedProcess(args, proc.returncode, "".join(output), "")


def print_server_tail(server, lines=15):
    """The server's last log lines (its per-run verbose lines left out): why a client failed."""
    log = [ln for ln in server.read_log().splitlines() if "GPU runs of" not in ln]
    print("   server log, last lines:\n   " + "\n   ".join(log[-lines:]))


def gpu_joules():
    """A function reading GPU 0's total-energy counter in joules (NVML; a meter)."""
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3


def served_energy(perf_analyzer, server, client, model, rate, seconds, out_dir):
    """(mJ per image, images/s) while perf_analyzer offers 'rate' images/s: the energy and the
    images completed between two readings 2 s in from the start and 'seconds' later."""
    joules = gpu_joules()
    marks = []

    def mark(delay):
        time.sleep(delay)
        s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
        marks.append((time.time(), joules(), int(s["inference_count"])))
    readers = [threading.Thread(target=mark, args=(d,)) for d in (2.0, 2.0 + seconds)]
    for t in readers:
        t.start()
    r = run_perf_analyzer([perf_analyzer, "-m", model, "-u", server.grpc_url, "-i", "grpc", *SHM,
                           "--request-rate-range", str(rate), "--shape", "input:3,224,224",
                           "--measurement-interval", str(int((seconds + 4) * 1000)),
                           "--max-trials", "1", "--stability-percentage", "100",
                           "-f", os.path.join(out_dir, f"energy_{model}.csv")], server)
    for t in readers:
        t.join()
    # One trial cannot be "stable" to perf_analyzer (it wants three alike) and it exits 2 saying
    # so; the load it offered over the window is what counts here (the images/s printed).
    offered = r.returncode == 0 or "Failed to obtain stable measurement" in r.stdout
    if not offered or len(marks) != 2:
        print(f"perf_analyzer failed on {model} (exit {r.returncode}): {r.stdout[-600:]}")
        print_server_tail(server)
        return float("nan"), 0.0
    (t0, e0, n0), (t1, e1, n1) = sorted(marks)
    return (e1 - e0) / max(n1 - n0, 1) * 1e3, (n1 - n0) / (t1 - t0)


def torch_energy(rate, seconds):
    """(mJ per image, images/s): PyTorch bf16 channels-last, a CUDA graph of batch 1 replayed for
    each image as it is due at 'rate' per second, host to host."""
    import torch
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval().cuda().to(dtype=torch.bfloat16,
                                                           memory_format=torch.channels_last)
    host_in = torch.randn(1, 3, 224, 224).pin_memory()
    host_out = torch.empty(1, 1000).pin_memory()
    dev_in = torch.empty(1, 3, 224, 224, device="cuda")

    def forward():
        dev_in.copy_(host_in, non_blocking=True)
        x = dev_in.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            host_out.copy_(model(x).float(), non_blocking=True)
    graph = capture_graph(forward)
    joules = gpu_joules()
    replay_paced(graph, 1 / rate, 2.0)  # warm: clocks up, as the served runs' first 2 s
    e0, t0 = joules(), time.perf_counter()
    k = replay_paced(graph, 1 / rate, seconds)
    e1, t1 = joules(), time.perf_counter()
    return (e1 - e0) / max(k, 1) * 1e3, k / (t1 - t0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("perf_analyzer", nargs="?", default="")
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--rate", type=int, default=500, help="section 5's images/s (0: skip)")
    parser.add_argument("--energy-seconds", type=float, default=10.0)
    parser.add_argument("--out", default=tempfile.mkdtemp())
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    precisions = args.precisions.split(",")
    Server = server_class(args.binary)
    import onnxruntime
    import tritonclient.grpc as grpcclient

    repo, onnx_path = exported_resnet50()
    for p in precisions:  # (section 3 sends 32 images)
        add_model(repo, f"resnet50_{p}", onnx_path,
                  config(f"resnet50_{p}", p, max(batches + [32])))
    # Section 4: the same bf16 model with dynamic batching (up to 64 images per execution).
    add_model(repo, "resnet50_batched", onnx_path,
              config("resnet50_batched", "bf16", 64,
                     "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"))

    print("== 1+2. ResNet-50 224x224 per batch, host to host (us): PyTorch CUDA graph (fp32; "
          "fp16/bf16 channels-last) vs Nereid's server-side compute (gRPC, one in flight)")
    torch_us = torch_times(batches, args.iters,
                           sorted({TORCH_OF.get(p, p) for p in precisions}, key=PRECISIONS.index))
    # A pinned pool large enough for every model's staging at batch 256 (154 MB each; the default
    # 256 MB would leave the later models on pageable staging).
    server = Server(os.path.join(repo, "models"), "--onnx-engine=auto",
                    "--grpc-max-input-size=1073741824", "--pinned-memory-pool-byte-size=2147483648",
                    "--log-verbose=1", start_timeout=600)  # (each model's GEMM tuning)
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        print(f"{'precision':>9} {'batch':>6} | {'PyTorch mean':>12} {'p50':>8} {'img/s':>8} | "
              f"{'Nereid':>8} {'img/s':>8} | {'Nereid/PyTorch time':>19}")
        rng = np.random.default_rng(0)
        for p in precisions:
            for b in batches:
                x = rng.standard_normal((b, 3, 224, 224)).astype(np.float32)
                ours = server_compute(client, grpcclient, f"resnet50_{p}", x,
                                      args.iters if b < 64 else max(args.iters // 10, 10))
                mean, p50 = torch_us[(TORCH_OF.get(p, p), b)]
                print(f"{p:>9} {b:>6} | {mean:12.1f} {p50:8.1f} {b / mean * 1e6:8.0f} | "
                      f"{ours:8.1f} {b / ours * 1e6:8.0f} | {ours / mean:18.2f}x")
        print()
        print("== 3. agreement with ONNX Runtime fp32 (CPU), 32 random images")
        session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        x = rng.uniform(-1, 1, (32, 3, 224, 224)).astype(np.float32)
        want = session.run(["output"], {"input": x})[0]
        print(f"{'precision':>9} | {'top-1 agreement':>15} | {'max diff / max |logit|':>22}")
        for p in precisions:
            t = grpcclient.InferInput("input", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            got = client.infer(f"resnet50_{p}", [t]).as_numpy("output")
            agree = float((got.argmax(1) == want.argmax(1)).mean())
            diff = float(np.abs(got - want).max() / np.abs(want).max())
            print(f"{p:>9} | {agree:15.3f} | {diff:22.2e}")
        print()
        if args.perf_analyzer:
            print("== 4. perf_analyzer, gRPC, concurrency 64, one 3x224x224 image per request, bf16")
            print(f"{'model':>18} | {'infer/s':>9} | {'p50 us':>9} | {'nv_gpu_utilization':>18}")
            rows = {}
            # Every batch size the batcher can form, once: its CUDA graph captured beforehand.
            for b in range(1, 65):
                t = grpcclient.InferInput("input", [b, 3, 224, 224], "FP32")
                t.set_data_from_numpy(rng.standard_normal((b, 3, 224, 224)).astype(np.float32))
                client.infer("resnet50_batched", [t])
            # Inputs through system shared memory: perf_analyzer keeps a copy of every request's
            # input bytes in its request records (InferContext::GetInputs, for its profile
            # export) unless the input lies in shared memory; at concurrency 64 those 602 KB
            # images grew it to 11 GB unbatched and 125 GB (OOM-killed) batched.
            for model in ("resnet50_bf16", "resnet50_batched"):
                rows[model] = offered_load(args.perf_analyzer, server, model, 64, args.out,
                                           extra=SHM)
                ips, p50, util = rows[model]
                print(f"{model:>18} | {ips:9.0f} | {p50:9.0f} | {util:18.2f}")
            if rows["resnet50_bf16"][0] > 0:
                print(f"dynamic batching / none: {rows['resnet50_batched'][0] / rows['resnet50_bf16'][0]:.2f}x")
            print()
        if args.perf_analyzer and args.rate > 0:
            print(f"== 5. energy per image at {args.rate} images/s offered, bf16 (NVML meter, GPU 0, "
                  f"idle included, {args.energy_seconds:.0f} s window)")
            print(f"{'server':>30} | {'mJ/image':>9} | {'images/s':>9}")
            for model in ("resnet50_batched", "resnet50_bf16"):
                mj, ips = served_energy(args.perf_analyzer, server, client, model, args.rate,
                                        args.energy_seconds, args.out)
                print(f"{'Nereid ' + model:>30} | {mj:9.2f} | {ips:9.0f}")
            mj, ips = torch_energy(args.rate, args.energy_seconds)
            print(f"{'PyTorch CUDA graph, batch 1':>30} | {mj:9.2f} | {ips:9.0f}")
            print()
        client.close()
        with open(server.log_path) as f:
            for line in f:
                if "native GPU engine" in line or "GPU runs of" in line:
                    print("   " + line.split("] ", 1)[-1].rstrip())
    finally:
        server.stop()


if __name__ == "__main__":
    main()
