"""Bad input of every kind gets a Triton-style error ({"error": ...} and the right status) and the
server keeps serving: after each bad request a good request still succeeds."""
import gzip
import http.client
import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

GOOD_JSON = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]})


def post(server, path, body, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def assert_still_serving(server):
    status, body = post(server, "/v2/models/simple/infer", GOOD_JSON)
    assert status == 200, body
    assert json.loads(body)["outputs"][0]["data"] == [i + 1 for i in range(16)]


def binary_body(declared_size, actual_bytes):
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": declared_size}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()
    return header, header + b"\0" * actual_bytes


def inputs_json(**overrides):
    base = {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
    base.update(overrides)
    return json.dumps({"inputs": [base, {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]})


CASES = {
    "malformed_json": ("simple", '{"inputs": [', {}, 400, "failed to parse"),
    "not_an_object": ("simple", "[1, 2]", {}, 400, "object"),
    "no_inputs": ("simple", "{}", {}, 400, "inputs"),
    "wrong_shape": ("simple", inputs_json(shape=[1, 8], data=list(range(8))), {}, 400, "unexpected shape"),
    "element_count": ("simple", inputs_json(data=list(range(15))), {}, 400, "number of elements"),
    "wrong_datatype": ("simple", inputs_json(datatype="FP32"), {}, 400, "data-type"),
    "unknown_datatype": ("simple", inputs_json(datatype="INT33"), {}, 400, "unknown datatype"),
    "batch_too_big": ("simple", json.dumps({"inputs": [
        {"name": n, "shape": [9, 16], "datatype": "INT32", "data": [0] * 144} for n in ("INPUT0", "INPUT1")]}),
        {}, 400, "batch-size must be <= 8"),
    "missing_input": ("simple", json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}]}), {}, 400, "INPUT1"),
    "unknown_input": ("simple", inputs_json(name="INPUT9"), {}, 400, "unexpected inference input"),
    "unknown_output": ("simple", json.dumps({**json.loads(GOOD_JSON), "outputs": [{"name": "NOPE"}]}), {}, 400,
                       "unexpected inference output"),
    "string_for_int": ("simple", inputs_json(data=["x"] * 16), {}, 400, "integer"),
    "unknown_model": ("no_such_model", GOOD_JSON, {}, 404, "unknown model"),
    "bad_encoding": ("simple", GOOD_JSON, {"Content-Encoding": "br"}, 501, "Content-Encoding"),
    "corrupt_gzip": ("simple", b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}, 400, "decompress"),
    "bad_header_length": ("simple", GOOD_JSON, {"Inference-Header-Content-Length": "abc"}, 400,
                          "Inference-Header-Content-Length"),
    "header_length_past_body": ("simple", GOOD_JSON, {"Inference-Header-Content-Length": "100000"}, 400,
                                "Inference-Header-Content-Length"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_request_gets_clear_error_and_server_keeps_serving(server, case):
    model, body, headers, status, fragment = CASES[case]
    got, data = post(server, f"/v2/models/{model}/infer", body, headers)
    assert got == status, data
    assert fragment in json.loads(data)["error"]
    assert_still_serving(server)


def test_truncated_binary_body(server):
    header, body = binary_body(64, 10)
    got, data = post(server, "/v2/models/simple/infer", body, {"Inference-Header-Content-Length": str(len(header))})
    assert got == 400 and "truncated" in json.loads(data)["error"]
    assert_still_serving(server)


def test_binary_body_with_extra_bytes(server):
    header, body = binary_body(64, 80)
    got, data = post(server, "/v2/models/simple/infer", body, {"Inference-Header-Content-Length": str(len(header))})
    assert got == 400 and "no input claims" in json.loads(data)["error"]
    assert_still_serving(server)


def test_body_over_the_limit(server):
    # The fixture starts the server with --http-max-input-size=4194304.
    got, data = post(server, "/v2/models/simple/infer", b"x" * (5 << 20))
    assert got == 400 and "--http-max-input-size" in json.loads(data)["error"]
    assert_still_serving(server)


def test_compressed_body_that_inflates_over_the_limit(server):
    bomb = gzip.compress(b"\0" * (6 << 20))
    got, data = post(server, "/v2/models/simple/infer", bomb, {"Content-Encoding": "gzip"})
    assert got == 400 and "exceeds the limit" in json.loads(data)["error"]
    assert_still_serving(server)


def test_unknown_version(client, server):
    a = np.zeros((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(a)
    with pytest.raises(InferenceServerException, match="version 3"):
        client.infer("simple", inputs, model_version="3")
    assert_still_serving(server)


def test_garbage_http_request(server):
    import socket
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400")
    assert_still_serving(server)


def test_tritonclient_reports_server_errors(client):
    i = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    i.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", [i])
    assert "data-type" in str(e.value)
