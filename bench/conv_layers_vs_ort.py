"""Where a CNN's CPU time goes, layer by layer, on the native engine against ONNX Runtime: both
run the same ONNX file with the same threads and batch, each with its own per-node profile
(bench_native --profile; ORT's enable_profiling), and every convolution's time (with what each
engine fused into it: batch norm, the residual Add, the activation) is summed per layer shape
(channels in -> out, kernel, stride). Times are per run, in microseconds; the shapes where the
native engine trails come first.

Usage: .venv/bin/python bench/conv_layers_vs_ort.py --bench-native=build/bench_native MODEL.onnx
       [--batch 1] [--threads 1] [--iterations 10]
"""
import argparse
import collections
import json
import os
import subprocess
import tempfile

import numpy as np
import onnx
import onnxruntime as ort


def conv_of(name, nodes, producer):
    """The Conv a fused node's time belongs to: walking back from a Relu through an Add or a
    BatchNormalization to the Conv that feeds it (ORT names a fused node after its last op, or
    after that op's output where the graph's nodes have no names of their own)."""
    node = nodes.get(name, producer.get(name))
    for _ in range(5):
        if node is None or node.op_type == "Conv":
            break
        feeding = [producer[i] for i in node.input if i in producer and producer[i].op_type in
                   ("Conv", "BatchNormalization", "Relu", "Add")]
        direct = [n for n in feeding if n.op_type in ("Conv", "BatchNormalization")]
        node = (direct or feeding or [None])[0]
    return node.name if node is not None and node.op_type == "Conv" else None


def ort_times(path, batch, threads, iterations):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    # Every input (a layer's residual may be one) at its declared shape, the batch first.
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal([batch] + list(i.shape[1:])).astype(np.float32)
            for i in session.get_inputs()}
    for _ in range(iterations + 3):
        session.run(None, feed)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    total, count = collections.defaultdict(float), collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")].replace("_nchwc", "").replace("_token_0", "")
            total[name] += e["dur"]
            count[name] += 1
    return {n: total[n] / count[n] for n in total}


def native_times(binary, path, batch, threads, iterations):
    out = subprocess.run([binary, f"--model={path}", f"--batch={batch}", f"--threads={threads}",
                          f"--iterations={iterations}", "--profile=100000"],
                         check=True, capture_output=True, text=True).stdout
    times = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].endswith("%"):
            times[parts[3]] = float(parts[1])
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--bench-native", required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    model = onnx.load(args.model)
    graph = model.graph
    nodes = {n.name: n for n in graph.node}
    producer = {o: n for n in graph.node for o in n.output}
    weights = {i.name: i for i in graph.initializer}
    theirs = collections.defaultdict(float)
    for name, us in ort_times(args.model, args.batch, args.threads, args.iterations).items():
        conv = conv_of(name, nodes, producer)
        if conv is not None:
            theirs[conv] += us
    ours = native_times(args.bench_native, args.model, args.batch, args.threads, args.iterations)
    layers = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for conv, us in ours.items():
        if conv not in theirs or nodes.get(conv) is None or nodes[conv].op_type != "Conv":
            continue
        node = nodes[conv]
        w = weights[node.input[1]].dims
        strides = next((list(a.ints) for a in node.attribute if a.name == "strides"), [1])
        key = f"{w[1]}->{w[0]} k{w[2]} s{strides[0]}"
        layers[key][0] += us
        layers[key][1] += theirs[conv]
        layers[key][2] += 1
    print(f"{os.path.basename(args.model)}, batch {args.batch}, {args.threads} thread(s), "
          f"onnxruntime {ort.__version__}")
    print(f"{'layer':>22} {'convs':>5} {'native us':>10} {'ORT us':>10} {'native/ORT':>10}")
    for key, (a, b, n) in sorted(layers.items(), key=lambda kv: kv[1][1] - kv[1][0]):
        print(f"{key:>22} {n:5d} {a:10.0f} {b:10.0f} {a / b:10.2f}")
    a = sum(v[0] for v in layers.values())
    b = sum(v[1] for v in layers.values())
    print(f"{'every convolution':>22} {sum(v[2] for v in layers.values()):5d} {a:10.0f} "
          f"{b:10.0f} {a / b:10.2f}")


if __name__ == "__main__":
    main()
