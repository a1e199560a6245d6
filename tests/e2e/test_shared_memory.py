"""The system shared-memory extension with Triton's own client calls, unchanged, over HTTP and gRPC:
register/status/unregister, inputs read from and outputs written into registered regions (with
offsets), and clear errors for unknown regions, bad offsets and sizes, bad keys and regions too
small for the output."""
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from conftest import Server

PROTOCOLS = ["http", "grpc"]


def make_client(server, protocol):
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(server.url)
    return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)


@pytest.fixture()
def regions(request):
    """An input region holding INPUT0 and INPUT1 back to back (as Triton's simple shm example),
    and an output region for both outputs; removed afterwards."""
    tag = request.node.name.replace("[", "_").replace("]", "")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inp = shm.create_shared_memory_region(f"in_{tag}", f"/nereid_in_{tag}", 128)
    out = shm.create_shared_memory_region(f"out_{tag}", f"/nereid_out_{tag}", 128)
    shm.set_shared_memory_region(inp, [a, b])
    yield tag, a, b, inp, out
    shm.destroy_shared_memory_region(inp)
    shm.destroy_shared_memory_region(out)


def simple_request(module, tag, out_size=64):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(f"in_{tag}", 64)
    inputs[1].set_shared_memory(f"in_{tag}", 64, offset=64)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(f"out_{tag}", out_size)
    outputs[1].set_shared_memory(f"out_{tag}", 64, offset=64)
    return inputs, outputs


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_inputs_and_outputs_in_shared_memory(server, regions, protocol):
    module, client = make_client(server, protocol)
    tag, a, b, inp, out = regions
    client.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128)
    client.register_system_shared_memory(f"out_{tag}", f"/nereid_out_{tag}", 128)
    try:
        status = client.get_system_shared_memory_status()
        names = ([r["name"] for r in status] if protocol == "http" else list(status.regions))
        assert f"in_{tag}" in names and f"out_{tag}" in names
        inputs, outputs = simple_request(module, tag)
        result = client.infer("simple", inputs, outputs=outputs)
        # The outputs went into the region, not the response.
        out0 = result.get_output("OUTPUT0")
        shape = out0["shape"] if protocol == "http" else list(out0.shape)
        assert shape == [1, 16]
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.int32, [1, 16]), a + b)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.int32, [1, 16], offset=64),
                                      a - b)
        # New input values in the region are picked up by the next request.
        shm.set_shared_memory_region(inp, [a * 2])
        client.infer("simple", inputs, outputs=outputs)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.int32, [1, 16]), 2 * a + b)
    finally:
        client.unregister_system_shared_memory()
    status = client.get_system_shared_memory_status()
    assert len(status if protocol == "http" else status.regions) == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_shared_memory_errors_are_clear(server, regions, protocol):
    module, client = make_client(server, protocol)
    tag, a, b, inp, out = regions
    with pytest.raises(InferenceServerException, match="Unable to open shared memory region"):
        client.register_system_shared_memory("nope", "/nereid_no_such_key", 64)
    with pytest.raises(InferenceServerException, match="invalid args"):
        client.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 4096)  # past its end
    with pytest.raises(InferenceServerException, match="invalid shm key"):
        client.register_system_shared_memory("bad", "/../etc/passwd", 64)
    with pytest.raises(InferenceServerException, match="Unable to find system shared memory region"):
        client.get_system_shared_memory_status("never_registered")
    client.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128)
    client.register_system_shared_memory(f"out_{tag}", f"/nereid_out_{tag}", 128)
    try:
        with pytest.raises(InferenceServerException, match="already in manager"):
            client.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128)
        inputs, outputs = simple_request(module, tag)
        inputs[1].set_shared_memory(f"in_{tag}", 64, offset=128)  # starts past the region
        with pytest.raises(InferenceServerException, match="Invalid offset for shared memory region"):
            client.infer("simple", inputs, outputs=outputs)
        inputs, outputs = simple_request(module, tag)
        inputs[1].set_shared_memory(f"in_{tag}", 64, offset=100)  # runs past its end
        with pytest.raises(InferenceServerException, match="Invalid offset \\+ byte size"):
            client.infer("simple", inputs, outputs=outputs)
        inputs, outputs = simple_request(module, tag)
        inputs[0].set_shared_memory(f"in_{tag}", 60)  # not the 64 bytes the shape needs
        with pytest.raises(InferenceServerException, match="INPUT0"):
            client.infer("simple", inputs, outputs=outputs)
        inputs, outputs = simple_request(module, tag, out_size=32)  # OUTPUT0 needs 64 bytes
        with pytest.raises(InferenceServerException, match="should be at least 64 bytes"):
            client.infer("simple", inputs, outputs=outputs)
        inputs, outputs = simple_request(module, tag)
        inputs[0].set_shared_memory("not_registered", 64)
        with pytest.raises(InferenceServerException, match="Unable to find shared memory region"):
            client.infer("simple", inputs, outputs=outputs)
        # After all that, the regions still serve.
        inputs, outputs = simple_request(module, tag)
        client.infer("simple", inputs, outputs=outputs)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.int32, [1, 16]), a + b)
    finally:
        client.unregister_system_shared_memory(f"in_{tag}")
        client.unregister_system_shared_memory(f"out_{tag}")
    inputs, outputs = simple_request(module, tag)
    with pytest.raises(InferenceServerException, match="Unable to find shared memory region"):
        client.infer("simple", inputs, outputs=outputs)


def test_shared_memory_input_json_output(server, regions):
    """An input from shared memory, the output back in the response (JSON)."""
    client = httpclient.InferenceServerClient(server.url)
    tag, a, b, inp, out = regions
    client.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128)
    try:
        inputs, _ = simple_request(httpclient, tag)
        result = client.infer("simple", inputs, outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    finally:
        client.unregister_system_shared_memory()


def test_region_shrunk_after_registering_is_refused_not_a_crash(server, regions):
    """A client that truncates its shared-memory object after registering it: reading the mapping
    would fault (SIGBUS); the server checks the object's size before using it and refuses."""
    client = httpclient.InferenceServerClient(server.url)
    tag, a, b, inp, out = regions
    client.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128)
    try:
        os.truncate(f"/dev/shm/nereid_in_{tag}", 0)
        inputs, _ = simple_request(httpclient, tag)
        with pytest.raises(InferenceServerException, match="shrank after it was registered"):
            client.infer("simple", inputs)
        assert client.is_server_live()
    finally:
        client.unregister_system_shared_memory()


# ---- CUDA shared memory: what runs without a GPU (the device run covers the data path in
# tests/e2e/test_gpu.py) ----

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cuda_shared_memory_registration_errors_are_clear(server, protocol):
    import base64
    module, client = make_client(server, protocol)
    handle = base64.b64encode(bytes(range(64)))  # what cuda_shared_memory.get_raw_handle returns
    # No region yet: status of one is 404 / NOT_FOUND, of all an empty list; unregister succeeds.
    with pytest.raises(InferenceServerException, match="Unable to find cuda shared memory region: 'nope'"):
        client.get_cuda_shared_memory_status("nope")
    status = client.get_cuda_shared_memory_status()
    assert (status if protocol == "http" else list(status.regions)) == []
    client.unregister_cuda_shared_memory("nope")
    client.unregister_cuda_shared_memory()
    # A handle that does not name a device allocation on this machine (here: no GPU at all, or
    # bytes that are not a live handle) is refused with the reason; nothing is registered.
    with pytest.raises(InferenceServerException, match="failed to register CUDA shared memory region 'r'"):
        client.register_cuda_shared_memory("r", handle, 0, 64)
    with pytest.raises(InferenceServerException, match="does not exist"):
        client.register_cuda_shared_memory("r", handle, 7, 64)
    # A handle of the wrong length is refused before the driver sees it.
    with pytest.raises(InferenceServerException, match="64 bytes of a cudaIpcMemHandle_t, got 3"):
        client.register_cuda_shared_memory("r", base64.b64encode(b"abc"), 0, 64)
    with pytest.raises(InferenceServerException, match="byte_size must be positive"):
        client.register_cuda_shared_memory("r", handle, 0, 0)
    status = client.get_cuda_shared_memory_status()
    assert (status if protocol == "http" else list(status.regions)) == []


def test_cuda_shared_memory_register_body_is_checked(server):
    import json
    import urllib.error
    import urllib.request

    def post(body):
        req = urllib.request.Request(f"http://{server.url}/v2/cudasharedmemory/region/x/register",
                                     data=body.encode(), method="POST")
        try:
            urllib.request.urlopen(req)
            return 200, ""
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())["error"]

    assert post('{"raw_handle": {"b64": "!!!!"}, "device_id": 0, "byte_size": 4}') == (
        400, "'raw_handle.b64' is not valid base64")
    # Triton's C++ client and perf_analyzer encode the handle with libb64: a line break after 72
    # characters and one at the end. It decodes; the bytes are then refused as no live handle.
    import base64
    b64 = base64.b64encode(bytes(range(64))).decode()
    code, error = post(json.dumps({"raw_handle": {"b64": b64[:72] + "\n" + b64[72:] + "\n"},
                                   "device_id": 0, "byte_size": 64}))
    assert "base64" not in error and "failed to register CUDA shared memory region 'x'" in error, error
    code, error = post('{"raw_handle": "AAAA", "device_id": 0, "byte_size": 4}')
    assert code == 400 and "raw_handle" in error
    code, error = post('{"raw_handle": {"b64": "AAAA"}, "byte_size": 4}')
    assert code == 400 and "device_id" in error
    code, error = post('{"raw_handle": {"b64": "AAAA"}, "device_id": -1, "byte_size": 4}')
    assert code == 400, error
    code, error = post('[1, 2]')
    assert code == 400, error


def test_an_output_region_overlapping_an_input_region_gives_the_right_answer(tmp_path):
    """ONNX Runtime writes outputs during the run: an output placed over the input's bytes would
    clobber them before the second node reads them. The server writes such an output to a buffer
    of its own and copies it into the region afterwards, as Triton does."""
    from onnx import TensorProto, helper
    repo = tmp_path / "models"
    (repo / "neg_and_double" / "1").mkdir(parents=True)
    graph = helper.make_graph(
        # DOUBLE = 2 (X + (NEG - NEG)): X is read again after NEG is written.
        [helper.make_node("Neg", ["X"], ["NEG"]), helper.make_node("Sub", ["NEG", "NEG"], ["ZERO"]),
         helper.make_node("Add", ["X", "ZERO"], ["XZ"]),
         helper.make_node("Add", ["XZ", "XZ"], ["DOUBLE"])],
        "neg_and_double", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("NEG", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("DOUBLE", TensorProto.FLOAT, [8])])
    (repo / "neg_and_double" / "1" / "model.onnx").write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    (repo / "neg_and_double" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n')
    s = Server(str(repo))
    x = np.arange(1, 9, dtype=np.float32)
    region = shm.create_shared_memory_region("overlap", "/nereid_overlap", 64)
    try:
        client = httpclient.InferenceServerClient(s.url)
        client.register_system_shared_memory("overlap", "/nereid_overlap", 64)
        for _ in range(3):
            shm.set_shared_memory_region(region, [x])
            inp = httpclient.InferInput("X", [8], "FP32")
            inp.set_shared_memory("overlap", 32)
            neg, double = httpclient.InferRequestedOutput("NEG"), httpclient.InferRequestedOutput("DOUBLE")
            neg.set_shared_memory("overlap", 32)            # over the input itself
            double.set_shared_memory("overlap", 32, offset=32)
            client.infer("neg_and_double", [inp], outputs=[neg, double])
            np.testing.assert_array_equal(shm.get_contents_as_numpy(region, np.float32, [8]), -x)
            np.testing.assert_array_equal(
                shm.get_contents_as_numpy(region, np.float32, [8], offset=32), 2 * x)
        client.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(region)
        assert s.stop() == 0, s.read_log()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_one_input_in_shared_memory_and_one_sent_with_the_request(server, regions, protocol):
    """tritonclient sends no raw_input_contents for an input in shared memory, so the raw entries
    belong, in order, to the other inputs (Triton's rule); gRPC used to refuse this request with
    "expected 2 raw_input_contents (one per input), got 1"."""
    module, client = make_client(server, protocol)
    tag, a, b, inp, out = regions
    client.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128)
    try:
        sent = np.full((1, 16), 5, dtype=np.int32)
        for in_region in ("INPUT0", "INPUT1"):
            inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for i in inputs:
                if i.name() == in_region:
                    i.set_shared_memory(f"in_{tag}", 64, offset=0 if in_region == "INPUT0" else 64)
                else:
                    i.set_data_from_numpy(sent)
            result = client.infer("simple", inputs)
            x, y = (a, sent) if in_region == "INPUT0" else (sent, b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + y)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), x - y)
    finally:
        client.unregister_system_shared_memory()


def test_client_shared_memory_is_off_unless_the_flag_allows_it(repository, regions):
    """Triton 2.69's default: without --allow-client-shm=true a client may not register or
    unregister regions (UNSUPPORTED, Triton's words: HTTP 501, gRPC UNIMPLEMENTED), so a request
    cannot name one; the status calls still answer, and the rest of the server serves."""
    tag = regions[0]
    message = ("Client shared memory is disabled. Start the server with "
               "'--allow-client-shm=true' to enable.")
    s = Server(repository, client_shm=False)
    try:
        assert "client shared memory disabled" in s.read_log()
        h = httpclient.InferenceServerClient(s.url)
        g = grpcclient.InferenceServerClient(s.grpc_url)
        for call in (lambda: h.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128),
                     lambda: h.unregister_system_shared_memory(),
                     lambda: h.register_cuda_shared_memory("c", b"\0" * 64, 0, 64),
                     lambda: h.unregister_cuda_shared_memory("c")):
            with pytest.raises(InferenceServerException) as e:
                call()
            assert message in str(e.value) and e.value.status() == "501", str(e.value)
        for call in (lambda: g.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128),
                     lambda: g.unregister_cuda_shared_memory()):
            with pytest.raises(InferenceServerException) as e:
                call()
            assert message in str(e.value) and "UNIMPLEMENTED" in str(e.value.status()), str(e.value)
        assert h.get_system_shared_memory_status() == []
        assert len(g.get_system_shared_memory_status().regions) == 0
        inputs, outputs = simple_request(httpclient, tag)
        with pytest.raises(InferenceServerException, match="shared memory region"):
            h.infer("simple", inputs, outputs=outputs)
        assert h.is_server_ready()
    finally:
        assert s.stop() == 0, s.read_log()
    # With the flag, Triton's shm client examples' calls work (the tests above use it too).
    s = Server(repository, "--allow-client-shm=true", client_shm=False)
    try:
        h = httpclient.InferenceServerClient(s.url)
        assert "client shared memory allowed" in s.read_log()
        h.register_system_shared_memory(f"in_{tag}", f"/nereid_in_{tag}", 128)
        assert len(h.get_system_shared_memory_status()) == 1
        h.unregister_system_shared_memory()
    finally:
        assert s.stop() == 0, s.read_log()
