"""The ONNX Runtime backend (backends/onnxruntime): which engine runs a model configured for
onnxruntime (--onnx-engine, backend: "native", the fallback when no ONNX Runtime library loads),
Triton's ORT parameters, string tensors, and outputs written by ORT straight into a client's
shared-memory region."""
import os
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from conftest import BINARY, Server

BACKENDS = os.path.join(os.path.dirname(BINARY), "backends")


def write_model(repo, name, nodes, inputs, outputs, config, opset=13):
    (repo / name / "1").mkdir(parents=True)
    graph = helper.make_graph(nodes, name, inputs, outputs)
    (repo / name / "1" / "model.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)


def float_io(name, dims=("b", 4)):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))


@pytest.fixture(scope="module")
def ort_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ort") / "models"
    # sin_model: an op the native engine lacks (Sin); add_model: one it has.
    write_model(repo, "sin_model", [helper.make_node("Sin", ["x"], ["y"])], [float_io("x")],
                [float_io("y")], 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    write_model(repo, "add_model", [helper.make_node("Add", ["x", "x"], ["y"])], [float_io("x")],
                [float_io("y")], 'backend: "onnxruntime"\nmax_batch_size: 8\n')
    # Triton's simple_string: BYTES in, cast to INT32, doubled, cast back to BYTES.
    write_model(repo, "simple_string",
                [helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
                 helper.make_node("Add", ["a", "a"], ["s"]),
                 helper.make_node("Cast", ["s"], ["OUTPUT0"], to=TensorProto.STRING)],
                [helper.make_tensor_value_info("INPUT0", TensorProto.STRING, ["b", 16])],
                [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, ["b", 16])],
                'name: "simple_string"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
                'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] } ]\n'
                "dynamic_batching { max_queue_delay_microseconds: 20000 }\n")
    # Triton's ORT parameters and graph optimization level.
    write_model(repo, "tuned", [helper.make_node("Add", ["x", "x"], ["y"])], [float_io("x")],
                [float_io("y")],
                'backend: "onnxruntime"\nmax_batch_size: 8\n'
                'optimization { graph { level: -1 } }\n'
                'parameters { key: "intra_op_thread_count" value { string_value: "1" } }\n'
                'parameters { key: "inter_op_thread_count" value { string_value: "1" } }\n'
                'parameters { key: "execution_mode" value { string_value: "1" } }\n'
                'parameters { key: "enable_mem_arena" value { string_value: "0" } }\n')
    write_model(repo, "bad_threads", [helper.make_node("Add", ["x", "x"], ["y"])], [float_io("x")],
                [float_io("y")],
                'backend: "onnxruntime"\nmax_batch_size: 8\n'
                'parameters { key: "intra_op_thread_count" value { string_value: "many" } }\n')
    write_model(repo, "bad_level", [helper.make_node("Add", ["x", "x"], ["y"])], [float_io("x")],
                [float_io("y")],
                'backend: "onnxruntime"\nmax_batch_size: 8\noptimization { graph { level: 7 } }\n')
    # A graph ONNX Runtime itself refuses (an op that does not exist).
    write_model(repo, "broken", [helper.make_node("NoSuchOp", ["x"], ["y"])], [float_io("x")],
                [float_io("y")], 'backend: "onnxruntime"\nmax_batch_size: 8\n')
    return repo


def load_errors(server):
    index = httpclient.InferenceServerClient(server.url).get_model_repository_index()
    return {m["name"]: m.get("reason", "") for m in index if m.get("state") != "READY"}


@pytest.fixture(scope="module")
def ort_server(ort_repo):
    s = Server(str(ort_repo), "--exit-on-error=false", "--strict-readiness=false")
    yield s
    assert s.stop() == 0, s.read_log()


def infer_float(url, model, x, grpc=False):
    mod = grpcclient if grpc else httpclient
    c = mod.InferenceServerClient(url)
    i = mod.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return c.infer(model, [i]).as_numpy("y")


def test_onnxruntime_runs_what_the_native_engine_cannot(ort_server):
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    want = np.sin(x.astype(np.float64))
    for grpc, url in ((False, ort_server.url), (True, ort_server.grpc_url)):
        assert np.abs(infer_float(url, "sin_model", x, grpc) - want).max() < 1e-6
    log = ort_server.read_log()
    assert "model 'sin_model' runs on ONNX Runtime" in log
    assert "ONNX Runtime" in log and "loaded from" in log


def test_triton_parameters_are_applied_and_bad_ones_refused(ort_server):
    x = np.ones((1, 4), np.float32)
    assert (infer_float(ort_server.url, "tuned", x) == 2).all()
    log = ort_server.read_log()
    assert ("model 'tuned' runs on ONNX Runtime" in log and "intra_op_thread_count 1, "
            "inter_op_thread_count 1, execution_mode parallel, graph optimization basic" in log)
    errors = load_errors(ort_server)
    assert "parameter 'intra_op_thread_count' must be an integer from 0 to 1024, got 'many'" in errors["bad_threads"]
    assert "optimization.graph.level must be -1 (basic), 0 (all), 1" in errors["bad_level"]
    assert "ONNX Runtime cannot load" in errors["broken"] and "NoSuchOp" in errors["broken"]


def test_string_tensors_through_onnxruntime_batched(ort_server):
    """BYTES in and out (Triton's simple_string), two requests joined by the dynamic batcher."""
    c = httpclient.InferenceServerClient(ort_server.url, concurrency=8)
    pending = []
    for k in range(8):
        data = np.array([[str(k * 100 + i).encode() for i in range(16)]], dtype=object)
        i = httpclient.InferInput("INPUT0", [1, 16], "BYTES")
        i.set_data_from_numpy(data)
        pending.append((k, c.async_infer("simple_string", [i])))
    for k, p in pending:
        out = p.get_result().as_numpy("OUTPUT0")
        assert [int(v) for v in out.ravel()] == [2 * (k * 100 + i) for i in range(16)]
    stats = c.get_inference_statistics("simple_string")["model_stats"][0]
    assert stats["inference_count"] >= 8 and stats["execution_count"] < stats["inference_count"]


def test_outputs_written_by_onnxruntime_into_a_shared_memory_region(ort_server):
    c = httpclient.InferenceServerClient(ort_server.url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    handle = shm.create_shared_memory_region("ort_out", "/nereid_ort_out", 32)
    try:
        c.register_system_shared_memory("ort_out", "/nereid_ort_out", 32)
        i = httpclient.InferInput("x", [2, 4], "FP32")
        i.set_data_from_numpy(x)
        o = httpclient.InferRequestedOutput("y", binary_data=True)
        o.set_shared_memory("ort_out", 32)
        c.infer("add_model", [i], outputs=[o])
        got = shm.get_contents_as_numpy(handle, np.float32, [2, 4])
        assert (got == 2 * x).all()
    finally:
        c.unregister_system_shared_memory("ort_out")
        shm.destroy_shared_memory_region(handle)


def test_onnx_engine_flag_picks_the_engine(ort_repo, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(ort_repo / "sin_model", repo / "sin_model")
    shutil.copytree(ort_repo / "add_model", repo / "add_model")
    # native: every onnxruntime config on the native engine (sin_model cannot load).
    s = Server(str(repo), "--onnx-engine=native", "--exit-on-error=false", "--strict-readiness=false")
    try:
        errors = load_errors(s)
        assert "does not support these ops: Sin" in errors["sin_model"]
        assert "model 'add_model' (configured for onnxruntime) runs on the native engine" in s.read_log()
    finally:
        assert s.stop() == 0
    # auto: the native engine where it runs every op, ONNX Runtime for the rest.
    s = Server(str(repo), "--onnx-engine=auto")
    try:
        log = s.read_log()
        assert "model 'add_model' (configured for onnxruntime) runs on the native engine" in log
        assert "model 'sin_model': the native engine cannot run it" in log
        assert "model 'sin_model' runs on ONNX Runtime" in log
        assert infer_float(s.url, "sin_model", np.zeros((1, 4), np.float32)).shape == (1, 4)
    finally:
        assert s.stop() == 0
    out = subprocess.run([BINARY, "serve", f"--model-repository={repo}", "--onnx-engine=fastest"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "--onnx-engine=fastest: backend 'fastest' is not available" in out.stderr


def test_missing_onnxruntime_library_falls_back_to_the_native_engine(ort_repo, tmp_path):
    """Without a loadable libonnxruntime.so the backend does not start: the native engine serves
    onnxruntime configs (as its alias) and models it cannot run say why."""
    backends = tmp_path / "backends"
    backends.mkdir()
    for lib in os.listdir(BACKENDS):
        if lib.endswith(".so"):
            shutil.copy(os.path.join(BACKENDS, lib), backends / lib)  # no onnxruntime/ folder
    repo = tmp_path / "models"
    shutil.copytree(ort_repo / "add_model", repo / "add_model")
    s = Server(str(repo), f"--backend-directory={backends}",
               env={"NEREID_ONNXRUNTIME_LIBRARY": str(tmp_path / "nowhere" / "libonnxruntime.so"),
                    "LD_LIBRARY_PATH": ""})
    try:
        log = s.read_log()
        assert "the ONNX Runtime library was not found" in log and "NEREID_ONNXRUNTIME_LIBRARY" in log
        assert "backend 'onnxruntime' is served by 'native' (libnereid_backend_onnxruntime.so did not start)" in log
        assert (infer_float(s.url, "add_model", np.ones((1, 4), np.float32)) == 2).all()
    finally:
        assert s.stop() == 0


def test_kind_gpu_is_refused_for_onnxruntime(ort_repo, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(ort_repo / "add_model", repo / "add_model")
    cfg = repo / "add_model" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "instance_group [ { kind: KIND_GPU } ]\n")
    s = Server(str(repo), "--exit-on-error=false", "--strict-readiness=false")
    try:
        reason = load_errors(s)["add_model"]
        assert "KIND_GPU" in reason or "GPU" in reason, reason
    finally:
        assert s.stop() == 0


def test_grpc_errors_keep_other_requests_served(ort_server):
    c = grpcclient.InferenceServerClient(ort_server.grpc_url)
    i = grpcclient.InferInput("x", [1, 5], "FP32")  # wrong width
    i.set_data_from_numpy(np.ones((1, 5), np.float32))
    with pytest.raises(InferenceServerException):
        c.infer("add_model", [i])
    assert (infer_float(ort_server.grpc_url, "add_model", np.ones((3, 4), np.float32), grpc=True) == 2).all()


def test_external_weights_outside_the_model_directory_are_refused(tmp_path):
    """A model whose external-data initializer points outside its own directory fails to load (ONNX
    Runtime validates the path; the file stays unread) and the server keeps serving."""
    secret = tmp_path / "outside.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "../../../outside.bin"), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    repo = tmp_path / "models"
    (repo / "escape" / "1").mkdir(parents=True)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "escape",
                              [float_io("x", (4,))], [float_io("y", (4,))], [w])
    (repo / "escape" / "1" / "model.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    (repo / "escape" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    s = Server(str(repo), "--exit-on-error=false", "--strict-readiness=false")
    try:
        assert "escapes model directory" in load_errors(s)["escape"]
        assert httpclient.InferenceServerClient(s.url).is_server_live()
    finally:
        assert s.stop() == 0


def test_an_output_shape_other_than_the_declared_one_is_returned_as_produced(tmp_path):
    """A graph that declares its output [4] and reshapes to [2, 2]: Triton returns [2, 2]."""
    repo = tmp_path / "models"
    (repo / "reshapes" / "1").mkdir(parents=True)
    # The target shape is an input, so that nothing at load contradicts the declared [4].
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "S"], ["Y"])], "reshapes",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("S", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])])
    (repo / "reshapes" / "1" / "model.onnx").write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    (repo / "reshapes" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },\n'
        '        { name: "S" data_type: TYPE_INT64 dims: [ 2 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    s = Server(str(repo))
    try:
        for mod, url in [(httpclient, s.url), (grpcclient, s.grpc_url)]:
            c = mod.InferenceServerClient(url)
            for _ in range(3):
                x, shape = mod.InferInput("X", [4], "FP32"), mod.InferInput("S", [2], "INT64")
                x.set_data_from_numpy(np.arange(4, dtype=np.float32))
                shape.set_data_from_numpy(np.array([2, 2], np.int64))
                y = c.infer("reshapes", [x, shape]).as_numpy("Y")
                assert y.shape == (2, 2) and (y.ravel() == np.arange(4)).all()
    finally:
        assert s.stop() == 0, s.read_log()


def test_thread_counts_that_multiply_past_the_budget_are_refused(tmp_path):
    repo = tmp_path / "models"
    (repo / "double" / "1").mkdir(parents=True)
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    (repo / "double" / "1" / "model.onnx").write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    (repo / "double" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 0\n')
    s = Server(str(repo), "--model-control-mode=explicit", "--load-model=double")
    try:
        c = httpclient.InferenceServerClient(s.url)
        hostile = ('{"platform":"onnxruntime_onnx","instance_group":[{"kind":"KIND_CPU","count":1000}],'
                   '"parameters":{"intra_op_thread_count":{"string_value":"1024"},'
                   '"inter_op_thread_count":{"string_value":"1024"},"execution_mode":{"string_value":"1"}}}')
        with pytest.raises(InferenceServerException, match="ONNX Runtime threads .* is more than the"):
            c.load_model("double", config=hostile)
        two = hostile.replace('"count":1000', '"count":2').replace("1024", "96")
        with pytest.raises(InferenceServerException, match="2 instance\\(s\\) x 192 ONNX Runtime threads"):
            c.load_model("double", config=two)
        modest = two.replace('"96"', '"1"')
        c.load_model("double", config=modest)  # 2 x 2 threads: fine
        assert c.is_model_ready("double")
    finally:
        assert s.stop() == 0, s.read_log()
