"""Inference through tritonclient.http: the example models, every datatype in JSON and binary,
classification, compression, raw binary requests and many requests in flight."""
import http.client
import json
import os
import threading

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import numpy_helper

from conftest import Server
from models import DATATYPES, identity_name


def infer_simple(client, a, b, binary, **kwargs):
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        i = httpclient.InferInput(name, list(data.shape), "INT32")
        i.set_data_from_numpy(data, binary_data=binary)
        inputs.append(i)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    return client.infer("simple", inputs, outputs=outputs, **kwargs)


@pytest.mark.parametrize("binary", [True, False])
def test_simple(client, binary):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    r = infer_simple(client, a, b, binary, request_id="req-1")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert r.get_response()["id"] == "req-1" and r.get_response()["model_version"] == "1"


def weights(repository, model):
    m = onnx.load(os.path.join(repository, model, "1", "model.onnx"))
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def recommend_reference(w, x):
    h = x
    for i in range(3):
        h = h @ w[f"fc{i}.weight"].T + w[f"fc{i}.bias"]
        if i < 2:
            h = np.maximum(h, 0)
    return 1 / (1 + np.exp(-h))


# Batch sizes 1-4 run the small-row paths on packed weights, 5 and up the blocked GEMM with its
# partial panels.
@pytest.mark.parametrize("binary,rows", [(True, 5), (False, 5), (True, 1), (True, 2), (True, 3), (True, 4), (True, 17)])
def test_recommend_model_matches_numpy(client, repository, binary, rows):
    x = np.random.default_rng(rows).standard_normal((rows, 1024)).astype(np.float32)
    i = httpclient.InferInput("input__0", [rows, 1024], "FP32")
    i.set_data_from_numpy(x, binary_data=binary)
    r = client.infer("recommend_model", [i], outputs=[httpclient.InferRequestedOutput("output__0", binary_data=binary)])
    np.testing.assert_allclose(r.as_numpy("output__0"), recommend_reference(weights(repository, "recommend_model"), x),
                               rtol=1e-4, atol=1e-5)


def test_matmul_model_matches_numpy(client, repository):
    x = np.random.default_rng(2).standard_normal((3, 1024)).astype(np.float32)
    i = httpclient.InferInput("input__0", [3, 1024], "FP32")
    i.set_data_from_numpy(x)
    r = client.infer("matmul_model", [i])
    np.testing.assert_allclose(r.as_numpy("output__0"), x @ weights(repository, "matmul_model")["weight"],
                               rtol=1e-4, atol=1e-4)


def test_classification_with_labels(client, repository):
    x = np.random.default_rng(3).standard_normal((2, 1024)).astype(np.float32)
    i = httpclient.InferInput("input__0", [2, 1024], "FP32")
    i.set_data_from_numpy(x)
    r = client.infer("recommend_model", [i], outputs=[httpclient.InferRequestedOutput("output__0", class_count=4)])
    got = r.as_numpy("output__0")
    assert got.shape == (2, 4)
    scores = recommend_reference(weights(repository, "recommend_model"), x)
    for row in range(2):
        top = np.argsort(-scores[row])[:4]
        for k, entry in enumerate(got[row]):
            value, index, label = entry.decode().split(":")
            assert int(index) == top[k] and label == f"item_{top[k]}"
            assert abs(float(value) - scores[row, top[k]]) < 1e-5


def sample(datatype, shape):
    rng = np.random.default_rng(4)
    if datatype == "BOOL":
        return rng.integers(0, 2, shape).astype(bool)
    if datatype == "BYTES":
        return np.array([[f"s{i}-{j}".encode() * (j + 1) for j in range(shape[1])] for i in range(shape[0])],
                        dtype=np.object_)
    if datatype in ("FP16", "FP32", "FP64"):
        return rng.standard_normal(shape).astype({"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}[datatype])
    if datatype == "BF16":
        import ml_dtypes
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    info = np.iinfo(np.dtype(datatype.lower()))
    return rng.integers(info.min, info.max, shape, dtype=np.dtype(datatype.lower()), endpoint=True)


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_every_datatype_round_trips(client, datatype, binary):
    if datatype == "BF16" and not binary:
        pytest.skip("tritonclient sends BF16 only as binary data")
    data = sample(datatype, (2, 5))
    i = httpclient.InferInput("INPUT0", [2, 5], datatype)
    i.set_data_from_numpy(data, binary_data=binary)
    r = client.infer(identity_name(datatype), [i],
                     outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    out = r.as_numpy("OUTPUT0")
    if datatype == "BYTES" and not binary:
        # JSON carries BYTES as strings, and the client hands them back as str (as with Triton).
        np.testing.assert_array_equal(out, np.vectorize(bytes.decode, otypes=[object])(data))
    else:
        np.testing.assert_array_equal(out, data)
    assert r.get_output("OUTPUT0")["datatype"] == datatype


@pytest.mark.parametrize("request_alg,response_alg", [("gzip", None), ("deflate", "gzip"), (None, "deflate"),
                                                      ("gzip", "deflate")])
def test_compression(client, request_alg, response_alg):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    r = infer_simple(client, a, a, True, request_compression_algorithm=request_alg,
                     response_compression_algorithm=response_alg)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)


def test_raw_binary_request(server):
    x = np.random.default_rng(5).standard_normal((2, 1024)).astype(np.float32)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/v2/models/matmul_model/infer", body=x.tobytes(),
                 headers={"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"})
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200, body
    header_len = int(r.getheader("Inference-Header-Content-Length"))
    header = json.loads(body[:header_len])
    assert header["outputs"][0]["shape"] == [2, 1024]
    out = np.frombuffer(body[header_len:], dtype=np.float32).reshape(2, 1024)
    assert np.isfinite(out).all()


def _identity_model(repo, name, onnx_type, config_type, dims, count=1):
    """An identity model of 'count' inputs INPUTi -> OUTPUTi with config dims 'dims' (batching on)."""
    from onnx import helper
    shape = ["batch"] + [d if d > 0 else f"d{i}" for i, d in enumerate(dims)]
    nodes = [helper.make_node("Identity", [f"INPUT{i}"], [f"OUTPUT{i}"]) for i in range(count)]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(f"INPUT{i}", onnx_type, shape) for i in range(count)],
        [helper.make_tensor_value_info(f"OUTPUT{i}", onnx_type, shape) for i in range(count)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    os.makedirs(os.path.join(repo, name, "1"))
    onnx.save(model, os.path.join(repo, name, "1", "model.onnx"))
    d = ", ".join(str(x) for x in dims)
    io = lambda kind, i: f'{{ name: "{kind}{i}" data_type: {config_type} dims: [ {d} ] }}'  # noqa: E731
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
                f'input [ {", ".join(io("INPUT", i) for i in range(count))} ]\n'
                f'output [ {", ".join(io("OUTPUT", i) for i in range(count))} ]\n')


def test_raw_binary_body_is_shaped_as_triton_shapes_it(tmp_path):
    """Triton's qa/L0_http raw-binary cases (Inference-Header-Content-Length: 0), on models built as
    its onnx_zero_* ones are: batch dimension 1, the one variable dimension from the size, a BYTES
    input only for one element, and Triton's messages for the rest."""
    from onnx import TensorProto
    repo = str(tmp_path / "models")
    _identity_model(repo, "zero_1_float32", TensorProto.FLOAT, "TYPE_FP32", [-1])
    _identity_model(repo, "zero_1_object", TensorProto.STRING, "TYPE_STRING", [-1])
    _identity_model(repo, "zero_1_object_1_element", TensorProto.STRING, "TYPE_STRING", [1])
    _identity_model(repo, "zero_1_float16", TensorProto.FLOAT16, "TYPE_FP16", [-1, -1])
    _identity_model(repo, "zero_3_float32", TensorProto.FLOAT, "TYPE_FP32", [-1], count=3)
    s = Server(repo)

    def post(model, body):
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        conn.request("POST", f"/v2/models/{model}/infer", body=body,
                     headers={"Inference-Header-Content-Length": "0"})
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, r.getheader("Inference-Header-Content-Length"), data

    try:
        for n in (8, 32):
            x = np.arange(n, dtype=np.float32).tobytes()
            status, header_len, data = post("zero_1_float32", x)
            assert status == 200, data
            header = json.loads(data[:int(header_len)])
            assert header["outputs"][0]["shape"] == [1, n]
            assert data[int(header_len):] == x
        status, header_len, data = post("zero_1_object_1_element", b"427")
        assert status == 200, data
        assert json.loads(data[:int(header_len)])["outputs"][0]["shape"] == [1, 1]
        assert data[int(header_len) + 4:] == b"427"  # BYTES come back length-prefixed
        for model, body, message in (
                ("zero_1_object", b"427",
                 "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"),
                ("zero_1_float16", np.ones([2, 2], np.float16).tobytes(),
                 "The shape of the raw input 'INPUT0' can not be deduced because there are more "
                 "than one variable-sized dimension"),
                ("zero_3_float32", np.arange(24, dtype=np.float32).tobytes(),
                 "Raw request must only have 1 input (found 1) to be deduced but got 3 inputs in")):
            status, _, data = post(model, body)
            assert status == 400 and message in json.loads(data)["error"], (model, data)
    finally:
        assert s.stop() == 0


def test_async_infer_many_in_flight(client):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    pending = []
    for k in range(64):
        inputs = []
        for name, data in (("INPUT0", a + k), ("INPUT1", a)):
            i = httpclient.InferInput(name, [1, 16], "INT32")
            i.set_data_from_numpy(data)
            inputs.append(i)
        pending.append((k, client.async_infer("simple", inputs, request_id=str(k))))
    for k, req in pending:
        r = req.get_result(timeout=60)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a + k)
        assert r.get_response()["id"] == str(k)


def test_many_connections_at_once(server):
    errors = []

    def worker(seed):
        try:
            c = httpclient.InferenceServerClient(server.url)
            a = np.full((1, 16), seed, dtype=np.int32)
            for _ in range(20):
                r = infer_simple(c, a, a, True)
                assert (r.as_numpy("OUTPUT0") == 2 * seed).all()
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_bytes_json_output_is_strings(server):
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "BYTES", "data": ["a", "bc"]}],
                       "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/v2/models/identity_bytes/infer", body=body)
    r = conn.getresponse()
    out = json.loads(r.read())
    assert r.status == 200
    assert out["outputs"][0]["data"] == ["a", "bc"]


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])


# Every SGEMM micro-kernel this CPU runs, forced with NEREID_SGEMM_KERNEL in the real server: the log
# names it, and recommend_model (Gemm + fused activations on packed weights) and matmul_model still
# match numpy at batch sizes that take the small-row path, full panels and partial panels.
@pytest.mark.parametrize("kernel,flags", [("portable-6x16", []), ("avx2-fma-6x16", ["avx2", "fma"]),
                                          ("avx512-12x32", ["avx512f", "avx2", "fma"])])
def test_every_sgemm_kernel_serves_correct_results(repository, kernel, flags):
    if not set(flags) <= set(cpu_flags()):
        pytest.skip(f"this CPU lacks {flags}")
    s = Server(repository, env={"NEREID_SGEMM_KERNEL": kernel})
    try:
        c = httpclient.InferenceServerClient(s.url)
        for rows in (1, 3, 13, 32):
            x = np.random.default_rng(rows).standard_normal((rows, 1024)).astype(np.float32)
            i = httpclient.InferInput("input__0", [rows, 1024], "FP32")
            i.set_data_from_numpy(x)
            r = c.infer("recommend_model", [i])
            np.testing.assert_allclose(r.as_numpy("output__0"),
                                       recommend_reference(weights(repository, "recommend_model"), x),
                                       rtol=1e-4, atol=1e-5, err_msg=f"{kernel}, {rows} rows")
            r = c.infer("matmul_model", [i])
            np.testing.assert_allclose(r.as_numpy("output__0"), x @ weights(repository, "matmul_model")["weight"],
                                       rtol=1e-4, atol=1e-4, err_msg=f"{kernel}, {rows} rows")
        assert f"SGEMM micro-kernel {kernel}" in s.read_log()
    finally:
        assert s.stop() == 0, s.read_log()
