"""BERT-base at 128 tokens on one GPU, side by side in one run (scripts/gpu_device_run.sh, section
"text"):

1. PyTorch's best as a user would write it: transformers' BertModel of BERT-base's shapes (random
   weights, no pooler), eval, attention through SDPA, fp32 and bf16/fp16, a CUDA graph per batch,
   host to host (pinned ids -> device -> encoder -> last_hidden_state -> pinned output); every
   token attended (attention_mask None: SDPA's fastest path, what full-length inputs allow).
2. Nereid's native GPU engine serving the same shapes exported by scripts/text_models.py (bert_base,
   random weights, last_hidden_state only), configured for ONNX Runtime (platform
   onnxruntime_onnx, KIND_GPU, --onnx-engine=auto), dims [128], precision fp32, bf16, fp16: the
   server-side compute per execution (statistics extension: the copies and the kernels, host to
   host), one request in flight over gRPC, an all-ones mask; int8 (per-channel weights, each
   token's activations quantized as it comes) against PyTorch's bf16.
3. Agreement with ONNX Runtime fp32 on the CPU: 4 sequences of random ids with padded tails, the
   largest difference relative to the largest output, per precision.
4. Lengths drawn uniformly from 16-128 (bf16, 512 sequences in requests of up to 64): every
   sequence padded to 128 for the fixed-length model, against each padded to the first of
   --lengths that holds it for the same model with its tokens dimension open (nereid.open_dims:
   a plan and CUDA graphs per length), against ragged batching (allow_ragged_batch: each sequence
   its own unpadded request, sent asynchronously with 64 and then all 512 in flight, the dynamic
   batcher joining up to 64 (max_queue_delay 50 ms: one Python client sends ~6,000 requests/s,
   so a shorter delay runs batches of the few that arrived in it) and the engine running them
   packed end to end); every execution's whole span on the server (the statistics' batch_stats:
   inputs gathered, the GPU run, each request answered), summed, sequences/s.

Usage: python3 bench/gpu_text.py NEREID_BINARY [--batches 1,64] [--iters 100] [--lengths 32,64,96,128]
       [--log-verbose]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
os.environ.setdefault("NEREID_BINARY", "")
from gpu_serving import capture_graph, replay_times  # noqa: E402  (bench/, this file's folder)
from gpu_vision import add_model, server_compute_feeds  # noqa: E402

TOKENS, HIDDEN, VOCAB = 128, 768, 30522
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
# Nereid's int8 (GEMMs on int8 tensor cores, the rest bf16) against PyTorch's bf16.
TORCH_OF = {"int8": "bf16"}


def torch_times(batches, iters, precisions):
    """us per batch (mean, median) per (precision, batch), host to host from a CUDA graph."""
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=12,
                                  num_attention_heads=12, intermediate_size=3072,
                                  attn_implementation="sdpa")
    print(f"transformers {transformers.__version__}, attention: "
          f"{getattr(cfg, '_attn_implementation', '?')}")
    out = {}
    for precision in precisions:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        model = transformers.BertModel(cfg, add_pooling_layer=False)
        model = model.eval().cuda().to(dtype)
        for batch in batches:
            host_in = torch.randint(0, VOCAB, (batch, TOKENS)).pin_memory()
            host_out = torch.empty(batch, TOKENS, HIDDEN).pin_memory()
            dev_in = torch.empty(batch, TOKENS, dtype=torch.int64, device="cuda")

            def forward():
                dev_in.copy_(host_in, non_blocking=True)
                with torch.no_grad():
                    y = model(input_ids=dev_in).last_hidden_state
                host_out.copy_(y.float(), non_blocking=True)
            graph = capture_graph(forward)
            out[(precision, batch)] = replay_times(
                graph, iters if batch < 64 else max(iters // 5, 10))
            del graph
        model = None  # (its weights freed before the next precision's)
        torch.cuda.empty_cache()
    return out


def config(name, precision, max_batch, lengths=None):
    """lengths: the tokens dimension open, a plan per length (nereid.open_dims)."""
    tokens = -1 if lengths else TOKENS
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {tokens} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {tokens} ] }}
]
output [ {{ name: "last_hidden_state" data_type: TYPE_FP32 dims: [ {tokens}, {HIDDEN} ] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 }} ]
parameters {{ key: "precision" value {{ string_value: "{precision}" }} }}
""" + (f'parameters {{ key: "nereid.open_dims" value {{ string_value: "{lengths}" }} }}\n'
       if lengths else "")


def executions(client, model):
    """The model's statistics so far: 'ns' and 'count' of its executions (batch_stats: each
    execution's whole span on the server, the inputs gathered into staging, the GPU run, each
    request's outputs answered; the same measure for a padded batch as for a ragged one), and the
    per-request split summed over its requests (queue, compute_input: the execution's start to the
    GPU run's, compute_infer: the run, compute_output: the run's end to the request's response)."""
    s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    batches = s.get("batch_stats", [])
    out = {"ns": sum(int(b["compute_infer"].get("ns", 0)) for b in batches),
           "count": sum(int(b["compute_infer"].get("count", 0)) for b in batches)}
    stats = s.get("inference_stats", {})
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        out[key] = int(stats.get(key, {}).get("ns", 0))
    out["requests"] = int(stats.get("success", {}).get("count", 0))
    return out


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


def split(d):
    """'per request: ...' of a delta of executions(): the mean request's time in each part (us)."""
    n = max(d["requests"], 1)
    return ("per request (us): " +
            ", ".join(f"{k} {d[k] / n / 1e3:.0f}" for k in
                      ("success", "queue", "compute_input", "compute_infer", "compute_output")))


def total_compute(client, model, requests):
    """(server execution time in us, client wall time in us, the statistics' delta) of 'requests'
    (lists of inputs), one in flight, after each has run once."""
    import time
    for inputs in requests:
        client.infer(model, inputs)
    before, t0 = executions(client, model), time.perf_counter()
    for inputs in requests:
        client.infer(model, inputs)
    wall = time.perf_counter() - t0
    d = delta(executions(client, model), before)
    return d["ns"] / 1e3, wall * 1e6, d


def ragged_config(name, max_batch):
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true }}
]
output [ {{ name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, {HIDDEN} ] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 50000 }}
parameters {{ key: "precision" value {{ string_value: "bf16" }} }}
parameters {{ key: "nereid.max_sequence_length" value {{ string_value: "{TOKENS}" }} }}
"""


def batched_compute(client, model, requests, in_flight):
    """(server execution time in us summed over executions, executions, client wall us, the
    statistics' delta) of 'requests' sent asynchronously with up to 'in_flight' outstanding (the
    dynamic batcher joins them), after a first pass that tunes and captures every graph the
    batches need."""
    import threading
    import time

    def run_all():
        slots, errors = threading.Semaphore(in_flight), []

        def done(result, error):
            if error is not None:
                errors.append(error)
            slots.release()
        for inputs in requests:
            slots.acquire()
            client.async_infer(model, inputs, done)
        for _ in range(in_flight):
            slots.acquire()
        if errors:
            raise errors[0]
    run_all()
    before, t0 = executions(client, model), time.perf_counter()
    run_all()
    wall = time.perf_counter() - t0
    d = delta(executions(client, model), before)
    return d["ns"] / 1e3, d["count"], wall * 1e6, d


def feeds(mod, ids, mask):
    inputs = [mod.InferInput("input_ids", list(ids.shape), "INT64"),
              mod.InferInput("attention_mask", list(mask.shape), "INT64")]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    return inputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--out", default=tempfile.mkdtemp())
    parser.add_argument("--log-verbose", action="store_true",
                        help="the server at --log-verbose=1: its host phases per batch of several "
                             "requests printed at the end (timing events cost a little)")
    parser.add_argument("--lengths", default="32,64,96,128",
                        help="section 4: the open tokens dimension's plans ('' skips it)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b]  # ('': section 4 alone)
    precisions = args.precisions.split(",")
    os.environ["NEREID_BINARY"] = args.binary
    import conftest
    conftest.BINARY = args.binary
    import onnxruntime
    import tritonclient.grpc as grpcclient
    from conftest import Server

    repo = tempfile.mkdtemp()
    export = os.path.join(repo, "export")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "text_models.py"), export,
                    "--models", "bert_base"], check=True, stdout=subprocess.DEVNULL)
    onnx_path = os.path.join(export, "bert_base.onnx")
    for p in precisions:
        add_model(repo, f"bert_{p}", onnx_path, config(f"bert_{p}", p, max(batches, default=64)))
    if args.lengths and "bf16" in precisions:
        add_model(repo, "bert_lengths_bf16", onnx_path,
                  config("bert_lengths_bf16", "bf16", 64, args.lengths))
        add_model(repo, "bert_ragged_bf16", onnx_path, ragged_config("bert_ragged_bf16", 64))

    print(f"== 1+2. BERT-base, {TOKENS} tokens, per batch, host to host (us): PyTorch CUDA graph "
          "(SDPA) vs Nereid's server-side compute (gRPC, one in flight)")
    torch_us = torch_times(batches, args.iters,
                           sorted({TORCH_OF.get(p, p) for p in precisions},
                                  key=PRECISIONS.index)) if batches else {}
    # (Loading tunes and captures every graph the ragged model's batches can need: allow it time.)
    server = Server(os.path.join(repo, "models"), "--onnx-engine=auto",
                    "--grpc-max-input-size=1073741824", "--pinned-memory-pool-byte-size=1073741824",
                    *(["--log-verbose=1"] if args.log_verbose else []), start_timeout=180)
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        print(f"{'precision':>9} {'batch':>6} | {'PyTorch mean':>12} {'p50':>8} {'seq/s':>8} | "
              f"{'Nereid':>8} {'seq/s':>8} | {'Nereid/PyTorch time':>19}")
        rng = np.random.default_rng(0)
        for p in precisions:
            for b in batches:
                ids = rng.integers(0, VOCAB, (b, TOKENS), dtype=np.int64)
                mask = np.ones((b, TOKENS), np.int64)
                ours = server_compute_feeds(client, f"bert_{p}", feeds(grpcclient, ids, mask),
                                            args.iters if b < 64 else max(args.iters // 5, 10))
                mean, p50 = torch_us[(TORCH_OF.get(p, p), b)]
                print(f"{p:>9} {b:>6} | {mean:12.1f} {p50:8.1f} {b / mean * 1e6:8.0f} | "
                      f"{ours:8.1f} {b / ours * 1e6:8.0f} | {ours / mean:18.2f}x")
        print()
        print("== 3. agreement with ONNX Runtime fp32 (CPU), 4 sequences with padded tails")
        session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        ids = rng.integers(0, VOCAB, (4, TOKENS), dtype=np.int64)
        mask = np.ones((4, TOKENS), np.int64)
        for i, length in enumerate((TOKENS, 100, 37, 5)):
            mask[i, length:] = 0
        want = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})[0]
        print(f"{'precision':>9} | {'max diff / max |output|':>23}")
        for p in precisions:
            got = client.infer(f"bert_{p}", feeds(grpcclient, ids, mask)).as_numpy("last_hidden_state")
            print(f"{p:>9} | {float(np.abs(got - want).max() / np.abs(want).max()):23.2e}")
        print()
        if args.lengths and "bf16" in precisions:
            buckets = sorted(int(n) for n in args.lengths.split(","))
            lengths = rng.integers(16, TOKENS + 1, 512)
            print(f"== 4. 512 sequences of 16-{TOKENS} tokens (mean {lengths.mean():.1f}), bf16, "
                  f"requests of up to 64: padded to {TOKENS} vs padded to the first of {buckets}")

            def requests(pad_to):
                out = []
                for bucket in sorted(set(pad_to)):
                    chosen = [i for i in range(len(lengths)) if pad_to[i] == bucket]
                    for at in range(0, len(chosen), 64):
                        rows = chosen[at:at + 64]
                        ids = rng.integers(0, VOCAB, (len(rows), bucket), dtype=np.int64)
                        mask = (np.arange(bucket)[None, :] < lengths[rows][:, None]).astype(np.int64)
                        out.append(feeds(grpcclient, ids, mask))
                return out
            fixed = requests([TOKENS] * len(lengths))
            bucketed = requests([next(b for b in buckets if b >= n) for n in lengths])
            results = {}
            for name, model, reqs in (("padded", "bert_bf16", fixed),
                                      ("lengths", "bert_lengths_bf16", bucketed)):
                compute, wall, d = total_compute(client, model, reqs)
                results[name] = compute
                print(f"{name:>9}: {len(reqs):3d} requests in {len(reqs):3d} executions, server "
                      f"{compute / 1e3:8.2f} ms "
                      f"({len(lengths) / compute * 1e6:8.0f} seq/s), client wall {wall / 1e3:8.2f} ms")
                print(f"{'':>11}{split(d)}")
            # Ragged: each sequence its own request, unpadded, joined by the batcher.
            singles = []
            for n in lengths:
                ids = rng.integers(0, VOCAB, (1, int(n)), dtype=np.int64)
                singles.append(feeds(grpcclient, ids, np.ones((1, int(n)), np.int64)))
            for in_flight in (64, len(singles)):
                compute, runs, wall, d = batched_compute(client, "bert_ragged_bf16", singles,
                                                         in_flight)
                results[f"ragged {in_flight}"] = compute
                print(f"{'ragged':>9}: {len(singles):3d} requests in {runs:3d} executions "
                      f"({len(singles) / max(runs, 1):.1f} sequences each), server "
                      f"{compute / 1e3:8.2f} ms ({len(lengths) / compute * 1e6:8.0f} seq/s), client "
                      f"wall {wall / 1e3:8.2f} ms ({in_flight} in flight)")
                print(f"{'':>11}{split(d)}")
            print(f"   open-dims plans / padded: {results['padded'] / results['lengths']:.2f}x the "
                  f"sequences/s; ragged / padded: "
                  f"{results['padded'] / results['ragged 64']:.2f}x (64 in flight), "
                  f"{results['padded'] / results[f'ragged {len(singles)}']:.2f}x (all) "
                  f"(tokens: {len(lengths) * TOKENS} padded, "
                  f"{sum(next(b for b in buckets if b >= n) for n in lengths)} bucketed, "
                  f"{int(lengths.sum())} real)")
            print()
        client.close()
        with open(server.log_path) as f:
            lines = f.readlines()
        # Each model's load line, with the seconds since the server's first line (glog's time of
        # day: HH:MM:SS.micros as the line's second field).
        def seconds(line):
            try:
                h, m, sec = line.split()[1].split(":")
                return int(h) * 3600 + int(m) * 60 + float(sec)
            except (IndexError, ValueError):
                return None
        first = next((t for t in map(seconds, lines) if t is not None), None)
        for line in lines:
            if "native GPU engine" in line or "GPU batches of" in line:
                at = seconds(line)
                since = (f" [{at - first:.1f} s after the server started]"
                         if "native GPU engine" in line and at is not None and first is not None
                         else "")
                print("   " + line.split("] ", 1)[-1].rstrip() + since)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
