"""Where a split GPU run's first part should end: ResNet-50 at one batch size, the server started
once per variant and the variants interleaved over rounds (scripts/gpu_device_run.sh, section
"split").

A run whose page-locked input holds 32 MiB or more runs in two parts, the second part's input
crossing to the device while the first part runs (docs/gpu.md). Each variant sets the first part
(NEREID_GPU_SPLIT_FIRST, percent of the rows) or turns the split off (NEREID_GPU_SPLIT_RUNS=0);
the figure is the server-side compute per execution (statistics extension, host to host), one
request of the whole batch in flight over gRPC, as bench/gpu_vision.py measures it.

Usage: python3 bench/gpu_split.py NEREID_BINARY [--batch 256] [--precisions bf16,int8]
       [--variants off,50,37,25,19] [--rounds 2] [--iters 20]
"""
import argparse
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_vision import add_model, config, exported_resnet50, server_class, server_compute  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--precisions", default="bf16,int8")
    parser.add_argument("--variants", default="off,50,37,25,19")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    precisions = args.precisions.split(",")
    variants = args.variants.split(",")
    Server = server_class(args.binary)
    import tritonclient.grpc as grpcclient

    repo, onnx_path = exported_resnet50()
    for p in precisions:
        add_model(repo, f"resnet50_{p}", onnx_path, config(f"resnet50_{p}", p, args.batch))
    x = np.random.default_rng(0).standard_normal((args.batch, 3, 224, 224)).astype(np.float32)
    times = {(v, p): [] for v in variants for p in precisions}
    splits = {}
    for r in range(args.rounds):
        for v in variants:
            env = {"NEREID_GPU_SPLIT_RUNS": "0"} if v == "off" else {"NEREID_GPU_SPLIT_FIRST": v}
            server = Server(os.path.join(repo, "models"), "--onnx-engine=auto",
                            "--grpc-max-input-size=1073741824",
                            "--pinned-memory-pool-byte-size=1073741824", "--log-verbose=1",
                            start_timeout=600, env=env)
            try:
                client = grpcclient.InferenceServerClient(server.grpc_url)
                for p in precisions:
                    times[(v, p)].append(
                        server_compute(client, grpcclient, f"resnet50_{p}", x, args.iters))
                client.close()
                with open(server.log_path) as f:
                    for line in f:
                        if "rows split in" in line:
                            splits[v] = line.split("rows split in", 1)[1].split(":")[0].strip()
            finally:
                server.stop()
            print(f"round {r + 1} {v:>4}: " +
                  " ".join(f"{p} {times[(v, p)][-1]:9.1f} us" for p in precisions), flush=True)
    print(f"\n== ResNet-50 batch {args.batch}, server compute per execution (us, median of "
          f"{args.rounds} rounds x {args.iters} runs), by the split's first part")
    print(f"{'variant':>8} {'parts':>10} | " + " | ".join(f"{p:>9} {'vs off':>7}" for p in precisions))
    for v in variants:
        cells = []
        for p in precisions:
            ours = statistics.median(times[(v, p)])
            base = statistics.median(times[(variants[0], p)])
            cells.append(f"{ours:9.1f} {ours / base:6.3f}x")
        print(f"{v:>8} {splits.get(v, '-'):>10} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
