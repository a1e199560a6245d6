"""Every KServe v2 endpoint with Triton's behaviour, through tritonclient.http and raw HTTP."""
import http.client
import json
import os

import pytest


def raw(server, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


def test_health_endpoints_have_empty_bodies(server, client):
    assert client.is_server_live() and client.is_server_ready()
    for path in ("/v2/health/live", "/v2/health/ready"):
        status, _, body = raw(server, "GET", path)
        assert status == 200 and body == b""


def test_server_metadata_lists_only_working_extensions(client):
    md = client.get_server_metadata()
    assert md["name"] == "nereid" and md["version"]
    assert {"binary_tensor_data", "classification", "model_repository", "model_configuration"} <= set(md["extensions"])
    assert {"statistics", "schedule_policy", "logging"} <= set(md["extensions"])
    assert "system_shared_memory" in md["extensions"]
    assert "cuda_shared_memory" not in md["extensions"]
    assert "sequence" in md["extensions"]  # the sequence batcher (docs/sequence.md)


def test_model_metadata(client):
    md = client.get_model_metadata("simple")
    assert md["name"] == "simple" and md["versions"] == ["1"] and md["platform"] == "onnxruntime_onnx"
    assert md["inputs"] == [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
                            {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]}]
    assert [o["name"] for o in md["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert client.get_model_metadata("simple", "1")["name"] == "simple"
    assert client.get_model_metadata("matmul_model")["inputs"][0]["shape"] == [-1, 1024]


def test_model_config_json_has_numeric_dims(server, client):
    cfg = client.get_model_config("recommend_model")
    assert cfg["max_batch_size"] == 32
    assert cfg["input"][0]["dims"] == [1024]
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [8, 16, 32]
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 200  # uint64 as a number
    status, headers, body = raw(server, "GET", "/v2/models/simple/config")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert '"dims":[16]' in body.decode()


def test_model_names_in_urls_are_percent_decoded(server, repository, tmp_path):
    """tritonclient quotes model names (urllib.parse.quote) and Triton decodes them: '%73imple' is
    simple; '%2F' decodes to a '/' (no model has one), and a bad escape stays as it is."""
    assert raw(server, "GET", "/v2/models/%73imple/ready")[0] == 200
    assert json.loads(raw(server, "GET", "/v2/models/%73imple")[2])["name"] == "simple"
    status, _, body = raw(server, "GET", "/v2/models/simp%2Fle")
    assert status == 404 and b"'simp/le'" in body, body  # decoded, then no such model
    assert raw(server, "GET", "/v2/models/simple%zz")[0] == 404  # 'simple%zz': no such model
    # A model whose name needs quoting, through the real client.
    import shutil
    import numpy as np
    import tritonclient.http as httpclient
    from conftest import Server
    repo = tmp_path / "models"
    shutil.copytree(os.path.join(repository, "identity_fp32"), repo / "id fp32 \"q\"")
    config = repo / "id fp32 \"q\"" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "identity_fp32"', 'name: "id fp32 \\"q\\""'))
    s = Server(str(repo))
    try:
        c = httpclient.InferenceServerClient(s.url)
        assert c.is_model_ready('id fp32 "q"')
        i = httpclient.InferInput("INPUT0", [1, 3], "FP32")
        i.set_data_from_numpy(np.ones((1, 3), np.float32))
        assert c.infer('id fp32 "q"', [i]).as_numpy("OUTPUT0").tolist() == [[1, 1, 1]]
    finally:
        assert s.stop() == 0


def test_model_ready(server, client):
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "2")
    assert not client.is_model_ready("no_such_model")
    status, _, body = raw(server, "GET", "/v2/models/no_such_model/ready")
    assert status == 400 and "error" in json.loads(body)


@pytest.mark.parametrize("path,status", [
    ("/v2/models/no_such_model", 404),
    ("/v2/models/no_such_model/config", 404),
    ("/v2/models/simple/versions/7", 404),
    ("/v2/models/simple/versions/x/config", 400),
    ("/v2/nothing/here", 404),
    ("/v2/models/no_such_model/stats", 404),
    ("/v2/cudasharedmemory/region/never_registered/status", 404),
    ("/v2/systemsharedmemory/region/never_registered/status", 404),
])
def test_errors_use_triton_status_codes_and_json_bodies(server, path, status):
    got, headers, body = raw(server, "GET", path)
    assert got == status
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]


def test_wrong_method_is_rejected(server):
    status, _, body = raw(server, "GET", "/v2/models/simple/infer")
    assert status == 405 and json.loads(body)["error"]


def test_repository_index(client):
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["simple"]["state"] == "READY" and index["simple"]["version"] == "1"
    assert {"simple", "recommend_model", "matmul_model", "identity_fp32"} <= set(index)


def test_repository_control_needs_explicit_mode(client):
    from tritonclient.utils import InferenceServerException
    with pytest.raises(InferenceServerException, match="EXPLICIT"):
        client.load_model("simple")


def test_logging_settings(client):
    settings = client.get_log_settings()
    assert settings["log_verbose_level"] == 0 and settings["log_info"] is True
    updated = client.update_log_settings({"log_verbose_level": 1})
    assert updated["log_verbose_level"] == 1
    client.update_log_settings({"log_verbose_level": 0})


def test_keep_alive_serves_many_requests_on_one_connection(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    for _ in range(50):
        conn.request("GET", "/v2/health/ready")
        r = conn.getresponse()
        r.read()
        assert r.status == 200
    conn.close()


def test_load_log_lists_config_fields_not_acted_on(server):
    log = server.read_log()
    assert "model 'identity_fp32': config fields accepted but not acted on yet: optimization" in log
    assert "model 'recommend_model' runs on the native engine" in log
    assert "model 'simple' runs on ONNX Runtime" in log


@pytest.mark.parametrize("body, fragment", [
    ('{"log_info": 1}', "mistyped logging setting 'log_info'"),
    ('{"log_verbose_level": -1}', "mistyped logging setting 'log_verbose_level'"),
    ('{"log_file": "/tmp/x.log"}', "'log_file' can not be changed"),
    ('{"no_such_setting": true}', "unknown or mistyped logging setting 'no_such_setting'"),
    ('[1]', "logging"),
])
def test_bad_logging_settings_are_rejected_and_change_nothing_else(server, body, fragment):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/v2/logging", body=body)
    r = conn.getresponse()
    payload = json.loads(r.read())
    assert r.status == 400 and fragment in payload["error"], payload
    conn.request("GET", "/v2/logging")
    r = conn.getresponse()
    settings = json.loads(r.read())
    assert r.status == 200 and settings["log_file"] == "" and settings["log_info"] is True
    conn.close()


def test_version_names_the_backend_abi():
    import os
    import re
    import subprocess
    from conftest import BINARY, ROOT
    out = subprocess.run([BINARY, "--version"], capture_output=True, text=True, timeout=10)
    header = open(os.path.join(ROOT, "include", "nereid", "backend.h")).read()
    major, minor = re.search(r"NEREID_BACKEND_API_VERSION \(\((\d+)u << 16\) \| (\d+)u\)",
                             header).groups()
    assert out.returncode == 0 and out.stdout.strip().endswith(f"(backend ABI {major}.{minor})"), out
