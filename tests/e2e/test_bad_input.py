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


# The request rules, written once: each case is one request in protocol-neutral form, sent over
# HTTP (JSON, or binary sections for "raw" data) and over gRPC (contents, or raw_input_contents),
# with the HTTP status, the gRPC code and the message both must give. An input is
# (name, datatype, shape, data): data is ("typed", values), ("raw", bytes) or
# ("shm", region, offset, byte_size). Cases that only one wire can express (malformed JSON, a
# corrupt gzip body, raw_input_contents counts) are in the HTTP-only table below and test_grpc.py.
SHM_REGION = "bad_input_table"
ZEROS = [0] * 16


def tensor(name="INPUT0", datatype="INT32", shape=(1, 16), data=("typed", ZEROS)):
    return (name, datatype, list(shape), data)


def simple(**overrides):
    """simple's two good inputs, INPUT0 changed by 'overrides' (INPUT1 sent raw when INPUT0 is:
    gRPC allows no mix of contents and raw_input_contents)."""
    first = tensor(**overrides)
    raw = first[3][0] == "raw"
    return [first, tensor("INPUT1", data=("raw", b"\0" * 64) if raw else ("typed", ZEROS))]


def request(inputs, outputs=(), parameters=None, model="simple", version=""):
    return {"model": model, "version": version, "inputs": inputs, "outputs": list(outputs),
            "parameters": parameters or {}}


SHM_IN = ("shm", SHM_REGION, 0, 64)
SHM_OUT = {"shared_memory_region": SHM_REGION, "shared_memory_byte_size": 64,
           "shared_memory_offset": 64}
NEUTRAL_CASES = {
    "wrong_shape": (request(simple(shape=(1, 8), data=("typed", [0] * 8))),
                    400, "INVALID_ARGUMENT", "unexpected shape"),
    # Triton's HTTP frontend reads shape entries as unsigned integers and answers 500.
    "negative_shape": (request(simple(shape=(1, -16))), {"http": 500, "grpc": 400},
                       "INVALID_ARGUMENT",
                       {"http": "Unable to parse 'shape': attempt to access JSON "
                                "non-unsigned-integer as unsigned-integer",
                        "grpc": "shape entries must be non-negative"}),
    "element_count": (request(simple(data=("typed", [0] * 15))), 400, "INVALID_ARGUMENT",
                      "unexpected number of elements for input 'INPUT0'"),
    "raw_too_short": (request(simple(data=("raw", b"\0" * 10))), 400, "INVALID_ARGUMENT",
                      "bytes of data"),
    "wrong_datatype": (request(simple(datatype="FP32", data=("raw", b"\0" * 64))), 400,
                       "INVALID_ARGUMENT", "data-type"),
    "unknown_datatype": (request(simple(datatype="INT33")), 400, "INVALID_ARGUMENT",
                         "input 'INPUT0' has unknown datatype 'INT33'"),
    "batch_too_big": (request([tensor(n, shape=(9, 16), data=("raw", b"\0" * 576))
                               for n in ("INPUT0", "INPUT1")]),
                      400, "INVALID_ARGUMENT", "batch-size must be <= 8"),
    "missing_input": (request([tensor()]), 400, "INVALID_ARGUMENT", "INPUT1"),
    "unknown_input": (request(simple(name="INPUT9")), 400, "INVALID_ARGUMENT",
                      "unexpected inference input"),
    "unknown_output": (request(simple(), outputs=[("NOPE", {})]), 400, "INVALID_ARGUMENT",
                       "unexpected inference output"),
    "unknown_model": (request(simple(), model="no_such_model"), 404, "NOT_FOUND",
                      "unknown model"),
    "unknown_version": (request(simple(), version="9"), 404, "NOT_FOUND", "version 9"),
    "bytes_malformed": (request([tensor(datatype="BYTES", shape=(1, 1),
                                        data=("raw", b"\x10\x00\x00\x00abc"))],
                                model="identity_bytes"),
                        400, "INVALID_ARGUMENT", "malformed BYTES"),
    "classification_not_positive": (request(simple(), outputs=[("OUTPUT0", {"classification": 0})]),
                                    400, "INVALID_ARGUMENT",
                                    "output 'OUTPUT0': classification must be a positive integer"),
    # The parameters the server acts on: Triton checks their types with other words per protocol.
    "priority_negative": (request(simple(), parameters={"priority": -1}), 400, "INVALID_ARGUMENT",
                          {"http": "Unable to parse 'priority'",
                           "grpc": "invalid value for 'priority', expected value >= 0."}),
    "timeout_not_a_number": (request(simple(), parameters={"timeout": "soon"}), 400,
                             "INVALID_ARGUMENT",
                             {"http": "Unable to parse 'timeout'",
                              "grpc": "invalid value type for 'timeout' parameter, expected "
                                      "int64_param."}),
    "sequence_id_bool": (request(simple(), parameters={"sequence_id": True}), 400,
                         "INVALID_ARGUMENT",
                         {"http": "Unable to parse 'sequence_id'",
                          "grpc": "invalid value type for 'sequence_id' parameter, expected "
                                  "int64_param or string_param."}),
    "sequence_start_int": (request(simple(), parameters={"sequence_start": 1}), 400,
                           "INVALID_ARGUMENT",
                           {"http": "Unable to parse 'sequence_start'",
                            "grpc": "invalid value type for 'sequence_start' parameter, expected "
                                    "bool_param."}),
    "triton_prefix": (request(simple(), parameters={"triton_mine": 1}), 400, "INVALID_ARGUMENT",
                      "parameter keys starting with 'triton_' are reserved for Triton usage"),
    "sequence_id_too_long": (request(simple(), parameters={"sequence_id": "s" * 129}), 501,
                             "UNIMPLEMENTED",
                             "string correlation ID cannot be longer than 128 characters"),
    "shm_unregistered": (request(simple(data=("shm", "no_such_region", 0, 64))), 404,
                         "NOT_FOUND", "no_such_region"),
    "shm_past_region": (request(simple(data=("shm", SHM_REGION, 64, 128))), 400,
                        "INVALID_ARGUMENT", "shared memory"),
    # Triton refuses both (its message says "Output" over HTTP, "output" over gRPC); this check
    # once ran before 'classification' was read, so the request was silently accepted.
    "shm_output_classified": (request([tensor(data=SHM_IN), tensor("INPUT1")],
                                      outputs=[("OUTPUT0", {**SHM_OUT, "classification": 2})]),
                              400, "INVALID_ARGUMENT",
                              "utput can't set both 'shared_memory_region' and 'classification'"),
}


def http_request(r):
    """(path, body, headers) of a neutral request."""
    inputs, blobs = [], []
    for name, datatype, shape, data in r["inputs"]:
        t = {"name": name, "datatype": datatype, "shape": shape}
        if data[0] == "typed":
            t["data"] = data[1]
        elif data[0] == "raw":
            t["parameters"] = {"binary_data_size": len(data[1])}
            blobs.append(data[1])
        else:
            t["parameters"] = {"shared_memory_region": data[1], "shared_memory_offset": data[2],
                               "shared_memory_byte_size": data[3]}
        inputs.append(t)
    body = {"inputs": inputs}
    if r["outputs"]:
        body["outputs"] = [{"name": n, "parameters": p} for n, p in r["outputs"]]
    if r["parameters"]:
        body["parameters"] = r["parameters"]
    text = json.dumps(body).encode()
    headers = {"Inference-Header-Content-Length": str(len(text))} if blobs else {}
    version = f"/versions/{r['version']}" if r["version"] else ""
    return f"/v2/models/{r['model']}{version}/infer", text + b"".join(blobs), headers


def set_parameter(target, key, value):
    if isinstance(value, bool):
        target[key].bool_param = value
    elif isinstance(value, int):
        target[key].int64_param = value
    else:
        target[key].string_param = value


def grpc_request(r):
    from tritonclient.grpc import service_pb2
    m = service_pb2.ModelInferRequest(model_name=r["model"], model_version=r["version"])
    for name, datatype, shape, data in r["inputs"]:
        t = m.inputs.add(name=name, datatype=datatype, shape=shape)
        if data[0] == "typed":
            t.contents.int_contents.extend(data[1])
        elif data[0] == "raw":
            m.raw_input_contents.append(data[1])
        else:
            for key, value in zip(("shared_memory_region", "shared_memory_offset",
                                   "shared_memory_byte_size"), data[1:]):
                set_parameter(t.parameters, key, value)
    for name, params in r["outputs"]:
        o = m.outputs.add(name=name)
        for key, value in params.items():
            set_parameter(o.parameters, key, value)
    for key, value in r["parameters"].items():
        set_parameter(m.parameters, key, value)
    return m


@pytest.fixture(scope="module")
def shm_region(server):
    import tritonclient.utils.shared_memory as shm
    handle = shm.create_shared_memory_region(SHM_REGION, f"/nereid_{SHM_REGION}", 128)
    client = httpclient.InferenceServerClient(server.url)
    client.register_system_shared_memory(SHM_REGION, f"/nereid_{SHM_REGION}", 128)
    yield
    client.unregister_system_shared_memory(SHM_REGION)
    shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case", sorted(NEUTRAL_CASES))
def test_request_rules_hold_on_both_protocols(server, shm_region, case, protocol):
    r, status, code, fragment = NEUTRAL_CASES[case]
    if isinstance(status, dict):
        status = status[protocol]
    if protocol == "http":
        path, body, headers = http_request(r)
        got, data = post(server, path, body, headers)
        assert got == status, data
        message = json.loads(data)["error"]
    else:
        import grpc
        from tritonclient.grpc import service_pb2_grpc
        with grpc.insecure_channel(server.grpc_url) as channel:
            with pytest.raises(grpc.RpcError) as e:
                service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(grpc_request(r))
        assert e.value.code().name == code, e.value.details()
        message = e.value.details()
    if isinstance(fragment, dict):
        fragment = fragment[protocol]
    assert fragment in message, message
    assert_still_serving(server)


# What only the HTTP wire can get wrong.
CASES = {
    "malformed_json": ("simple", '{"inputs": [', {}, 400, "failed to parse"),
    "not_an_object": ("simple", "[1, 2]", {}, 400, "object"),
    "no_inputs": ("simple", "{}", {}, 400, "inputs"),
    "string_for_int": ("simple", inputs_json(data=["x"] * 16), {}, 400, "integer"),
    "bad_encoding": ("simple", GOOD_JSON, {"Content-Encoding": "br"}, 501, "Content-Encoding"),
    "corrupt_gzip": ("simple", b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}, 400, "decompress"),
    "bad_header_length": ("simple", GOOD_JSON, {"Inference-Header-Content-Length": "abc"}, 400,
                          "Inference-Header-Content-Length"),
    "header_length_past_body": ("simple", GOOD_JSON, {"Inference-Header-Content-Length": "100000"}, 400,
                                "Inference-Header-Content-Length"),
    # Triton's limit and words (qa/L0_http test_json_recursion_depth_limit: 50 passes, 120 not).
    "data_nested_past_100": ("identity_int64",
                             json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 1],
                                                     "datatype": "INT64",
                                                     "data": json.loads("[" * 120 + "1" + "]" * 120)}]}),
                             {}, 400, "JSON nesting depth exceeds maximum allowed limit (100)"),
    "duplicate_output": ("simple", json.dumps({**json.loads(GOOD_JSON),
                                               "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}),
                         {}, 400, "output 'OUTPUT0' already exists in request"),
    "shm_and_data": ("simple", inputs_json(parameters={"shared_memory_region": SHM_REGION,
                                                       "shared_memory_byte_size": 64}),
                     {}, 400, "can't set 'shared_memory_region' together with"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_request_gets_clear_error_and_server_keeps_serving(server, shm_region, case):
    model, body, headers, status, fragment = CASES[case]
    got, data = post(server, f"/v2/models/{model}/infer", body, headers)
    assert got == status, data
    assert fragment in json.loads(data)["error"]
    assert_still_serving(server)


def test_data_nested_50_deep_is_served(server):
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT64",
                                   "data": json.loads("[" * 50 + "7" + "]" * 50)}]})
    status, data = post(server, "/v2/models/identity_int64/infer", body)
    assert status == 200, data
    assert json.loads(data)["outputs"][0]["data"] == [7]


def test_repository_index_ready_nested_too_deep_for_the_parser(server):
    """{"ready": [[[...true]]]} 250000 deep: refused for the type of 'ready', as Triton refuses it
    (qa/L0_http test_repository_index_deeply_nested_json), and the server keeps serving."""
    depth = 250000
    status, data = post(server, "/v2/repository/index",
                        '{"ready":' + "[" * depth + "true" + "]" * depth + "}")
    assert status == 400, data
    assert "Invalid value for 'ready': expected a boolean" in json.loads(data)["error"]
    status, data = post(server, "/v2/repository/index", '{"ready": "yes"}')
    assert status == 400 and "expected a boolean" in json.loads(data)["error"]
    status, data = post(server, "/v2/repository/index", '{"x": ' + "[" * 5000 + "]" * 5000 + "}")
    assert status == 400 and "too deep" in json.loads(data)["error"], data
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
