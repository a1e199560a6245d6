#!/usr/bin/env python3
"""Instances on one GPU vs on two: does `gpus: [0, 1]` place them on both and does throughput scale?

The model is written here, on the device machine, without the onnx package (a few protobuf fields by
hand; weights are random): x [rows, 64] -> 7 x (MatMul 4096x4096 + Relu) -> [rows, 16], FP32 on the
native engine's GPU path, so each request of 256 rows is ~60 GFLOP of GPU work against 64 KiB in and
16 KiB out: the GPU, not HTTP, is the bottleneck. The same config is served twice, with
`instance_group { kind: KIND_GPU count: 2 gpus: [0] }` and then `gpus: [0, 1]`, each driven by
nereid-perf over HTTP at concurrency 16; the server's nv_gpu_utilization is read per GPU.

  python3 bench/gpu_scaling.py NEREID_BINARY NEREID_PERF [--out DIR]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, value):
    """One protobuf field: int -> varint, bytes/str -> length-delimited."""
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def value_info(name, dims):  # ValueInfoProto{name, type{tensor_type{elem_type FLOAT, shape}}}
    shape = b"".join(field(1, field(2, d) if isinstance(d, str) else field(1, d)) for d in dims)
    return field(1, name) + field(2, field(1, field(1, 1) + field(2, shape)))


def tensor(name, array):  # TensorProto{dims, data_type FLOAT, name, raw_data}
    return (b"".join(field(1, d) for d in array.shape) + field(2, 1) + field(8, name) +
            field(9, array.astype("<f4").tobytes()))


def node(op, inputs, output):  # NodeProto{input, output, name, op_type}
    return b"".join(field(1, i) for i in inputs) + field(2, output) + field(3, output) + field(4, op)


def write_model(path, widths=(64,) + (4096,) * 8 + (16,)):
    rng = np.random.default_rng(0)
    graph, x = b"", "x"
    for i, (k, n) in enumerate(zip(widths[:-1], widths[1:])):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        graph += field(5, tensor(f"w{i}", w))
        graph += field(1, node("MatMul", [x, f"w{i}"], f"m{i}"))
        x = f"m{i}"
        if i < len(widths) - 2:
            graph += field(1, node("Relu", [x], f"r{i}"))
            x = f"r{i}"
    graph += field(1, node("Identity", [x], "y"))
    graph += field(2, "scaling") + field(11, value_info("x", ["rows", widths[0]]))
    graph += field(12, value_info("y", ["rows", widths[-1]]))
    model = field(1, 8) + field(8, field(1, "") + field(2, 13)) + field(7, graph)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(model)


def gpu_utilization(metrics_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return [float(v) for v in re.findall(r'^nv_gpu_utilization\{[^}]*\} ([\d.e+-]+)$', text, re.M)]


def run(binary, perf, repo, gpus, out_dir, seconds, kind="KIND_GPU"):
    group = (f'kind: KIND_GPU count: 2 gpus: [ {", ".join(map(str, gpus))} ]' if kind == "KIND_GPU"
             else "kind: KIND_CPU count: 2")
    with open(os.path.join(repo, "scaling", "config.pbtxt"), "w") as f:
        f.write('backend: "native"\nmax_batch_size: 256\n'
                'input [ { name: "x" data_type: TYPE_FP32 dims: [ 64 ] } ]\n'
                'output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                f'instance_group [ {{ {group} }} ]\n')
    log = open(os.path.join(out_dir, f"scaling_server_{len(gpus)}gpu.log"), "w")
    proc = subprocess.Popen([binary, "serve", f"--model-repository={repo}", "--http-port=18800",
                             "--grpc-port=18801", "--metrics-port=18802", "--allow-gpu-metrics=true",
                             "--metrics-interval-ms=500"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen("http://127.0.0.1:18800/v2/models/scaling/ready", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(open(log.name).read()[-3000:])
                time.sleep(0.2)
        samples = []
        perf_proc = subprocess.Popen(
            [perf, "-m", "scaling", "-u", "127.0.0.1:18800", "-b", "256", "--concurrency-range", "16",
             "-p", str(seconds * 1000), "--warmup", "2000", "-q", "-f",
             os.path.join(out_dir, f"scaling_{len(gpus)}gpu.csv")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(3)
        while perf_proc.poll() is None:
            try:
                samples.append(gpu_utilization(18802))
            except OSError:
                pass
            time.sleep(1)
        text = perf_proc.stdout.read()
        row = open(os.path.join(out_dir, f"scaling_{len(gpus)}gpu.csv")).read().splitlines()[1].split(",")
        placed = re.findall(r"instance '([^']+)' on GPU (\d+)", open(log.name).read())
        util = np.mean(np.array(samples), axis=0).round(2).tolist() if samples else []
        return float(row[1]), float(row[2]), placed, util, text
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("perf")
    ap.add_argument("--out", default=tempfile.mkdtemp())
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--cpu-dry-run", action="store_true", help="small model on KIND_CPU (no GPU)")
    args = ap.parse_args()
    repo = tempfile.mkdtemp()
    write_model(os.path.join(repo, "scaling", "1", "model.onnx"),
                *([(64, 256, 256, 16)] if args.cpu_dry_run else []))
    results = {}
    for gpus in ([0], [0, 1]):
        ips, p50, placed, util, text = run(args.binary, args.perf, repo, gpus, args.out, args.seconds,
                                           "KIND_CPU" if args.cpu_dry_run else "KIND_GPU")
        results[len(gpus)] = ips
        print(f"gpus {gpus}: {ips:.0f} infer/s (rows/s {ips:.0f}; requests/s {ips / 256:.1f}), p50 "
              f"{p50:.0f} us, instances {placed}, mean nv_gpu_utilization per GPU {util}", flush=True)
    if 1 in results and 2 in results:
        print(f"scaling: two GPUs / one GPU = {results[2] / results[1]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
