#!/usr/bin/env python3
"""The native engine against ONNX Runtime on the same ONNX models and inputs: outputs compared
(max absolute and relative error, top-1 agreement over the last dimension per row) and times
interleaved in one run.

  native_vs_ort.py --bench-native=build/bench_native MODEL.onnx... [--batch=1,8] [--threads=1]
                   [--rounds=5] [--iterations=10] [--int8 [--calibrate]] [--openvino]

MODEL.onnx:3,48,320 gives the dims after the batch of every input of that rank (for variable ones:
MODEL.onnx:128 for a text encoder's tokens and mask); other inputs get their declared shapes
(variable dims 1). Values are random: token ids ("*input_ids") below 1000, masks ("*mask*") ones,
other integers 0-3.

For each model and batch: ORT (CPU provider, intra-op threads --threads, all graph
optimizations) and bench_native (the same number of threads: its intra-op team) alternate
--rounds times, each timing --iterations runs after a warm-up; the table shows the median of the
per-round medians. Exit status 1 when an output differs beyond
--rtol/--atol (documented per precision in docs/native-engine.md).

--openvino adds ONNX Runtime's OpenVINO execution provider (device CPU, num_of_threads --threads)
to the alternation, from the onnxruntime-openvino wheel: run the script with that wheel's package
first on the path (PYTHONPATH=.venv/onnxruntime-openvino; scripts/install-deps.sh installs it
there), so that 'onnxruntime' is that build (both providers, one library version).
"""

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort


def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def openvino_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=[
        ("OpenVINOExecutionProvider", {"device_type": "CPU", "num_of_threads": str(threads)})])


def ort_time(sess, feeds, iterations):
    sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


ONNX_TYPES = {np.dtype(np.float32): 1, np.dtype(np.int64): 7, np.dtype(np.int32): 6,
              np.dtype(np.bool_): 9, np.dtype(np.float64): 11}


def write_feeds(path, feeds):
    with open(path, "wb") as f:
        for name, value in feeds.items():
            raw = name.encode()
            f.write(struct.pack("<I", len(raw)) + raw)
            f.write(struct.pack("<II", ONNX_TYPES[value.dtype], value.ndim))
            f.write(struct.pack(f"<{value.ndim}q", *value.shape))
            f.write(np.ascontiguousarray(value).tobytes())


def dummy(meta, shape_override, batch, seed):
    """Random data for one input: its declared shape, variable dims from the override or 1."""
    rng = np.random.default_rng(seed)
    shape = [d if isinstance(d, int) else 1 for d in meta.shape]
    if shape_override is not None:
        shape = shape_override
    if shape:
        shape[0] = batch if not isinstance(meta.shape[0], int) or shape_override else shape[0]
    kind = meta.type
    if "int64" in kind:
        if "mask" in meta.name:
            return np.ones(shape, np.int64)
        return rng.integers(0, 1000 if meta.name.endswith("input_ids") else 4, shape).astype(np.int64)
    if "bool" in kind:
        return np.zeros(shape, np.bool_)
    return rng.uniform(-1, 1, shape).astype(np.float32)


def native_run(binary, model, iterations, feeds_file, output_file, int8, threads, split_rows,
               calibration=None):
    cmd = [binary, f"--model={model}", f"--iterations={iterations + 1}", f"--feeds={feeds_file}",
           f"--threads={threads}",
           f"--output={output_file}"] + (["--int8"] if int8 else []) + (
               ["--split-rows"] if split_rows else []) + (
               [f"--calibration={calibration}"] if calibration else [])
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "failed")
    fields = run.stdout.strip().splitlines()[-1].split()
    return float(fields[3])  # p50_us


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--bench-native", required=True)
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--calibrate", action="store_true",
                        help="with --int8: the native engine's activations smoothed from "
                             "calibration inputs (another draw of the same kind)")
    parser.add_argument("--split-rows", action="store_true",
                        help="the native engine runs batches row by row (nereid.split_batches)")
    parser.add_argument("--openvino", action="store_true",
                        help="also ONNX Runtime's OpenVINO provider (see the usage above)")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    args = parser.parse_args()
    if args.openvino and "OpenVINOExecutionProvider" not in ort.get_available_providers():
        sys.exit(f"onnxruntime {ort.__version__} from {ort.__file__} has no OpenVINO provider: "
                 "run with PYTHONPATH=.venv/onnxruntime-openvino")
    failed = False
    print(f"onnxruntime {ort.__version__}, {args.threads} thread(s)")
    print(f"{'model':<24} {'batch':>5} {'ort_us':>10} {'native_us':>10} {'native/ort':>10} "
          + (f"{'openvino_us':>11} {'ov/ort':>7} {'ov_abs/max':>10} " if args.openvino else "")
          + f"{'max_abs':>9} {'max_rel':>9} {'top1':>6} {'abs/max':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            path, _, dims = model.partition(":")
            sess = ort_session(path, args.threads)
            ov = None
            if args.openvino:
                try:
                    ov = openvino_session(path, args.threads)
                except Exception as e:  # noqa: BLE001 (OpenVINO's own compile errors)
                    cause = str(e).split("Arguments")[-1].strip().splitlines()[0][:100]
                    print(f"{os.path.basename(path)[:24]:<24}  OpenVINO refuses the model: "
                          f"...{cause}")
            for batch in [int(b) for b in args.batch.split(",")]:
                feeds = {}
                for k, meta in enumerate(sess.get_inputs()):
                    after = [int(d) for d in dims.split(",")] if dims else []
                    override = [batch] + after if after and len(meta.shape) == len(after) + 1 else None
                    feeds[meta.name] = dummy(meta, override, batch, seed=batch * 131 + k)
                feeds_file, y_file = os.path.join(tmp, "feeds.bin"), os.path.join(tmp, "y.bin")
                write_feeds(feeds_file, feeds)
                calibration = None
                if args.calibrate:
                    calibration = os.path.join(tmp, "calibration.bin")
                    write_feeds(calibration, {
                        meta.name: dummy(meta, [8] + after if after and len(meta.shape) ==
                                         len(after) + 1 else None, 8, seed=7919 + k)
                        for k, meta in enumerate(sess.get_inputs())})
                want = sess.run(None, feeds)[0]
                ort_times, native_times, ov_times = [], [], []
                try:
                    for _ in range(args.rounds):
                        ort_times.append(ort_time(sess, feeds, args.iterations))
                        if ov is not None:
                            ov_times.append(ort_time(ov, feeds, args.iterations))
                        native_times.append(native_run(args.bench_native, path, args.iterations,
                                                       feeds_file, y_file, args.int8,
                                                       args.threads, args.split_rows,
                                                       calibration))
                except RuntimeError as e:
                    print(f"{os.path.basename(path)[:24]:<24} {batch:>5}  REFUSED OR FAILED: {e}")
                    failed = True
                    continue
                got = np.fromfile(y_file, dtype=want.dtype).reshape(want.shape)
                diff = np.abs(got - want)
                max_abs = float(diff.max())
                max_rel = float((diff / (np.abs(want) + 1e-6)).max())
                scale = float(np.abs(want).max())
                # Top-1 over the last dimension, per row (the accuracy guard's measure): a
                # recogniser's [batch, steps, classes] agrees step by step.
                last = want.shape[-1] if want.ndim > 1 else want.size
                top1 = float((got.reshape(-1, last).argmax(1) ==
                              want.reshape(-1, last).argmax(1)).mean())
                ok = np.allclose(got, want, rtol=args.rtol, atol=args.atol * max(scale, 1.0))
                failed |= not ok
                o, n = statistics.median(ort_times), statistics.median(native_times)
                ov_cols = f"{'-':>11} {'-':>7} {'-':>10} " if args.openvino else ""
                if ov is not None:
                    v = statistics.median(ov_times)
                    ov_diff = float(np.abs(ov.run(None, feeds)[0] - want).max())
                    ov_cols = f"{v:>11.0f} {v / o:>7.2f} {ov_diff / max(scale, 1e-30):>10.2e} "
                print(f"{os.path.basename(path)[:24]:<24} {batch:>5} {o:>10.0f} {n:>10.0f} "
                      f"{n / o:>10.2f} {ov_cols}{max_abs:>9.2e} {max_rel:>9.2e} {top1:>6.2f} "
                      f"{max_abs / max(scale, 1e-30):>9.2e}{'' if ok else '  MISMATCH'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
