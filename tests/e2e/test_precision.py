"""The int8 precision on the CPU: recommend_model (examples/generate_models.py) with
`parameters { key: "precision" value { string_value: "int8" } }` on KIND_CPU quantizes its GEMM
weights per output channel at load and its activations per row as they come; its scores are
checked against float64 (max abs error, top-1 agreement with the fp32 model) over HTTP and gRPC.
Beside it, ONNX Runtime's own quantized models of the same graph through the onnxruntime backend:
dynamic quantization (MatMulInteger) and static QDQ (QuantizeLinear/DequantizeLinear around each
MatMul, calibrated on random inputs). The GPU's int8 is in test_gpu.py."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT, Server
import precision_models
from test_gpu import recommend_reference

INT8_TOLERANCE = 3e-2  # ||scores - float64||_inf (sigmoid scores in [0, 1])


@pytest.fixture(scope="module")
def precision_server(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("precision") / "models")
    shutil.copytree(os.path.join(ROOT, "examples", "models"), repo,
                    ignore=shutil.ignore_patterns("*.onnx", "item_labels.txt"))
    subprocess.check_call([sys.executable, os.path.join(ROOT, "examples", "generate_models.py"),
                           "--out", repo], stdout=subprocess.DEVNULL)
    precision_models.write_precision_models(repo)
    precision_models.add_native_variant(repo, "recommend_bad", "int4")
    s = Server(repo, "--exit-on-error=false", expect_ready=False)
    s.repo = repo
    yield s
    s.stop()


def scores(url, grpc, model, x):
    mod = grpcclient if grpc else httpclient
    c = mod.InferenceServerClient(url)
    i = mod.InferInput("input__0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return c.infer(model, [i]).as_numpy("output__0")


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_int8_on_the_cpu_matches_float64(precision_server, grpc):
    s = precision_server
    url = s.grpc_url if grpc else s.url
    x = np.random.default_rng(5).standard_normal((256, 1024)).astype(np.float32)
    ref = recommend_reference(s.repo, x)
    # In batches up to max_batch_size (32), as a client sends them.
    int8 = np.concatenate([scores(url, grpc, "recommend_int8", x[i:i + 32]) for i in range(0, 256, 32)])
    fp32 = np.concatenate([scores(url, grpc, "recommend_model", x[i:i + 32]) for i in range(0, 256, 32)])
    err8 = float(np.abs(int8 - ref).max())
    err32 = float(np.abs(fp32 - ref).max())
    agree = float((int8.argmax(1) == fp32.argmax(1)).mean())
    print(f"int8 max abs diff {err8:.2e} (fp32 {err32:.2e}), top-1 agreement with fp32 {agree:.3f}")
    assert err32 <= 1e-5
    assert 0 < err8 <= INT8_TOLERANCE
    assert agree >= 0.9


def test_the_load_log_says_int8_and_a_bad_precision_is_refused(precision_server):
    log = precision_server.read_log()
    assert re.search(r"model 'recommend_int8'.*int8 weights, int8 micro-kernel", log), log
    index = {m["name"]: m for m in httpclient.InferenceServerClient(precision_server.url)
             .get_model_repository_index()}
    assert index["recommend_int8"]["state"] == "READY"
    assert index["recommend_bad"]["state"] == "UNAVAILABLE"
    assert "parameter 'precision' must be fp32, tf32, bf16, fp16 or int8, got 'int4'" in \
        index["recommend_bad"]["reason"]


@pytest.mark.parametrize("model", ["recommend_ort_dynamic", "recommend_ort_qdq"])
def test_onnx_runtime_quantized_models_serve(precision_server, model):
    """ONNX Runtime's int8 graphs run as they are: the same scores as Python's onnxruntime on the
    same file, and close to float64 (quantization's own error, larger for static activations
    calibrated on a few random batches)."""
    import onnxruntime
    s = precision_server
    x = np.random.default_rng(6).standard_normal((32, 1024)).astype(np.float32)
    got = scores(s.url, False, model, x)
    session = onnxruntime.InferenceSession(os.path.join(s.repo, model, "1", "model.onnx"))
    want = session.run(["output__0"], {"input__0": x})[0]
    assert np.abs(got - want).max() <= 1e-6
    err = float(np.abs(got - recommend_reference(s.repo, x)).max())
    fp32 = scores(s.url, False, "recommend_ort", x)
    agree = float((got.argmax(1) == fp32.argmax(1)).mean())
    print(f"{model}: max abs diff vs float64 {err:.2e}, top-1 agreement with fp32 {agree:.3f}")
    assert err <= 0.1
