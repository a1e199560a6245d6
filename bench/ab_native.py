#!/usr/bin/env python3
"""Two or more builds of bench_native on one model, alternating round by round on the same inputs:
the median of each build's per-round p50 and of each node's time (bench_native --profile), side
by side. On a shared host a build's own time moves by 10-20% within the hour; alternating the
builds and reading medians keeps that noise out of the comparison.

  ab_native.py MODEL.onnx BIN [BIN...] [--rounds 5] [--iterations 8] [--threads 1] [--batch 1]
               [--nodes conv_27,conv_34] [--int8] [--shape 1,3,48,192]

BIN may be a wrapper script that sets environment variables and execs a bench_native.
--nodes lists the nodes to print (default: the 12 slowest of the first build).
"""
import argparse
import collections
import re
import statistics
import subprocess


def run(binary, args):
    cmd = [binary, f"--model={args.model}", f"--batch={args.batch}",
           f"--threads={args.threads}", f"--iterations={args.iterations}", "--profile=100000"]
    cmd += ["--int8"] if args.int8 else []
    cmd += [f"--shape={args.shape}"] if args.shape else []  # (dynamic dimensions other than batch)
    out = subprocess.run(cmd, check=True,
                         capture_output=True, text=True).stdout
    total = float(re.search(r"p50_us (\S+)", out).group(1))
    nodes = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].endswith("%"):
            nodes[parts[3]] = float(parts[1])
    return total, nodes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--nodes", default="")
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--shape", default="")
    args = parser.parse_args()
    totals = collections.defaultdict(list)
    nodes = collections.defaultdict(lambda: collections.defaultdict(list))
    for _ in range(args.rounds):
        for binary in args.binaries:
            total, times = run(binary, args)
            totals[binary].append(total)
            for name, us in times.items():
                nodes[binary][name].append(us)
    print(f"{args.model}, batch {args.batch}, {args.threads} thread(s), {args.rounds} rounds")
    for binary in args.binaries:
        rounds = " ".join(f"{t:.0f}" for t in totals[binary])
        print(f"  {binary}: p50 per round {rounds}; median {statistics.median(totals[binary]):.0f} us")
    first = nodes[args.binaries[0]]
    wanted = [n for n in args.nodes.split(",") if n] or sorted(
        first, key=lambda n: -statistics.median(first[n]))[:12]
    print(f"  {'node':28s} " + " ".join(f"{i:>10d}" for i in range(len(args.binaries))))
    for name in wanted:
        cells = [statistics.median(nodes[b][name]) if nodes[b][name] else float("nan")
                 for b in args.binaries]
        print(f"  {name:28s} " + " ".join(f"{c:10.0f}" for c in cells))


if __name__ == "__main__":
    main()
