"""GPU serving end to end: KIND_GPU models of examples/models_gpu on the native engine's GPU path,
driven by the real tritonclient over HTTP and gRPC, checked against float64 numpy references.
Without a GPU (CI) only the refusals run; the rest skips with the reason. scripts/gpu_device_run.sh
runs this file on the device machine."""
import ctypes
import os
import re
import shutil
import threading
import time
import urllib.request

import numpy as np
import pytest

from conftest import ROOT, Server, example_repository
from references import TOLERANCE, matmul_reference, recommend_reference


def gpu_count():
    """GPUs the CUDA driver reports (0 without a driver), as the server will see them."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, "no CUDA driver (libcuda.so.1 not found)"
    if cuda.cuInit(0) != 0:
        return 0, "cuInit failed"
    count = ctypes.c_int(0)
    cuda.cuDeviceGetCount(ctypes.byref(count))
    return count.value, "" if count.value else "no CUDA devices"


GPUS, NO_GPU_REASON = gpu_count()
needs_gpu = pytest.mark.skipif(GPUS == 0, reason=f"GPU tests skipped: {NO_GPU_REASON}")


def relative_diff(got, want):
    """The largest difference relative to the largest reference value (test_gpu_vision.py's and
    test_gpu_text.py's measure against ONNX Runtime)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-3)



def write_repo(root, precisions=("fp32", "tf32", "bf16", "fp16", "int8"), extra=None):
    """examples/models_gpu with its models generated, plus recommend_model_<precision> variants and
    a KIND_CPU copy of recommend_model for comparison."""
    repo = example_repository(os.path.join(root, "models_gpu"), "models_gpu")
    with open(os.path.join(repo, "recommend_model", "config.pbtxt")) as f:
        base = f.read()
    onnx_path = os.path.join(repo, "recommend_model", "1", "model.onnx")
    variants = {f"recommend_{p}": re.sub(r'string_value: "\w+"', f'string_value: "{p}"', base)
                for p in precisions}
    variants["recommend_cpu"] = base.replace("KIND_GPU, count: 2", "KIND_CPU, count: 1").replace(
        'parameters { key: "precision" value { string_value: "tf32" } }', "")
    variants.update(extra or {})
    for name, config in variants.items():
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(onnx_path, os.path.join(repo, name, "1", "model.onnx"))
        shutil.copy(os.path.join(repo, "recommend_model", "item_labels.txt"), os.path.join(repo, name))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(re.sub(r'name: "recommend_model"', f'name: "{name}"', config))
    return repo


def infer(client, protocol, model, inputs, outputs=None):
    if protocol == "http":
        import tritonclient.http as mod
    else:
        import tritonclient.grpc as mod
    tensors = []
    for name, array in inputs.items():
        t = mod.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT32")
        t.set_data_from_numpy(array)
        tensors.append(t)
    result = client.infer(model, tensors)
    return {name: result.as_numpy(name) for name in (outputs or [])}


# ---- without a GPU: the refusals (these run in CI) ----

@pytest.mark.skipif(GPUS > 0, reason="this machine has a GPU")
def test_kind_gpu_without_a_gpu_fails_to_load_with_the_reason(tmp_path):
    repo = write_repo(str(tmp_path), precisions=())
    s = Server(repo, "--exit-on-error=false", "--strict-readiness=false")
    try:
        import tritonclient.http as httpclient
        client = httpclient.InferenceServerClient(s.url)
        assert not client.is_model_ready("recommend_model")
        assert client.is_model_ready("recommend_cpu")  # the CPU copy still serves
        index = {m["name"]: m for m in client.get_model_repository_index()}
        reason = index["recommend_model"]["reason"]
        assert "config.pbtxt:23" in reason and "instance_group[0].kind" in reason, reason
        assert "no GPU is available" in reason, reason
        metrics = urllib.request.urlopen(f"http://localhost:{s.metrics_port}/metrics").read().decode()
        assert "nv_gpu_utilization" not in metrics
    finally:
        assert s.stop() == 0


# ---- on a GPU ----

@pytest.fixture(scope="module")
def gpu_repo(tmp_path_factory):
    return write_repo(str(tmp_path_factory.mktemp("gpu")))


@pytest.fixture(scope="module")
def gpu_server(gpu_repo):
    if GPUS == 0:
        pytest.skip(f"GPU tests skipped: {NO_GPU_REASON}")
    s = Server(gpu_repo, "--log-verbose=0")
    yield s
    assert s.stop() == 0, s.read_log()


@pytest.fixture(params=["http", "grpc"])
def protocol_client(request, gpu_server):
    if request.param == "http":
        import tritonclient.http as mod
        client = mod.InferenceServerClient(gpu_server.url, concurrency=16)
    else:
        import tritonclient.grpc as mod
        client = mod.InferenceServerClient(gpu_server.grpc_url)
    yield request.param, client
    client.close()


@needs_gpu
def test_models_load_on_the_gpu(gpu_server):
    import tritonclient.http as httpclient
    client = httpclient.InferenceServerClient(gpu_server.url)
    config = client.get_model_config("recommend_model")
    assert config["instance_group"][0]["kind"] == "KIND_GPU"
    assert config["instance_group"][0]["gpus"] == list(range(GPUS))
    log = gpu_server.read_log()
    assert "native GPU engine" in log, log


@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16", "int8"])
@pytest.mark.parametrize("batch", [1, 7, 32, 256])
def test_recommend_model_matches_float64(protocol_client, gpu_repo, precision, batch):
    protocol, client = protocol_client
    x = np.random.default_rng().standard_normal((batch, 1024)).astype(np.float32)
    out = infer(client, protocol, f"recommend_{precision}", {"input__0": x}, ["output__0"])["output__0"]
    err = np.abs(out.astype(np.float64) - recommend_reference(gpu_repo, x)).max()
    print(f"recommend_model {precision} batch {batch} {protocol}: max abs diff {err:.2e}")
    assert out.shape == (batch, 1000) and np.isfinite(out).all()
    assert err <= TOLERANCE[precision], f"{precision}: max abs diff {err}"


@needs_gpu
def test_int8_runs_every_gemm_in_int8(gpu_server):
    # recommend_model's three GEMMs all have k a multiple of 16: none falls back to bf16.
    assert re.search(r"model 'recommend_int8' on GPU \d+: native GPU engine, 3 GEMM\(s\), .*"
                     r"int8 \(3 of 3 GEMMs in int8", gpu_server.read_log())


@needs_gpu
@pytest.mark.parametrize("model", ["recommend_tf32", "recommend_bf16"])
@pytest.mark.parametrize("batch", [32, 256])
def test_direct_copies_follow_each_request(protocol_client, gpu_repo, model, batch):
    # Inputs and outputs of 64 KiB and more are copied straight between each request's memory and
    # the device, around the graph captured by the first request of that size: every request must
    # see its own data, never the memory of the one that captured the graph.
    protocol, client = protocol_client
    rng = np.random.default_rng()
    for _ in range(4):
        x = rng.standard_normal((batch, 1024)).astype(np.float32)
        out = infer(client, protocol, model, {"input__0": x}, ["output__0"])["output__0"]
        err = np.abs(out.astype(np.float64) - recommend_reference(gpu_repo, x)).max()
        assert err <= TOLERANCE[model.split("_")[1]], f"{model} batch {batch}: max abs diff {err}"


@needs_gpu
def test_simple_int32_exact(protocol_client):
    protocol, client = protocol_client
    rng = np.random.default_rng()
    a = rng.integers(-2**30, 2**30, (8, 16), dtype=np.int32)
    b = rng.integers(-2**30, 2**30, (8, 16), dtype=np.int32)
    out = infer(client, protocol, "simple", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


@needs_gpu
@pytest.mark.parametrize("rows", [1, 100, 3000, 17])
def test_matmul_rows_vary(protocol_client, gpu_repo, rows):
    protocol, client = protocol_client
    x = np.random.default_rng().standard_normal((rows, 1024)).astype(np.float32)
    out = infer(client, protocol, "matmul_model", {"input__0": x}, ["output__0"])["output__0"]
    ref = matmul_reference(gpu_repo, x)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


@needs_gpu
def test_concurrent_requests_are_batched_and_correct(gpu_server, gpu_repo):
    import tritonclient.http as httpclient
    errors = []

    def worker():
        client = httpclient.InferenceServerClient(gpu_server.url)
        rng = np.random.default_rng()
        for _ in range(20):
            x = rng.standard_normal((int(rng.integers(1, 5)), 1024)).astype(np.float32)
            out = infer(client, "http", "recommend_fp32", {"input__0": x}, ["output__0"])["output__0"]
            if np.abs(out - recommend_reference(gpu_repo, x)).max() > TOLERANCE["fp32"]:
                errors.append("wrong result")
        client.close()

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = httpclient.InferenceServerClient(gpu_server.url).get_inference_statistics("recommend_fp32")
    s = stats["model_stats"][0]
    assert s["inference_count"] >= 16 * 20
    assert s["execution_count"] < s["inference_count"]  # some requests ran together


@needs_gpu
def test_gpu_metrics(gpu_server):
    metrics = urllib.request.urlopen(f"http://localhost:{gpu_server.metrics_port}/metrics").read().decode()
    for family in ["nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                   "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"]:
        assert re.search(family + r'\{gpu_uuid="GPU-[0-9a-f-]+"\} [0-9.e+]+', metrics), family
    total = float(re.search(r'nv_gpu_memory_total_bytes\{[^}]*\} ([0-9.e+]+)', metrics).group(1))
    assert total > 1e9


@needs_gpu
def test_pageable_staging_gives_the_same_results(gpu_repo):
    s = Server(gpu_repo, "--pinned-memory-pool-byte-size=0", "--cuda-memory-pool-byte-size=0:0")
    try:
        import tritonclient.grpc as grpcclient
        client = grpcclient.InferenceServerClient(s.grpc_url)
        x = np.random.default_rng().standard_normal((32, 1024)).astype(np.float32)
        out = infer(client, "grpc", "recommend_fp32", {"input__0": x}, ["output__0"])["output__0"]
        assert np.abs(out - recommend_reference(gpu_repo, x)).max() <= TOLERANCE["fp32"]
    finally:
        assert s.stop() == 0


@needs_gpu
def test_missing_gpu_id_fails_with_file_and_line(tmp_path):
    config = open(os.path.join(ROOT, "examples", "models_gpu", "matmul_model", "config.pbtxt")).read()
    repo = write_repo(str(tmp_path), precisions=(), extra={
        "recommend_far": 'name: "recommend_model"\nbackend: "native"\nmax_batch_size: 8\n'
                         f"instance_group [ {{ kind: KIND_GPU gpus: [ {GPUS + 5} ] }} ]\n"})
    s = Server(repo, "--exit-on-error=false", "--strict-readiness=false")
    try:
        import tritonclient.http as httpclient
        index = {m["name"]: m for m in httpclient.InferenceServerClient(s.url).get_model_repository_index()}
        reason = index["recommend_far"]["reason"]
        assert f"GPU {GPUS + 5} does not exist" in reason and "config.pbtxt:4" in reason, reason
    finally:
        assert s.stop() == 0
    assert config  # the example config itself is untouched


@needs_gpu
@pytest.mark.parametrize("model", ["recommend_fp32", "recommend_cpu"])
def test_cuda_shared_memory_inputs_and_outputs(protocol_client, gpu_repo, model):
    """Triton's CUDA shared-memory flow with tritonclient.utils.cuda_shared_memory: the input read
    from and the output written into the client's device allocations, for a KIND_GPU model (device
    to device) and a KIND_CPU one (the server copies through the host)."""
    import tritonclient.utils.cuda_shared_memory as cudashm
    protocol, client = protocol_client
    mod = __import__(f"tritonclient.{protocol}", fromlist=["InferInput"])
    tag = f"{model}_{protocol}"
    batch = 5
    x = np.random.default_rng().standard_normal((batch, 1024)).astype(np.float32)
    out_bytes = batch * 1000 * 4
    in_handle = cudashm.create_shared_memory_region(f"in_{tag}", x.nbytes, 0)
    out_handle = cudashm.create_shared_memory_region(f"out_{tag}", out_bytes, 0)
    try:
        cudashm.set_shared_memory_region(in_handle, [x])
        client.register_cuda_shared_memory(f"in_{tag}", cudashm.get_raw_handle(in_handle), 0, x.nbytes)
        client.register_cuda_shared_memory(f"out_{tag}", cudashm.get_raw_handle(out_handle), 0, out_bytes)
        status = client.get_cuda_shared_memory_status()
        names = [r["name"] for r in status] if protocol == "http" else list(status.regions)
        assert f"in_{tag}" in names and f"out_{tag}" in names
        inp = mod.InferInput("input__0", [batch, 1024], "FP32")
        inp.set_shared_memory(f"in_{tag}", x.nbytes)
        out = mod.InferRequestedOutput("output__0")
        out.set_shared_memory(f"out_{tag}", out_bytes)
        result = client.infer(model, [inp], outputs=[out])
        assert result.get_output("output__0") is not None
        y = cudashm.get_contents_as_numpy(out_handle, np.float32, [batch, 1000])
        err = np.abs(y.astype(np.float64) - recommend_reference(gpu_repo, x)).max()
        assert err <= TOLERANCE["fp32"] * 10, err
        # A region smaller than the output is refused with Triton's message.
        small = mod.InferRequestedOutput("output__0")
        small.set_shared_memory(f"out_{tag}", 16)
        with pytest.raises(Exception, match="should be at least"):
            client.infer(model, [inp], outputs=[small])
    finally:
        client.unregister_cuda_shared_memory(f"in_{tag}")
        client.unregister_cuda_shared_memory(f"out_{tag}")
        cudashm.destroy_shared_memory_region(in_handle)
        cudashm.destroy_shared_memory_region(out_handle)


@needs_gpu
def test_cuda_shared_memory_handle_larger_than_its_allocation_is_refused(gpu_server):
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm
    from tritonclient.utils import InferenceServerException
    client = httpclient.InferenceServerClient(gpu_server.url)
    handle = cudashm.create_shared_memory_region("small", 4096, 0)
    try:
        with pytest.raises(InferenceServerException, match="larger than the allocation"):
            client.register_cuda_shared_memory("small", cudashm.get_raw_handle(handle), 0, 1 << 30)
    finally:
        cudashm.destroy_shared_memory_region(handle)


def test_precision_variants_on_the_gpu(tmp_path):
    """tf32, bf16 and int8 variants of recommend_model on KIND_GPU: the guard measures each on the
    GPU against fp32 (int8 refused by a strict relative-error guard), the server's table holds
    each admitted variant's time and NVML power per batch size, and under the goal policy with a
    power budget no variant can meet (1 W) the measured power moves it off tf32 to the cheapest
    admitted variant, where it stays; answers within that precision's tolerance."""
    if GPUS == 0:
        pytest.skip(f"GPU tests skipped: {NO_GPU_REASON}")
    import tritonclient.http as httpclient
    repo = write_repo(str(tmp_path), precisions=())
    name = "recommend_variants"
    with open(os.path.join(repo, "recommend_model", "config.pbtxt")) as f:
        config = re.sub(r'parameters \{ key: "precision".*\n', "", f.read())
    config = config.replace('name: "recommend_model"', f'name: "{name}"')
    for key, value in {"nereid.precision_variants": "tf32,bf16,int8",
                       "nereid.accuracy_guard": "max_rel=0.008",
                       "nereid.power_budget_w": "1", "nereid.variant_dwell_ms": "0",
                       "nereid.variant_profile_ms": "150"}.items():
        config += f'\nparameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
    os.makedirs(os.path.join(repo, name, "1"))
    os.makedirs(os.path.join(repo, name, "calibration"))
    shutil.copy(os.path.join(repo, "recommend_model", "1", "model.onnx"),
                os.path.join(repo, name, "1", "model.onnx"))
    shutil.copy(os.path.join(repo, "recommend_model", "item_labels.txt"), os.path.join(repo, name))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config + "\n")
    x = np.random.default_rng(2).standard_normal((64, 1024)).astype(np.float32)
    np.save(os.path.join(repo, name, "calibration", "input__0.npy"), x)
    s = Server(repo, "--log-verbose=0")
    try:
        log = s.read_log()
        assert re.search(r"model 'recommend_variants' variant int8 refused by the accuracy guard: "
                         r"max rel error", log), log
        assert re.search(r"model 'recommend_variants' variant bf16 admitted: .*\(GPU 0\)", log), log
        c = httpclient.InferenceServerClient(s.url)
        deadline = time.time() + 10
        while time.time() < deadline:
            v = c.get_inference_statistics(name)["model_stats"][0]["variants"]
            if v["active"] == "bf16":
                break
            time.sleep(0.1)
        assert v["active"] == "bf16", v
        admitted = [x for x in v["variants"] if x["admitted"]]
        assert [x["name"] for x in admitted] == ["tf32", "bf16"]
        for a in admitted:
            assert all(cell["watts"] > 0 and cell["exec_us"] > 0 for cell in a["table"]), a
        i = httpclient.InferInput("input__0", [8, 1024], "FP32")
        i.set_data_from_numpy(x[:8])
        got = c.infer(name, [i]).as_numpy("output__0")
        assert np.abs(got - recommend_reference(repo, x[:8])).max() <= TOLERANCE["bf16"]
    finally:
        assert s.stop() == 0, s.read_log()
