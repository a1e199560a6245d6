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

Usage: python3 bench/gpu_text.py NEREID_BINARY [--batches 1,64] [--iters 100] [--out DIR]
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
from gpu_vision import server_compute_feeds  # noqa: E402

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


def config(name, precision, max_batch):
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {TOKENS} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {TOKENS} ] }}
]
output [ {{ name: "last_hidden_state" data_type: TYPE_FP32 dims: [ {TOKENS}, {HIDDEN} ] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 }} ]
parameters {{ key: "precision" value {{ string_value: "{precision}" }} }}
"""


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
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
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
        os.makedirs(os.path.join(repo, "models", f"bert_{p}", "1"))
        os.link(onnx_path, os.path.join(repo, "models", f"bert_{p}", "1", "model.onnx"))
        with open(os.path.join(repo, "models", f"bert_{p}", "config.pbtxt"), "w") as f:
            f.write(config(f"bert_{p}", p, max(batches)))

    print(f"== 1+2. BERT-base, {TOKENS} tokens, per batch, host to host (us): PyTorch CUDA graph "
          "(SDPA) vs Nereid's server-side compute (gRPC, one in flight)")
    torch_us = torch_times(batches, args.iters,
                           sorted({TORCH_OF.get(p, p) for p in precisions}, key=PRECISIONS.index))
    server = Server(os.path.join(repo, "models"), "--onnx-engine=auto",
                    "--grpc-max-input-size=1073741824", "--pinned-memory-pool-byte-size=1073741824")
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
        client.close()
        with open(server.log_path) as f:
            for line in f:
                if "native GPU engine" in line:
                    print("   " + line.split("] ", 1)[-1].rstrip())
    finally:
        server.stop()


if __name__ == "__main__":
    main()
