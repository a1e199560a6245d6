"""The energy meter's facts on this machine's GPU 0, measured (docs/energy.md, issue 22 item 7):
how often NVML's total-energy counter changes, what one read costs, the power with nothing run
since a while (deep idle) against the floor right after work, and how long the floor lasts.
Needs nvidia-ml-py (pynvml) and, for the load, PyTorch with CUDA. Run on the device machine:
python3 bench/meter_facts.py
"""
import statistics
import time

import pynvml


def counter_mj(handle):
    return pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)


def power_from_counter(handle, seconds):
    """Average watts over 'seconds', from the counter (never the 1 s-averaged gauge)."""
    e0, t0 = counter_mj(handle), time.perf_counter()
    time.sleep(seconds)
    e1, t1 = counter_mj(handle), time.perf_counter()
    return (e1 - e0) / 1e3 / (t1 - t0)


def main():
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    print("gpu:", pynvml.nvmlDeviceGetName(handle))
    # Read cost: 200 reads back to back.
    costs = []
    for _ in range(200):
        t = time.perf_counter()
        counter_mj(handle)
        costs.append((time.perf_counter() - t) * 1e3)
    print(f"counter read: median {statistics.median(costs):.3f} ms, p90 "
          f"{sorted(costs)[int(0.9 * len(costs))]:.3f} ms")
    # Update period: poll for 3 s and time the changes.
    changes, last, last_t = [], counter_mj(handle), time.perf_counter()
    end = last_t + 3
    while time.perf_counter() < end:
        v = counter_mj(handle)
        now = time.perf_counter()
        if v != last:
            changes.append((now - last_t) * 1e3)
            last, last_t = v, now
    if len(changes) > 2:
        print(f"counter changes every {statistics.median(changes[1:]):.1f} ms (median of "
              f"{len(changes) - 1})")
    idle = power_from_counter(handle, 3)
    print(f"power before any work here (3 s, from the counter): {idle:.1f} W")
    try:
        import torch
        a = torch.randn(8192, 8192, device="cuda")
        t_end = time.time() + 5
        while time.time() < t_end:
            a = a @ a
            a = a / a.norm()
        torch.cuda.synchronize()
        print(f"the first 0.5 s after a 5 s GEMM load: {power_from_counter(handle, 0.5):.1f} W")
        for second in range(1, 31):
            w = power_from_counter(handle, 1.0)
            if second in (1, 2, 5, 10, 15, 20, 25, 30):
                print(f"  {second:2d} s after the load stopped: {w:.1f} W")
    except Exception as e:  # no PyTorch or no CUDA there: the idle figures alone
        print("no load phase:", e)


if __name__ == "__main__":
    main()
