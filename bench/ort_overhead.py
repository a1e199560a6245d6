#!/usr/bin/env python3
"""Overhead of Nereid's ONNX Runtime backend against ONNX Runtime called directly in one process.

For each model and batch size, one run on this machine does both, side by side:
  direct:  build/bench_ort times Session::Run on the same model file with the same thread counts
           (inputs preallocated, outputs released), the best a program embedding ORT gets;
  nereid:  the server (ORT backend, intra/inter_op_thread_count set to the same counts) is sent
           sequential requests (concurrency 1, binary HTTP); the statistics extension gives, per
           inference, compute_infer (the backend's ORT Run) and compute_input + compute_infer +
           compute_output (everything the server does with the request besides the protocol).
Ratios > 1 mean Nereid's server-side time exceeds the direct call.

  .venv/bin/python bench/ort_overhead.py [--requests N] [--threads 1,2]
Models: examples' recommend_model (MLP 1024-2048-1024-1000, run on ORT here) and, when the model
packages are installed, all-MiniLM-L6-v2 (16 tokens) from tests/e2e/real_models.py.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import tritonclient.http as httpclient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
BUILD = os.path.join(ROOT, "build")
LIBRARY = os.path.join(BUILD, "backends", "onnxruntime", "libonnxruntime.so")


def write_repo(repo, threads):
    import generate_models  # noqa: F401  (examples/generate_models.py writes the example weights)
    import real_models
    models = {}
    src = os.path.join(ROOT, "examples", "models", "recommend_model")
    onnx_file = os.path.join(src, "1", "model.onnx")
    if not os.path.exists(onnx_file):
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "generate_models.py")], check=True)
    params = (f'parameters {{ key: "intra_op_thread_count" value {{ string_value: "{threads}" }} }}\n'
              f'parameters {{ key: "inter_op_thread_count" value {{ string_value: "{threads}" }} }}\n')
    os.makedirs(os.path.join(repo, "recommend_ort", "1"))
    shutil.copy(onnx_file, os.path.join(repo, "recommend_ort", "1", "model.onnx"))
    with open(os.path.join(repo, "recommend_ort", "config.pbtxt"), "w") as f:
        f.write('backend: "onnxruntime"\nmax_batch_size: 32\n' + params)
    models["recommend_ort"] = os.path.join(repo, "recommend_ort", "1", "model.onnx")
    if real_models.minilm_dir():
        os.makedirs(os.path.join(repo, "minilm", "1"))
        real_models.minilm_onnx(os.path.join(repo, "minilm", "1", "model.onnx"))
        with open(os.path.join(repo, "minilm", "config.pbtxt"), "w") as f:
            f.write('platform: "onnxruntime_onnx"\nmax_batch_size: 32\n' + params)
        models["minilm"] = os.path.join(repo, "minilm", "1", "model.onnx")
    return models


def inputs_for(model, batch, tokens=16):
    if model == "recommend_ort":
        x = np.random.default_rng(0).random((batch, 1024), dtype=np.float32)
        i = httpclient.InferInput("input__0", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        return [i]
    out = []
    for name in ("input_ids", "attention_mask"):
        x = np.ones((batch, tokens), np.int64) * (7 if name == "input_ids" else 1)
        i = httpclient.InferInput(name, list(x.shape), "INT64")
        i.set_data_from_numpy(x)
        out.append(i)
    return out


def server_times(client, model):
    s = client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]
    return {k: (int(s[k]["count"]), int(s[k]["ns"])) for k in
            ("compute_input", "compute_infer", "compute_output")}


def measure_server(url, model, batch, requests):
    c = httpclient.InferenceServerClient(url)
    inputs = inputs_for(model, batch)
    for _ in range(max(requests // 10, 20)):
        c.infer(model, inputs)
    before = server_times(c, model)
    for _ in range(requests):
        c.infer(model, inputs)
    after = server_times(c, model)
    per = {k: (after[k][1] - before[k][1]) / max(after[k][0] - before[k][0], 1) / 1000 for k in after}
    return per["compute_infer"], per["compute_input"] + per["compute_infer"] + per["compute_output"]


def measure_direct(model_file, batch, threads, requests):
    out = subprocess.run([os.path.join(BUILD, "bench_ort"), f"--library={LIBRARY}", f"--model={model_file}",
                          f"--batch={batch}", "--dim=16", f"--threads={threads}",
                          f"--iterations={requests}"], capture_output=True, text=True, check=True)
    return float(re.search(r"run_us ([\d.]+)", out.stdout).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        tmp = tempfile.mkdtemp()
        repo = os.path.join(tmp, "models")
        models = write_repo(repo, threads)
        port = 18700 + threads
        log = open(os.path.join(tmp, "server.log"), "w")
        proc = subprocess.Popen([os.path.join(BUILD, "nereid"), "serve", f"--model-repository={repo}",
                                 f"--http-port={port}", f"--grpc-port={port + 100}",
                                 f"--metrics-port={port + 200}", "--http-address=127.0.0.1"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
            for model, model_file in models.items():
                for batch in (1, 32):
                    n = args.requests if batch == 1 or model == "recommend_ort" else args.requests // 8
                    # Alternate to share the machine's noise: direct, server, direct, server.
                    direct, infer, total = [], [], []
                    for _ in range(2):
                        direct.append(measure_direct(model_file, batch, threads, n))
                        i, t = measure_server(f"127.0.0.1:{port}", model, batch, n)
                        infer.append(i)
                        total.append(t)
                    d, i, t = min(direct), min(infer), min(total)
                    rows.append((model, batch, threads, d, i, t))
                    print(f"{model} batch {batch} threads {threads}: direct {d:.1f} us, nereid "
                          f"compute_infer {i:.1f} us ({i / d:.2f}x), input+infer+output {t:.1f} us "
                          f"({t / d:.2f}x)", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n| model | batch | threads | ORT direct Run (us) | Nereid compute_infer (us) | ratio | "
          "Nereid input+infer+output (us) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for model, batch, threads, d, i, t in rows:
        print(f"| {model} | {batch} | {threads} | {d:.1f} | {i:.1f} | {i / d:.2f}x | {t:.1f} | {t / d:.2f}x |")


if __name__ == "__main__":
    main()
