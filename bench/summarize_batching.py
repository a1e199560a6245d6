"""Summarizes bench/batching.sh: per concurrency, throughput and p99 of unbatched, the best hand-tuned
delay and the latency-goal mode, with the ratios the batching issue asks for."""
import csv
import os
import sys


def load(path):
    with open(path) as f:
        return {int(float(r["Concurrency"])): r for r in csv.DictReader(f)}


def batch(row):
    """Mean requests per execution in the window, from the server's statistics (nereid-perf)."""
    v = row.get("Server Batch Size")
    return f"{float(v):.1f}" if v not in (None, "") else "-"


def main():
    out, goal_us, delays = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    unbatched = load(os.path.join(out, "unbatched.csv"))
    tuned = {d: load(os.path.join(out, f"delay_{d}.csv")) for d in delays}
    goal = load(os.path.join(out, "goal.csv"))
    # Per configuration: what nereid-perf measured, with the server's own view of each window.
    for name, rows in [("unbatched", unbatched)] + [(f"delay_{d}", tuned[d]) for d in delays] + [("goal", goal)]:
        print(f"### {name}")
        print("| concurrency | infer/s | p50 us | p99 us | server batch | server queue us | server compute us |")
        print("|---|---|---|---|---|---|---|")
        for c in sorted(rows):
            r = rows[c]
            print(f"| {c} | {float(r['Inferences/Second']):.0f} | {float(r['p50 latency']):.0f} | "
                  f"{float(r['p99 latency']):.0f} | {batch(r)} | {float(r.get('Server Queue') or 0):.0f} | "
                  f"{float(r.get('Server Compute Infer') or 0):.0f} |")
        print()
    print("| concurrency | unbatched infer/s | unbatched p99 us | best delay | best infer/s | best p99 us "
          "| best batch | goal infer/s | goal p99 us | goal batch | goal met | batched/unbatched | goal/best |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in sorted(unbatched):
        u = unbatched[c]
        best_delay = max(delays, key=lambda d: float(tuned[d][c]["Inferences/Second"]))
        b, g = tuned[best_delay][c], goal[c]
        ut, bt, gt = (float(x["Inferences/Second"]) for x in (u, b, g))
        gp99 = float(g["p99 latency"])
        print(f"| {c} | {ut:.0f} | {float(u['p99 latency']):.0f} | {best_delay} us | {bt:.0f} | "
              f"{float(b['p99 latency']):.0f} | {batch(b)} | {gt:.0f} | {gp99:.0f} | {batch(g)} | "
              f"{'yes' if gp99 <= goal_us else 'NO'} | {bt / ut:.2f}x | {gt / bt:.2f} |")


if __name__ == "__main__":
    main()
