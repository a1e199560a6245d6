"""Loading a model with file overrides (Triton's "file:<path>" load parameters: base64 over HTTP,
bytes over gRPC, with a 'config'): the model runs from a directory of its own, a later load
without files uses the repository again, and paths that would leave the model's directory are
refused without touching the file system."""
import base64
import json
import os
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Server


@pytest.fixture(scope="module")
def explicit_server(repository):
    s = Server(repository, "--model-control-mode=explicit", "--load-model=simple")
    yield s
    assert s.stop() == 0, s.read_log()


def add(module, client, model, version=""):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return client.infer(model, inputs, model_version=version).as_numpy("OUTPUT0")


def post_load(server, name, parameters):
    request = urllib.request.Request(f"http://{server.url}/v2/repository/models/{name}/load",
                                     data=json.dumps({"parameters": parameters}).encode(), method="POST")
    try:
        urllib.request.urlopen(request)
        return 200, ""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_model_loads_from_the_files_of_the_request(explicit_server, repository, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(explicit_server.url if protocol == "http"
                                          else explicit_server.grpc_url)
    with open(os.path.join(repository, "simple", "1", "model.onnx"), "rb") as f:
        onnx = f.read()
    with pytest.raises(InferenceServerException,
                       match="failed to load 'simple', failed to poll from model repository"):
        client.load_model("simple", files={"file:1/model.onnx": onnx})
    assert (add(module, client, "simple") == 2 * np.arange(16)).all()  # untouched
    # A model that exists nowhere on disk, from the request alone (auto-completed from the file).
    config = json.dumps({"backend": "onnxruntime"})
    client.load_model("override_simple", config=config, files={"file:7/model.onnx": onnx})
    assert client.is_model_ready("override_simple", "7")
    assert (add(module, client, "override_simple") == 2 * np.arange(16)).all()
    # The repository's model replaced by one from the request (version 5 only), then back.
    client.load_model("simple", config=config, files={"file:5/model.onnx": onnx})
    assert client.is_model_ready("simple", "5") and not client.is_model_ready("simple", "1")
    client.load_model("simple")
    assert client.is_model_ready("simple", "1") and not client.is_model_ready("simple", "5")
    client.unload_model("override_simple")


def test_paths_outside_the_model_are_refused(explicit_server, tmp_path):
    target = tmp_path / "escaped.txt"
    payload = base64.b64encode(b"should not exist").decode()
    config = json.dumps({"backend": "identity"})
    relative_escape = os.path.relpath(target, "/tmp/x/y")
    for path in ["../../escaped.txt", relative_escape, str(target), "1/../../x", "./1/a", "1//a"]:
        code, error = post_load(explicit_server, "escaper", {"config": config, f"file:{path}": payload})
        assert code == 400 and "failed to load 'escaper', failed to poll from model repository" in error, (path, error)
    assert not target.exists()
    # A component longer than a file name: Triton's QA (L0_http) expects its 500.
    code, error = post_load(explicit_server, "escaper", {"config": "{}", "file:" + "A" * 256: "YQ=="})
    assert code == 500 and "failed to poll from model repository" in error
    code, error = post_load(explicit_server, "escaper", {"config": config, "file:1/a": "not base64!"})
    assert code == 400 and "base64" in error
    assert httpclient.InferenceServerClient(explicit_server.url).is_server_ready()


def test_override_folders_go_with_the_versions_that_use_them(repository, tmp_path):
    """Each load with files writes a folder under TMPDIR; it is removed when the load fails, when a
    reload replaces the version loaded from it, and at unload, so 26 loads leave at most one."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    s = Server(repository, "--model-control-mode=explicit", env={"TMPDIR": str(tmp)})
    try:
        c = httpclient.InferenceServerClient(s.url)
        with open(os.path.join(repository, "simple", "1", "model.onnx"), "rb") as f:
            onnx = f.read()
        config = json.dumps({"backend": "onnxruntime"})

        def folders(at_most):
            """The override folders once no more than 'at_most' remain (a retired version goes on
            a thread of its own), or as they are after 10 s."""
            deadline = time.monotonic() + 10
            while True:
                now = sorted(p.name for p in tmp.glob("nereid-override-*"))
                if len(now) <= at_most or time.monotonic() > deadline:
                    return now

        for i in range(25):
            c.load_model("ov", config=config, files={"file:1/model.onnx": onnx})
            assert (add(httpclient, c, "ov") == 2 * np.arange(16)).all()
            assert len(folders(1)) == 1  # the previous version's folder is gone
        with pytest.raises(InferenceServerException, match="load failed for model 'broken'"):
            c.load_model("broken", config=config, files={"file:1/model.onnx": b"not onnx"})
        assert len(folders(1)) == 1  # the failed load's folder is gone too
        c.unload_model("ov")
        assert folders(0) == []
    finally:
        assert s.stop() == 0, s.read_log()
    assert list(tmp.glob("nereid-override-*")) == []
