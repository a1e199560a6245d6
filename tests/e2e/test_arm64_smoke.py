"""The arm64 build end to end under qemu-user (scripts/cross_arm64.sh runs it with
NEREID_BINARY=build-arm64/nereid NEREID_EMULATOR=qemu-aarch64; skipped otherwise): the aarch64
server serves the native engine's models to the real tritonclient over HTTP and gRPC, on the NEON
micro-kernels (SGEMM and int8 SDOT) it picked at start, answers every request of a concurrent burst
through the dynamic batcher, and exits cleanly on SIGTERM; on an emulated Cortex-A72 (Armv8.0, no
SDOT: a Raspberry Pi 4's core) it picks the SMULL int8 kernel instead. ONNX Runtime's aarch64 library is not
loaded here: under qemu-user it reads the x86 host's /proc/cpuinfo and /sys topology and crashes
in its own CPU detection (docs/deploy.md, "ARM64")."""
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import Server, example_repository
import models
import precision_models
from references import matmul_reference, recommend_reference
from test_precision import INT8_TOLERANCE

EMULATOR = os.environ.get("NEREID_EMULATOR")
pytestmark = pytest.mark.skipif(not EMULATOR, reason="the arm64 build runs under qemu-user: "
                                "scripts/cross_arm64.sh sets NEREID_EMULATOR")


@pytest.fixture(scope="module")
def arm_server(tmp_path_factory):
    repo = example_repository(tmp_path_factory.mktemp("arm64") / "models")
    shutil.rmtree(os.path.join(repo, "simple"))  # ONNX Runtime: see above
    precision_models.add_native_variant(repo, "recommend_int8", "int8")
    models.write_identity_models(repo)
    s = Server(repo, prefix=(EMULATOR,))
    s.repo = repo
    yield s
    assert s.stop() == 0, s.read_log()


def test_the_server_is_an_aarch64_binary_on_its_neon_kernels(arm_server):
    with open(os.environ["NEREID_BINARY"], "rb") as f:
        header = f.read(20)
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
    log = arm_server.read_log()
    assert re.search(r"model 'recommend_model'.*SGEMM micro-kernel neon-6x16", log), log
    assert re.search(r"model 'recommend_int8'.*int8 micro-kernel neon-dotprod", log), log
    index = {m["name"]: m["state"] for m in
             httpclient.InferenceServerClient(arm_server.url).get_model_repository_index()}
    assert all(state == "READY" for state in index.values()), index


# Rows 1-4 take the small-M path on packed weights, 5 and up the blocked GEMM with partial panels.
@pytest.mark.parametrize("rows", [1, 3, 5, 17])
@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_recommend_and_matmul_match_float64(arm_server, grpc, rows):
    mod = grpcclient if grpc else httpclient
    client = mod.InferenceServerClient(arm_server.grpc_url if grpc else arm_server.url)
    x = np.random.default_rng(rows).standard_normal((rows, 1024)).astype(np.float32)
    i = mod.InferInput("input__0", [rows, 1024], "FP32")
    i.set_data_from_numpy(x)
    scores = client.infer("recommend_model", [i]).as_numpy("output__0")
    np.testing.assert_allclose(scores, recommend_reference(arm_server.repo, x), rtol=1e-4, atol=1e-5)
    product = client.infer("matmul_model", [i]).as_numpy("output__0")
    np.testing.assert_allclose(product, matmul_reference(arm_server.repo, x), rtol=1e-4, atol=1e-3)


def test_int8_on_neon_matches_float64(arm_server):
    client = httpclient.InferenceServerClient(arm_server.url)
    x = np.random.default_rng(9).standard_normal((32, 1024)).astype(np.float32)
    i = httpclient.InferInput("input__0", [32, 1024], "FP32")
    i.set_data_from_numpy(x)
    int8 = client.infer("recommend_int8", [i]).as_numpy("output__0")
    err = float(np.abs(int8 - recommend_reference(arm_server.repo, x)).max())
    assert 0 < err <= INT8_TOLERANCE


def test_a_core_without_sdot_gets_the_armv8_0_int8_kernel(arm_server):
    """The same binary on qemu's Cortex-A72 model: the hwcap has no asimddp, so int8 runs on the
    SMULL/SADALP kernel, with the same accuracy."""
    s = Server(arm_server.repo, "--model-control-mode=explicit", "--load-model=recommend_int8",
               prefix=(EMULATOR,), env={"QEMU_CPU": "cortex-a72"})
    try:
        assert re.search(r"model 'recommend_int8'.*int8 micro-kernel neon;", s.read_log(),
                         re.MULTILINE), s.read_log()
        x = np.random.default_rng(11).standard_normal((5, 1024)).astype(np.float32)
        i = httpclient.InferInput("input__0", [5, 1024], "FP32")
        i.set_data_from_numpy(x)
        int8 = httpclient.InferenceServerClient(s.url).infer("recommend_int8", [i]).as_numpy("output__0")
        err = float(np.abs(int8 - recommend_reference(arm_server.repo, x)).max())
        assert 0 < err <= INT8_TOLERANCE
    finally:
        assert s.stop() == 0


def test_a_concurrent_burst_is_answered_in_full(arm_server):
    """64 requests from 8 threads through the dynamic batcher: every one answered, each with its
    own data back (the identity model), FP32 and BYTES."""
    def one(n):
        client = httpclient.InferenceServerClient(arm_server.url)
        if n % 2:
            data = np.full((1, 1 + n % 7), float(n), dtype=np.float32)
            model, datatype = models.identity_name("FP32"), "FP32"
        else:
            data = np.array([[f"request {n}".encode()]], dtype=np.object_)
            model, datatype = models.identity_name("BYTES"), "BYTES"
        i = httpclient.InferInput("INPUT0", list(data.shape), datatype)
        i.set_data_from_numpy(data)
        out = client.infer(model, [i]).as_numpy("OUTPUT0")
        return np.array_equal(out, data)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(64)))
    assert answers == [True] * 64
