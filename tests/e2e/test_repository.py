"""Repository extension in explicit mode: index, load, unload; bad config.pbtxt on load is reported
with file and line, and never disturbs the models already serving."""
import json
import os
import shutil
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from onnx import TensorProto, helper

from conftest import Server


@pytest.fixture(scope="module")
def explicit_server(repository, tmp_path_factory):
    repo = tmp_path_factory.mktemp("explicit") / "models"
    for name in ("simple", "matmul_model"):
        shutil.copytree(os.path.join(repository, name), repo / name)
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    shutil.copy(os.path.join(repository, "simple", "1", "model.onnx"), broken / "1" / "model.onnx")
    (broken / "config.pbtxt").write_text('name: "broken"\nmax_batch_size: 8\ninput [ { name: "INPUT0"\n'
                                         '  data_type: TYPE_INT32 dims: [ 16 }\n]\n')
    wrongdims = repo / "wrongdims"
    (wrongdims / "1").mkdir(parents=True)
    shutil.copy(os.path.join(repository, "simple", "1", "model.onnx"), wrongdims / "1" / "model.onnx")
    cfg = open(os.path.join(repository, "simple", "config.pbtxt")).read()
    (wrongdims / "config.pbtxt").write_text(cfg.replace('"simple"', '"wrongdims"').replace("[ 16 ]", "[ -1, 16 ]"))
    unsupported = repo / "unsupported"
    (unsupported / "1").mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Sin", ["x"], ["e"]), helper.make_node("Cos", ["e"], ["y"])], "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    (unsupported / "1" / "model.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    # the native engine, asked for by name, lists the ops it lacks
    (unsupported / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nbackend: "native"\n')
    s = Server(str(repo), "--model-control-mode=explicit", "--load-model=simple")
    yield s
    assert s.stop() == 0, s.read_log()


def simple_works(client):
    a = np.ones((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(a)
    return (client.infer("simple", inputs).as_numpy("OUTPUT0") == 2).all()


def test_explicit_mode_load_unload_index(explicit_server):
    c = httpclient.InferenceServerClient(explicit_server.url)
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["simple"]["state"] == "READY"
    assert "state" not in index["matmul_model"]  # present on disk, never loaded
    assert not c.is_model_ready("matmul_model")
    c.load_model("matmul_model")
    assert c.is_model_ready("matmul_model")
    c.unload_model("matmul_model")
    assert not c.is_model_ready("matmul_model")
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["matmul_model"]["state"] == "UNAVAILABLE" and index["matmul_model"]["reason"] == "unloaded"
    ready = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"http://{explicit_server.url}/v2/repository/index", data=b'{"ready": true}', method="POST")).read())
    assert [m["name"] for m in ready] == ["simple"]
    assert simple_works(c)


def test_bad_config_on_load_names_file_and_line(explicit_server):
    c = httpclient.InferenceServerClient(explicit_server.url)
    with pytest.raises(InferenceServerException) as e:
        c.load_model("broken")
    assert "broken/config.pbtxt:4" in str(e.value)
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert "broken/config.pbtxt:4" in index["broken"]["reason"]
    assert simple_works(c)


@pytest.mark.parametrize("model,message", [
    # dims that repeat the batch dimension are explained
    ("wrongdims", r"first dimension is the batch: dims should be \[16\]"),
    # an onnxruntime config whose graph has ops the native engine lacks lists them
    ("unsupported", "does not support these ops: Cos, Sin"),
])
def test_model_that_cannot_load_says_why(explicit_server, model, message):
    c = httpclient.InferenceServerClient(explicit_server.url)
    with pytest.raises(InferenceServerException, match=message):
        c.load_model(model)
    assert simple_works(c)


def test_load_unknown_model(explicit_server):
    c = httpclient.InferenceServerClient(explicit_server.url)
    with pytest.raises(InferenceServerException,
                       match="failed to load 'does_not_exist', failed to poll from model repository: "
                             "model 'does_not_exist' is not in any model repository"):
        c.load_model("does_not_exist")


def test_load_with_config_override(explicit_server):
    c = httpclient.InferenceServerClient(explicit_server.url)
    c.load_model("matmul_model", config='{"name": "matmul_model", "backend": "native", "max_batch_size": 0,'
                                         '"input": [{"name": "input__0", "data_type": "TYPE_FP32", "dims": [-1, 1024]}],'
                                         '"output": [{"name": "output__0", "data_type": "TYPE_FP32", "dims": [-1, 1024]}],'
                                         '"instance_group": [{"kind": "KIND_CPU", "count": 3}]}')
    assert c.get_model_config("matmul_model")["instance_group"][0]["count"] == 3
    # A load without a config finds the directory unchanged: what serves stays, override and all
    # (Triton's rule) ...
    c.load_model("matmul_model")
    assert c.get_model_config("matmul_model")["instance_group"][0]["count"] == 3
    assert "directory has not changed: not reloaded" in explicit_server.read_log()
    # ... and once the directory changes, the load reads it again.
    config = os.path.join(explicit_server.repository, "matmul_model", "config.pbtxt")
    with open(config, "a") as f:
        f.write("\n")
    c.load_model("matmul_model")
    assert c.get_model_config("matmul_model")["instance_group"][0]["count"] != 3
    c.unload_model("matmul_model")


def test_unload_keeps_in_flight_requests(explicit_server):
    import gevent
    c = httpclient.InferenceServerClient(explicit_server.url, concurrency=8)
    c.load_model("matmul_model")
    x = np.ones((256, 1024), dtype=np.float32)
    pending = []
    for _ in range(32):  # ~0.5 GFLOP each: the queue holds work for well over the pause below
        i = httpclient.InferInput("input__0", [256, 1024], "FP32")
        i.set_data_from_numpy(x)
        pending.append(c.async_infer("matmul_model", [i]))
    deadline = time.time() + 30
    while explicit_server.accepted("matmul_model") < 4:  # the server holds work when it unloads
        assert time.time() < deadline
        gevent.sleep(0.01)
    accepted = explicit_server.accepted("matmul_model")
    # A second client (its own connection pool) unloads while the first one's requests are in flight.
    httpclient.InferenceServerClient(explicit_server.url).unload_model("matmul_model")
    # Every request accepted before the unload completes with a correct result: none is lost. Requests
    # that arrive after the unload started get a clear error instead.
    ok = 0
    for p in pending:
        try:
            out = p.get_result(timeout=120).as_numpy("output__0")
            assert out.shape == (256, 1024) and np.isfinite(out).all()
            ok += 1
        except InferenceServerException as e:
            assert "unknown model" in str(e) or "unloading" in str(e) or "no available versions" in str(e), e
    assert ok >= accepted, (ok, accepted)  # every request accepted before the unload answered



def test_load_log_names_engine_and_ignored_fields(explicit_server):
    c = httpclient.InferenceServerClient(explicit_server.url)
    c.load_model("simple")
    log = explicit_server.read_log()
    assert "model 'simple' runs on ONNX Runtime" in log
