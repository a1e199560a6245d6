"""Side by side: perf_analyzer (sync and async) and `nereid-perf` on the same server and models, from
the CSV files scripts/device_cpu_bench.sh writes."""
import csv
import os
import sys


def rows(path):
    with open(path) as f:
        return {int(float(r["Concurrency"])): r for r in csv.DictReader(f)}


def main():
    out = sys.argv[1]
    print("| model | tool | concurrency | infer/s | p50 us | p99 us |")
    print("|---|---|---|---|---|---|")
    for model in ("simple", "recommend_model"):
        runs = [(f"perf_analyzer {m}", os.path.join(out, f"pa_{model}_{m}.csv")) for m in ("sync", "async")]
        runs.append(("nereid-perf", os.path.join(out, f"np_{model}.csv")))
        for tool, path in runs:
            if not os.path.exists(path):
                print(f"| {model} | {tool} | - | missing | | |")
                continue
            for c, r in sorted(rows(path).items()):
                print(f"| {model} | {tool} | {c} | {float(r['Inferences/Second']):.0f} | "
                      f"{float(r['p50 latency']):.0f} | {float(r['p99 latency']):.0f} |")


if __name__ == "__main__":
    main()
