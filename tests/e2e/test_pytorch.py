"""The PyTorch backend (backends/pytorch): TorchScript models exported with torch (Debian's
python3-torch, /usr/bin/python3) served through libtorch with Triton's configs and naming
conventions, outputs equal to torch's own on the same inputs, over HTTP and gRPC; strings as
List[str]; Triton's libtorch parameters."""
import json
import os
import subprocess
import textwrap

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import BINARY, Server

LIBRARY = os.path.join(os.path.dirname(BINARY), "backends", "libnereid_backend_pytorch.so")
TORCH_PYTHON = os.environ.get("NEREID_TORCH_PYTHON", "/usr/bin/python3")


def torch_available():
    if not os.path.exists(LIBRARY) or not os.path.exists(TORCH_PYTHON):
        return False
    return subprocess.run([TORCH_PYTHON, "-c", "import torch, numpy"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not torch_available(),
    reason="no PyTorch backend in this build (sanitizer build or no libtorch-dev) or no torch in "
           f"{TORCH_PYTHON} (Debian's python3-torch)")

# Exports the models with torch and writes torch's own outputs for fixed inputs next to them.
EXPORT = r'''
import sys, numpy as np, torch
out = sys.argv[1]
torch.manual_seed(0)

class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)

class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b

from typing import List, Tuple

class Words(torch.nn.Module):
    """TYPE_STRING through List[str]: the words upper-cased, and their lengths."""
    def forward(self, words: List[str]) -> Tuple[List[str], torch.Tensor]:
        return [w.upper() for w in words], torch.tensor([len(w) for w in words], dtype=torch.int64)

class InPlace(torch.nn.Module):
    """Doubles its input in place (x.mul_), as some real models do."""
    def forward(self, x):
        return x.mul_(2)

class Raises(torch.nn.Module):
    def forward(self, x):
        if bool(x.sum() < 0):
            raise ValueError("negative sums are not served by this model")
        return x

class RaggedSums(torch.nn.Module):
    # Triton's ragged batching: x holds every request's elements end to end, ends where each
    # request's end (BATCH_ACCUMULATED_ELEMENT_COUNT); one sum per request.
    def forward(self, x, ends):
        sums = []
        start = 0
        for i in range(ends.shape[0]):
            end = int(ends[i])
            sums.append(x[start:end].sum().reshape(1))
            start = end
        return torch.stack(sums)

torch.jit.script(RaggedSums()).save(f"{out}/ragged.pt")
torch.jit.script(InPlace()).save(f"{out}/inplace.pt")
torch.jit.script(Raises()).save(f"{out}/raises.pt")
words = torch.jit.script(Words())
words.save(f"{out}/words.pt")
import json
upper, lengths = words(["nereid", "", "héllo wörld"])  # TorchScript's own answer (ASCII upper())
json.dump({"upper": upper, "lengths": lengths.tolist()}, open(f"{out}/words.json", "w"))
mlp = torch.jit.script(Mlp().eval())
mlp.save(f"{out}/mlp.pt")
torch.jit.script(AddSub()).save(f"{out}/addsub.pt")
x = torch.from_numpy(np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32))
with torch.no_grad():
    np.save(f"{out}/mlp_in.npy", x.numpy())
    np.save(f"{out}/mlp_out.npy", mlp(x).numpy())
open(f"{out}/cuda", "w").write("1" if torch.cuda.is_available() else "0")
'''


@pytest.fixture(scope="module")
def torch_repo(tmp_path_factory):
    base = tmp_path_factory.mktemp("torch")
    (base / "export.py").write_text(EXPORT)  # torch.jit.script reads the models' source
    out = subprocess.run([TORCH_PYTHON, str(base / "export.py"), str(base)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    repo = base / "models"
    for name, file, config in (
        ("mlp", "mlp.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 8
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 8 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            dynamic_batching { max_queue_delay_microseconds: 20000 }
            '''),
        ("addsub", "addsub.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 0
            input [ { name: "a" data_type: TYPE_INT32 dims: [ 16 ] },
                    { name: "b" data_type: TYPE_INT32 dims: [ 16 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
                     { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 16 ] } ]
            '''),
        ("words", "words.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 0
            input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] },
                     { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ -1 ] } ]
            '''),
        ("words_batched", "words.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 4
            input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ 1 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ 1 ] },
                     { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
            '''),
        ("words_2d", "words.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 0
            input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ 2, 2 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] },
                     { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ -1 ] } ]
            '''),
        ("mlp_tuned", "mlp.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 8
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 8 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            instance_group [ { kind: KIND_CPU count: 2 } ]
            parameters [ { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "true" } },
                         { key: "ENABLE_JIT_PROFILING" value { string_value: "false" } },
                         { key: "INFERENCE_MODE" value { string_value: "False" } },
                         { key: "INTRA_OP_THREAD_COUNT" value { string_value: "2" } },
                         { key: "ENABLE_WEIGHT_SHARING" value { string_value: "true" } } ]
            '''),
        ("ragged_sums", "ragged.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 4
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
            batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INPUT__1"
                            data_type: TYPE_FP32 source_input: "INPUT__0" } ]
            dynamic_batching { max_queue_delay_microseconds: 1000000 }
            '''),
        ("inplace", "inplace.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 0
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            '''),
        ("raises", "raises.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 0
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            '''),
        ("bad_parameter", "mlp.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 8
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 8 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            parameters [ { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "maybe" } } ]
            '''),
        ("wrong_names", "addsub.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 0
            input [ { name: "x" data_type: TYPE_INT32 dims: [ 16 ] },
                    { name: "y" data_type: TYPE_INT32 dims: [ 16 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] } ]
            '''),
        ("wrong_type", "addsub.pt", '''
            platform: "pytorch_libtorch"
            max_batch_size: 0
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
                    { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] } ]
            ''')):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.pt").write_bytes((base / file).read_bytes())
        (repo / name / "config.pbtxt").write_text(textwrap.dedent(config).lstrip())
    if (base / "cuda").read_text() == "1":  # the device machine: the same MLP on KIND_GPU
        (repo / "mlp_gpu" / "1").mkdir(parents=True)
        (repo / "mlp_gpu" / "1" / "model.pt").write_bytes((base / "mlp.pt").read_bytes())
        (repo / "mlp_gpu" / "config.pbtxt").write_text(
            (repo / "mlp" / "config.pbtxt").read_text() + "instance_group [ { kind: KIND_GPU } ]\n")
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.pt").write_bytes(b"not a TorchScript archive")
    (repo / "broken" / "config.pbtxt").write_text((repo / "addsub" / "config.pbtxt").read_text())
    return base


@pytest.fixture(scope="module")
def torch_server(torch_repo):
    s = Server(str(torch_repo / "models"), "--exit-on-error=false", "--strict-readiness=false")
    yield s
    assert s.stop() == 0, s.read_log()


@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_torchscript_mlp_equals_torch(torch_server, torch_repo, mod):
    x = np.load(torch_repo / "mlp_in.npy")
    want = np.load(torch_repo / "mlp_out.npy")
    c = mod.InferenceServerClient(torch_server.url if mod is httpclient else torch_server.grpc_url)
    i = mod.InferInput("INPUT__0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    got = c.infer("mlp", [i]).as_numpy("OUTPUT__0")
    diff = float(np.abs(got - want).max())
    print(f"mlp max abs diff vs torch: {diff:.1e}")
    assert got.shape == (5, 4) and diff <= 1e-6


def test_batched_requests_equal_torch_row_by_row(torch_server, torch_repo):
    x = np.load(torch_repo / "mlp_in.npy")
    want = np.load(torch_repo / "mlp_out.npy")
    c = httpclient.InferenceServerClient(torch_server.url, concurrency=5)
    pending = []
    for row in range(5):
        i = httpclient.InferInput("INPUT__0", [1, 8], "FP32")
        i.set_data_from_numpy(x[row:row + 1])
        pending.append((row, c.async_infer("mlp", [i])))
    for row, p in pending:
        assert np.abs(p.get_result().as_numpy("OUTPUT__0")[0] - want[row]).max() <= 1e-6
    stats = c.get_inference_statistics("mlp")["model_stats"][0]
    assert stats["execution_count"] < stats["inference_count"]


def test_named_inputs_bind_to_forward_arguments(torch_server):
    c = grpcclient.InferenceServerClient(torch_server.grpc_url)
    a = np.arange(16, dtype=np.int32)
    b = np.full(16, 3, np.int32)
    inputs = [grpcclient.InferInput("a", [16], "INT32"), grpcclient.InferInput("b", [16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    r = c.infer("addsub", inputs)
    assert (r.as_numpy("OUTPUT__0") == a + b).all() and (r.as_numpy("OUTPUT__1") == a - b).all()
    assert "model 'addsub' runs on libtorch" in torch_server.read_log()


def test_ragged_requests_are_joined_and_each_answered(torch_server):
    # Four requests of 2, 4, 1 and 3 elements over one gRPC stream: one batch (the statistics say
    # so), the TorchScript model given their elements end to end and where each ends.
    import queue
    client = grpcclient.InferenceServerClient(torch_server.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    lengths = [2, 4, 1, 3]
    for n in lengths:
        x = grpcclient.InferInput("INPUT__0", [1, n], "FP32")
        x.set_data_from_numpy(np.full((1, n), n, np.float32))
        client.async_stream_infer("ragged_sums", [x])
    results = [answers.get(timeout=30) for _ in lengths]
    client.stop_stream()
    for n, r in zip(lengths, results):
        assert not isinstance(r, Exception), r.message()
        np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), [[n * n]])
    stats = client.get_inference_statistics("ragged_sums", as_json=True)["model_stats"][0]
    assert any(int(b["batch_size"]) == 4 for b in stats["batch_stats"]), stats["batch_stats"]


def test_bad_models_fail_to_load_with_the_reason(torch_server):
    index = {m["name"]: m for m in httpclient.InferenceServerClient(torch_server.url).get_model_repository_index()}
    assert "neither named <name>__<index> nor an argument of forward() (its arguments: a, b)" in index["wrong_names"]["reason"]
    assert "libtorch cannot load" in index["broken"]["reason"]


@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_strings_travel_as_lists_of_str(torch_server, torch_repo, mod):
    c = mod.InferenceServerClient(torch_server.url if mod is httpclient else torch_server.grpc_url)
    words = np.array(["nereid", "", "héllo wörld"], dtype=np.object_)
    i = mod.InferInput("INPUT__0", [3], "BYTES")
    i.set_data_from_numpy(words)
    r = c.infer("words", [i])
    want = json.loads((torch_repo / "words.json").read_text())  # the scripted module's own output
    assert [w.decode() for w in r.as_numpy("OUTPUT__0")] == want["upper"]
    assert r.as_numpy("OUTPUT__1").tolist() == want["lengths"]
    # With batching, dims [1]: one string per row, shape [rows, 1] back.
    i = mod.InferInput("INPUT__0", [2, 1], "BYTES")
    i.set_data_from_numpy(np.array([["ab"], ["cde"]], dtype=np.object_))
    r = c.infer("words_batched", [i])
    assert r.as_numpy("OUTPUT__0").shape == (2, 1)
    assert [w.decode() for w in r.as_numpy("OUTPUT__0").ravel()] == ["AB", "CDE"]
    assert r.as_numpy("OUTPUT__1").ravel().tolist() == [2, 3]


def test_libtorch_parameters(torch_server, torch_repo):
    x = np.load(torch_repo / "mlp_in.npy")
    want = np.load(torch_repo / "mlp_out.npy")
    c = httpclient.InferenceServerClient(torch_server.url)
    i = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    assert np.abs(c.infer("mlp_tuned", [i]).as_numpy("OUTPUT__0") - want).max() <= 1e-6
    log = torch_server.read_log()
    assert "libtorch intra-op threads: 2" in log
    assert "(weights shared with another instance)" in log
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert "parameter 'DISABLE_OPTIMIZED_EXECUTION' must be true or false, got 'maybe'" in index["bad_parameter"]["reason"]
    assert "TYPE_STRING, which TorchScript takes as List[str]: it must be one-dimensional" in index["words_2d"]["reason"]


def test_output_type_mismatch_is_a_clear_error(torch_server):
    c = httpclient.InferenceServerClient(torch_server.url)
    inputs = [httpclient.InferInput(n, [16], "FP32") for n in ("INPUT__0", "INPUT__1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones(16, np.float32))
    with pytest.raises(InferenceServerException, match="is TYPE_INT32 in config.pbtxt but forward\\(\\) returned Float"):
        c.infer("wrong_type", inputs)


def test_kind_gpu_equals_torch(torch_server, torch_repo):
    if (torch_repo / "cuda").read_text() != "1":
        pytest.skip("torch sees no CUDA device here (the device machine runs this)")
    x = np.load(torch_repo / "mlp_in.npy")
    want = np.load(torch_repo / "mlp_out.npy")
    for mod, url in ((httpclient, torch_server.url), (grpcclient, torch_server.grpc_url)):
        c = mod.InferenceServerClient(url)
        i = mod.InferInput("INPUT__0", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        got = c.infer("mlp_gpu", [i]).as_numpy("OUTPUT__0")
        diff = float(np.abs(got - want).max())
        print(f"mlp on KIND_GPU max abs diff vs torch on the CPU: {diff:.1e}")
        assert diff <= 1e-5
    assert "model 'mlp_gpu' instance 'mlp_gpu_0_0' on cuda:0" in torch_server.read_log()


def test_an_in_place_forward_never_writes_the_clients_shared_memory(torch_server):
    import tritonclient.utils.shared_memory as shm
    c = httpclient.InferenceServerClient(torch_server.url)
    x = np.array([1, 2, 3, 4], np.float32)
    region = shm.create_shared_memory_region("inplace_in", "/nereid_inplace_in", 16)
    try:
        shm.set_shared_memory_region(region, [x])
        c.register_system_shared_memory("inplace_in", "/nereid_inplace_in", 16)
        for _ in range(3):  # three identical requests, three identical answers
            i = httpclient.InferInput("INPUT__0", [4], "FP32")
            i.set_shared_memory("inplace_in", 16)
            assert (c.infer("inplace", [i]).as_numpy("OUTPUT__0") == 2 * x).all()
        np.testing.assert_array_equal(shm.get_contents_as_numpy(region, np.float32, [4]), x)
        c.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(region)


def test_a_torchscript_exception_keeps_the_models_message(torch_server):
    c = httpclient.InferenceServerClient(torch_server.url)
    i = httpclient.InferInput("INPUT__0", [4], "FP32")
    i.set_data_from_numpy(-np.ones(4, np.float32))
    with pytest.raises(InferenceServerException, match="negative sums are not served by this model"):
        c.infer("raises", [i])


def torch_version():
    out = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True)
    return tuple(int(p) for p in out.stdout.strip().split("+")[0].split(".")[:2])


# The backend and TORCH_PYTHON's torch are the same PyTorch (Debian's, or the one the device host
# builds the backend against): AOTInductor packages are served from 2.6 on.
AOTI = torch_available() and torch_version() >= (2, 6)

AOTI_CONFIG = """
platform: "torch_aoti"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "z" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "twice" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_{kind} count: 1 } ]
"""

# An AOT-Inductor package of a two-input, two-output module with a dynamic batch dimension,
# compiled for the device given, and torch's own outputs for fixed inputs.
AOTI_EXPORT = r'''
import sys, numpy as np, torch
out, device = sys.argv[1], sys.argv[2]
torch.manual_seed(0)

class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        return torch.relu(self.linear(x)) + y, x * 2

m = TwoHeads().to(device).eval()
batch = torch.export.Dim("batch", min=1, max=8)
example = (torch.randn(2, 4, device=device), torch.randn(2, 3, device=device))
ep = torch.export.export(m, example, dynamic_shapes=({0: batch}, {0: batch}))
torch._inductor.aoti_compile_and_package(ep, package_path=out + "/model.pt2")
rng = np.random.RandomState(1)
x, y = rng.randn(5, 4).astype(np.float32), rng.randn(5, 3).astype(np.float32)
with torch.no_grad():
    z, twice = m(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
np.savez(out + "/reference.npz", x=x, y=y, z=z.cpu().numpy(), twice=twice.cpu().numpy())
'''


@pytest.mark.skipif(AOTI, reason="this libtorch serves AOT-Inductor packages")
def test_an_aot_inductor_package_is_refused_clearly_by_this_libtorch(tmp_path):
    """platform "torch_aoti" goes to the pytorch backend (Triton's mapping); Debian's libtorch 1.13
    has no AOTInductor, so the load is refused naming what it needs, and the server serves on."""
    repo = tmp_path / "models"
    (repo / "aoti" / "1").mkdir(parents=True)
    (repo / "aoti" / "1" / "model.pt2").write_bytes(b"PK\x03\x04 not a real package")
    (repo / "aoti" / "config.pbtxt").write_text(
        'platform: "torch_aoti"\nmax_batch_size: 0\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    s = Server(str(repo), "--exit-on-error=false", "--strict-readiness=false")
    try:
        c = httpclient.InferenceServerClient(s.url)
        index = {m["name"]: m for m in c.get_model_repository_index()}
        assert index["aoti"]["state"] == "UNAVAILABLE"
        assert "platform 'torch_aoti' (an AOT-Inductor package, model.pt2) needs a libtorch with " \
               "AOTInductor (2.6 or later)" in index["aoti"]["reason"], index["aoti"]["reason"]
        assert c.is_server_live()
    finally:
        assert s.stop() == 0, s.read_log()


@pytest.fixture(scope="module")
def aoti_repo(tmp_path_factory):
    """A repository with the package compiled for one instance kind (compiled once per kind: each
    compile runs a C++ compiler, and Triton's for CUDA)."""
    made = {}

    def make(kind):
        if kind in made:
            return made[kind]
        device = "cuda" if kind == "GPU" else "cpu"
        if kind == "GPU" and subprocess.run(
                [TORCH_PYTHON, "-c", "import torch, sys; sys.exit(not torch.cuda.is_available())"]
        ).returncode != 0:
            pytest.skip("no CUDA device")
        base = tmp_path_factory.mktemp(f"aoti_{device}")
        version = base / "models" / "aoti" / "1"
        version.mkdir(parents=True)
        (base / "export.py").write_text(AOTI_EXPORT)
        out = subprocess.run([TORCH_PYTHON, str(base / "export.py"), str(version), device],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
        (version.parent / "config.pbtxt").write_text(AOTI_CONFIG.replace("{kind}", kind))
        made[kind] = str(base / "models")
        return made[kind]
    return make


@pytest.mark.skipif(not AOTI, reason="AOT-Inductor packages need PyTorch 2.6 or later (Debian's "
                                     "is 1.13); scripts/gpu_device_run.sh SECTIONS=pytorch runs it")
@pytest.mark.parametrize("kind", ["CPU", "GPU"])
@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_an_aot_inductor_package_serves_and_equals_torch(aoti_repo, kind, mod):
    repo = aoti_repo(kind)
    ref = np.load(os.path.join(repo, "aoti", "1", "reference.npz"))
    s = Server(repo)
    try:
        c = mod.InferenceServerClient(s.url if mod is httpclient else s.grpc_url)
        for rows in (1, 5):  # the package's dynamic batch dimension
            inputs = [mod.InferInput("x", [rows, 4], "FP32"), mod.InferInput("y", [rows, 3], "FP32")]
            inputs[0].set_data_from_numpy(ref["x"][:rows])
            inputs[1].set_data_from_numpy(ref["y"][:rows])
            r = c.infer("aoti", inputs)
            z_diff = float(np.abs(r.as_numpy("z") - ref["z"][:rows]).max())
            print(f"aoti {kind} rows {rows}: max abs diff z {z_diff:.2e}")
            np.testing.assert_allclose(r.as_numpy("z"), ref["z"][:rows], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(r.as_numpy("twice"), ref["twice"][:rows])
        assert "AOT-Inductor package" in s.read_log()
    finally:
        assert s.stop() == 0, s.read_log()
