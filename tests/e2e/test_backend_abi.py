"""Backend ABI v2 through the real binary and the example backend (examples/backends/repeat): requests
completed from a backend thread after Execute returned, a decoupled model's several responses and
final flag over a gRPC stream, outputs placed in the memory type the backend asked for, request
parameters reaching the backend, and the libraries' exports limited to the ABI."""
import json
import os
import queue
import re
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import BINARY, ROOT, Server

BUILD = os.path.dirname(BINARY)
MEMORY_CPU_PINNED = 1


def repeat_model(repo, name, decoupled=False, memory="CPU_PINNED", batching=True, queue_delay_us=2000):
    d = repo / name
    (d / "1").mkdir(parents=True)
    lines = [f'name: "{name}"', 'backend: "repeat"', f"max_batch_size: {8 if batching else 0}",
             'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]',
             'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] },',
             '         { name: "MEMORY_TYPE" data_type: TYPE_INT32 dims: [ 1 ] },',
             '         { name: "AFTER_EXECUTE" data_type: TYPE_INT32 dims: [ 1 ] } ]',
             f'parameters {{ key: "output_memory" value {{ string_value: "{memory}" }} }}',
             'instance_group [ { kind: KIND_CPU count: 2 } ]']
    if decoupled:
        lines.append("model_transaction_policy { decoupled: true }")
    elif batching:
        lines.append(f"dynamic_batching {{ preferred_batch_size: [ 8 ] "
                     f"max_queue_delay_microseconds: {queue_delay_us} }}")
    (d / "config.pbtxt").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def abi_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("abi") / "models"
    repo_path = repo
    repeat_model(repo_path, "repeat")
    repeat_model(repo_path, "repeat_cpu", memory="CPU")
    repeat_model(repo_path, "repeat_decoupled", decoupled=True, batching=False)
    repeat_model(repo_path, "repeat_slow", queue_delay_us=1500000)  # a lone request waits 1.5 s
    s = Server(str(repo))
    yield s
    assert s.stop() == 0, s.read_log()


def http_inputs(a):
    i = httpclient.InferInput("IN", list(a.shape), "INT32")
    i.set_data_from_numpy(a, binary_data=True)
    return [i]


def grpc_inputs(a):
    i = grpcclient.InferInput("IN", list(a.shape), "INT32")
    i.set_data_from_numpy(a)
    return [i]


def test_async_completion_after_execute_and_pinned_output(abi_server):
    """Every request is completed by the backend's worker thread after Execute returned; OUT was
    allocated where the backend asked (pinned), and with CPU where it asked for CPU."""
    client = httpclient.InferenceServerClient(abi_server.url, concurrency=16)
    arrays = [np.arange(5, dtype=np.int32).reshape(1, 5) + k for k in range(64)]
    pending = [client.async_infer("repeat", http_inputs(a)) for a in arrays]  # batched and not
    for a, p in zip(arrays, pending):
        r = p.get_result()
        np.testing.assert_array_equal(r.as_numpy("OUT"), a)
        assert r.as_numpy("AFTER_EXECUTE").tolist() == [[1]]
        assert r.as_numpy("MEMORY_TYPE").tolist() == [[MEMORY_CPU_PINNED]]
    r = client.infer("repeat_cpu", http_inputs(arrays[0]))
    assert r.as_numpy("MEMORY_TYPE").tolist() == [[0]]
    g = grpcclient.InferenceServerClient(abi_server.grpc_url)
    r = g.infer("repeat", grpc_inputs(arrays[3]))
    np.testing.assert_array_equal(r.as_numpy("OUT"), arrays[3])
    stats = client.get_inference_statistics("repeat")["model_stats"][0]
    assert int(stats["inference_count"]) >= 65


def stream_results(g, model, a, **kwargs):
    results = queue.Queue()
    g.start_stream(callback=lambda result, error: results.put((result, error)))
    g.async_stream_infer(model, grpc_inputs(a), **kwargs)
    return results


def test_decoupled_three_responses_then_final_flag(abi_server):
    g = grpcclient.InferenceServerClient(abi_server.grpc_url)
    a = np.array([1, 2, 3], dtype=np.int32)
    results = stream_results(g, "repeat_decoupled", a, request_id="d1",
                             enable_empty_final_response=True)
    got = [results.get(timeout=30) for _ in range(4)]
    g.stop_stream()
    assert all(e is None for _, e in got), [str(e) for _, e in got]
    responses = [r.get_response() for r, _ in got]
    assert [r.id for r in responses] == ["d1"] * 4
    finals = [r.parameters["triton_final_response"].bool_param for r in responses]
    assert finals == [False, False, False, True]
    for k, (r, _) in enumerate(got[:3], start=1):
        np.testing.assert_array_equal(r.as_numpy("OUT"), a * k)
    assert len(responses[3].outputs) == 0  # the final one carries only the flag


def test_decoupled_request_parameter_and_no_empty_final_by_default(abi_server):
    """A request parameter reaches the backend (repeat=5); without
    triton_enable_empty_final_response the flag-only final response is not sent."""
    g = grpcclient.InferenceServerClient(abi_server.grpc_url)
    a = np.array([7], dtype=np.int32)
    results = stream_results(g, "repeat_decoupled", a, request_id="d2", parameters={"repeat": 5})
    got = [results.get(timeout=30) for _ in range(5)]
    with pytest.raises(queue.Empty):
        results.get(timeout=1)
    g.stop_stream()
    assert [int(r.as_numpy("OUT")[0]) for r, _ in got] == [7, 14, 21, 28, 35]


def test_decoupled_model_refused_on_http_and_unary_grpc(abi_server):
    client = httpclient.InferenceServerClient(abi_server.url)
    with pytest.raises(InferenceServerException, match="HTTP end point doesn't support models with "
                                                       "decoupled transaction policy"):
        client.infer("repeat_decoupled", http_inputs(np.array([1], dtype=np.int32)))
    g = grpcclient.InferenceServerClient(abi_server.grpc_url)
    with pytest.raises(InferenceServerException, match="ModelInfer RPC doesn't support models"):
        g.infer("repeat_decoupled", grpc_inputs(np.array([1], dtype=np.int32)))


def test_unload_waits_for_backend_held_requests(tmp_path):
    """Unloading while the backend's worker still holds requests: each of them is answered, then
    the instance is finalized (the server never finalizes under an outstanding request)."""
    repo = tmp_path / "models"
    repeat_model(repo, "repeat")
    s = Server(str(repo), "--model-control-mode=explicit", "--load-model=repeat")
    try:
        client = httpclient.InferenceServerClient(s.url, concurrency=32)
        a = np.arange(1000, dtype=np.int32).reshape(1, 1000)
        pending = [client.async_infer("repeat", http_inputs(a)) for _ in range(200)]
        deadline = time.time() + 30
        while s.accepted("repeat") < 8:  # the backend holds requests when the unload comes
            assert time.time() < deadline
            time.sleep(0.005)
        accepted = s.accepted("repeat")
        control = grpcclient.InferenceServerClient(s.grpc_url)
        control.unload_model("repeat")
        answered = 0
        for p in pending:
            try:
                np.testing.assert_array_equal(p.get_result().as_numpy("OUT"), a)
                answered += 1
            except InferenceServerException as e:  # arrived after the unload: refused, not lost
                assert "unknown model" in str(e) or "unavailable" in str(e).lower(), str(e)
        assert answered >= accepted, (answered, accepted)  # none accepted before it was lost
    finally:
        assert s.stop() == 0, s.read_log()


def exported(path):
    out = subprocess.check_output(["nm", "-D", "--defined-only", path], text=True)
    return sorted({line.split()[-1] for line in out.splitlines() if line.strip()})


def test_backend_libraries_export_only_the_abi():
    for lib in ("libnereid_backend_native.so", "libnereid_backend_repeat.so",
                "libnereid_backend_onnxruntime.so", "libnereid_backend_python.so"):
        names = exported(os.path.join(BUILD, "backends", lib))
        assert names and all(n.startswith("Nereid") for n in names), (lib, names)
    server_names = [n for n in exported(BINARY) if n.startswith("Nereid")]
    assert "NereidRequestComplete" in server_names and "NereidServerApiVersion" in server_names
    assert not any(n.startswith("_ZN6nereid") for n in exported(BINARY))  # no server internals


def test_native_backend_compiles_against_include_only():
    commands = json.load(open(os.path.join(BUILD, "compile_commands.json")))
    src = os.path.join(ROOT, "src")
    # The backends' own sources (not their tests: tests/unit/backends/ mirrors them and may reach
    # anything).
    engine = [c for c in commands
              if any(os.path.abspath(c["file"]).startswith(os.path.join(ROOT, d) + os.sep) for d in (
                  os.path.join("backends", "native"), os.path.join("backends", "onnxruntime"),
                  os.path.join("examples", "backends")))]
    assert len(engine) >= 6
    for c in engine:
        flags = c.get("command") or " ".join(c.get("arguments", []))
        assert f"-I{src} " not in flags + " " and f"-isystem {src} " not in flags + " ", c["file"]


def canceled_count(server, model):
    text = urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics").read().decode()
    m = re.search(r'^nv_inference_request_failure\{model="%s",version="1",reason="CANCELED"\} (\d+)$'
                  % model, text, re.M)
    return int(m.group(1)) if m else 0


def test_requests_of_clients_that_left_are_cancelled_not_computed(abi_server):
    """A request whose client went away while it waited in the queue is dropped at execution time
    (NereidRequestIsCancelled; counted as CANCELED), over HTTP (the client closed its connection)
    and gRPC (the client's deadline passed)."""
    before = canceled_count(abi_server, "repeat_slow")
    body = json.dumps({"inputs": [{"name": "IN", "shape": [1, 2], "datatype": "INT32",
                                   "data": [1, 2]}]}).encode()
    with socket.create_connection(("127.0.0.1", abi_server.port)) as s:
        s.sendall(b"POST /v2/models/repeat_slow/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    g = grpcclient.InferenceServerClient(abi_server.grpc_url)
    with pytest.raises(InferenceServerException, match="Deadline"):
        g.infer("repeat_slow", grpc_inputs(np.array([[1, 2]], dtype=np.int32)), client_timeout=0.3)
    deadline = time.time() + 10
    while canceled_count(abi_server, "repeat_slow") < before + 2:
        assert time.time() < deadline, abi_server.read_log()[-2000:]
        time.sleep(0.2)
    # A client that stays gets its answer from the same model.
    client = httpclient.InferenceServerClient(abi_server.url)
    r = client.infer("repeat_slow", http_inputs(np.array([[5, 6]], dtype=np.int32)))
    np.testing.assert_array_equal(r.as_numpy("OUT"), [[5, 6]])
