"""The sequence batcher end to end (src/scheduler/sequence_batcher.cc) with ONNX models run by ONNX
Runtime: Triton's control tensors (START, END, READY, CORRID) as the model sees them, implicit state
carried between requests and reset on START (initial state from a file), Direct and Oldest, HTTP,
gRPC and gRPC streaming, integer and string ids, the errors Triton's clients expect, the idle
timeout, statistics that leave padding rows out, and many concurrent sequences."""
import concurrent.futures
import queue
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from conftest import Server
from test_onnxruntime import write_model


def int_io(name, dtype=TensorProto.INT32):
    return helper.make_tensor_value_info(name, dtype, ["b", 1])


CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]"""
IO = """
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def controls_model(repo, name, strategy):
    """OUTPUT = (INPUT + START + END * CORRID) * READY (Triton's simple_dyna_sequence)."""
    nodes = [helper.make_node("Cast", ["CORRID"], ["corrid"], to=TensorProto.INT32),
             helper.make_node("Add", ["INPUT", "START"], ["a"]),
             helper.make_node("Mul", ["END", "corrid"], ["m"]),
             helper.make_node("Add", ["a", "m"], ["s"]),
             helper.make_node("Mul", ["READY", "s"], ["OUTPUT"])]
    write_model(repo, name, nodes,
                [int_io("INPUT"), int_io("START"), int_io("END"), int_io("READY"),
                 int_io("CORRID", TensorProto.UINT64)], [int_io("OUTPUT")],
                f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
                f"sequence_batching {{ {strategy} max_sequence_idle_microseconds: 300000 "
                + CONTROLS % "TYPE_UINT64" + " }" + IO)


def state_model(repo, name, strategy):
    """An accumulator with implicit state: OUTPUT = STATE_OUT = STATE_IN + INPUT; the state starts
    at 100 (initial_state from a file)."""
    nodes = [helper.make_node("Add", ["INPUT", "STATE_IN"], ["OUTPUT"]),
             helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"])]
    write_model(repo, name, nodes, [int_io("INPUT"), int_io("STATE_IN")],
                [int_io("OUTPUT"), int_io("STATE_OUT")],
                f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
                f"sequence_batching {{ {strategy}\n"
                '  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 '
                'dims: [ 1 ] initial_state: [ { data_type: TYPE_INT32 dims: [ 1 ] '
                'data_file: "hundred" name: "start" } ] } ] }' + IO
                + "instance_group [ { kind: KIND_CPU count: 2 } ]\n")
    (repo / name / "initial_state").mkdir()
    (repo / name / "initial_state" / "hundred").write_bytes(np.int32(100).tobytes())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("seq") / "models"
    controls_model(repo, "seq_direct", "direct { }")
    controls_model(repo, "seq_oldest", "oldest { max_candidate_sequences: 64 "
                                       "max_queue_delay_microseconds: 2000 }")
    state_model(repo, "acc_direct", "direct { }")
    state_model(repo, "acc_oldest", "oldest { max_candidate_sequences: 32 }")
    # String ids: CORRID of TYPE_STRING (the model ignores it), and no CORRID at all.
    write_model(repo, "seq_string", [helper.make_node("Add", ["INPUT", "START"], ["OUTPUT"])],
                [int_io("INPUT"), int_io("START"), helper.make_tensor_value_info(
                    "CORRID", TensorProto.STRING, ["b", 1])], [int_io("OUTPUT")],
                'name: "seq_string"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
                "sequence_batching { control_input [ "
                '{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }, '
                '{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ] }'
                + IO)
    s = Server(str(repo))
    yield s
    assert s.stop() == 0, s.read_log()[-3000:]


def one(value):
    return np.full((1, 1), value, dtype=np.int32)


def http_infer(client, model, value, sid, start=False, end=False, **kw):
    x = httpclient.InferInput("INPUT", [1, 1], "INT32")
    x.set_data_from_numpy(one(value))
    r = client.infer(model, [x], sequence_id=sid, sequence_start=start, sequence_end=end, **kw)
    return int(r.as_numpy("OUTPUT")[0, 0])


def grpc_infer(client, model, value, sid, start=False, end=False, **kw):
    x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    x.set_data_from_numpy(one(value))
    r = client.infer(model, [x], sequence_id=sid, sequence_start=start, sequence_end=end, **kw)
    return int(r.as_numpy("OUTPUT")[0, 0])


@pytest.mark.parametrize("model", ["seq_direct", "seq_oldest"])
def test_control_tensors_reach_the_model(server, model):
    h = httpclient.InferenceServerClient(server.url)
    # START adds 1, END adds the correlation id, READY is 1 for every real request.
    assert http_infer(h, model, 10, 42, start=True) == 11
    assert http_infer(h, model, 10, 42) == 10
    assert http_infer(h, model, 10, 42, end=True) == 52
    g = grpcclient.InferenceServerClient(server.grpc_url)
    assert grpc_infer(g, model, 5, 77, start=True, end=True) == 5 + 1 + 77


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_implicit_state_accumulates_and_resets(server, model):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    h = httpclient.InferenceServerClient(server.url)
    assert grpc_infer(g, model, 1, 1000, start=True) == 101  # the initial state file holds 100
    assert http_infer(h, model, 2, 1000) == 103  # both protocols reach the same sequence
    assert grpc_infer(g, model, 3, 1000) == 106
    assert grpc_infer(g, model, 4, 1000, start=True) == 104  # START: the initial state again
    assert grpc_infer(g, model, 0, 1000, end=True) == 104
    # The state output is not in config.pbtxt's outputs: a client may not ask for it.
    x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    x.set_data_from_numpy(one(1))
    with pytest.raises(InferenceServerException, match="unexpected inference output 'STATE_OUT'"):
        g.infer(model, [x], outputs=[grpcclient.InferRequestedOutput("STATE_OUT")],
                sequence_id=1001, sequence_start=True)


def test_streaming_interleaved_sequences(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    results = queue.Queue()
    g.start_stream(callback=lambda result, error: results.put((result, error)))
    values = [3, 1, 4, 1, 5, 9, 2, 6]
    for i, v in enumerate(values):
        for sid in (501, 502):
            x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            x.set_data_from_numpy(one(v if sid == 501 else -v))
            g.async_stream_infer("acc_direct", [x], request_id=f"{sid}_{i}", sequence_id=sid,
                                 sequence_start=i == 0, sequence_end=i == len(values) - 1)
    got = {}
    for _ in range(2 * len(values)):
        result, error = results.get(timeout=10)
        assert error is None, error
        got[result.get_response().id] = int(result.as_numpy("OUTPUT")[0, 0])
    g.stop_stream()
    for i in range(len(values)):
        assert got[f"501_{i}"] == 100 + sum(values[: i + 1])
        assert got[f"502_{i}"] == 100 - sum(values[: i + 1])


def test_string_correlation_ids(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    h = httpclient.InferenceServerClient(server.url)
    assert grpc_infer(g, "seq_string", 7, "session-a", start=True) == 8
    assert http_infer(h, "seq_string", 7, "session-a", end=True) == 7
    # A string id for a model whose CORRID is an integer, and the other way round.
    with pytest.raises(InferenceServerException,
                       match="sequence batching control 'CORRID' data-type is 'BYTES', but model "
                             "'seq_direct' expects 'UINT64'"):
        grpc_infer(g, "seq_direct", 1, "abc", start=True)
    with pytest.raises(InferenceServerException,
                       match="sequence batching control 'CORRID' data-type is 'UINT64', but model "
                             "'seq_string' expects 'BYTES'"):
        grpc_infer(g, "seq_string", 1, 12, start=True)


def test_errors_are_tritons(server):
    h = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as e:
        http_infer(h, "seq_direct", 1, 9999)
    assert e.value.status() == "400"
    assert e.value.message().startswith(
        "inference request for sequence 9999 to model 'seq_direct' must specify the START flag on "
        "the first request of the sequence")
    with pytest.raises(InferenceServerException, match="must specify a non-zero or non-empty "
                                                       "correlation ID"):
        http_infer(h, "seq_direct", 1, 0, start=True)
    x = httpclient.InferInput("INPUT", [2, 1], "INT32")
    x.set_data_from_numpy(np.ones((2, 1), np.int32))
    with pytest.raises(InferenceServerException, match="must specify batch-size 1 due to "
                                                       "requirements of sequence batcher"):
        h.infer("seq_direct", [x], sequence_id=5, sequence_start=True)
    # A sequence that ended needs a new START.
    assert http_infer(h, "seq_direct", 1, 31, start=True, end=True) == 1 + 1 + 31
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        http_infer(h, "seq_direct", 1, 31)


def test_idle_sequence_times_out(server):
    h = httpclient.InferenceServerClient(server.url)
    assert http_infer(h, "seq_oldest", 1, 321, start=True) == 2
    threading.Event().wait(0.8)  # max_sequence_idle_microseconds: 300000
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        http_infer(h, "seq_oldest", 1, 321)


def test_statistics_count_requests_not_padding(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    before = g.get_inference_statistics("acc_direct", as_json=True)["model_stats"][0]
    # Two sequences on two instances x 8 slots: each request runs alone or beside padding.
    for i in range(5):
        grpc_infer(g, "acc_direct", 1, 7001, start=i == 0, end=i == 4)
    after = g.get_inference_statistics("acc_direct", as_json=True)["model_stats"][0]
    assert int(after.get("inference_count", 0)) - int(before.get("inference_count", 0)) == 5
    assert int(after.get("execution_count", 0)) - int(before.get("execution_count", 0)) == 5
    success = int(after["inference_stats"]["success"]["count"]) - int(
        before["inference_stats"]["success"]["count"])
    assert success == 5


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_many_concurrent_sequences_each_accumulate(server, model):
    """64 sequences at once on 2 instances x 8 (Direct) / 32 (Oldest) slots: the rest wait in the
    backlog; every accepted request is answered, and every sequence sees only its own state."""
    steps = 12

    def run(sid):
        g = grpcclient.InferenceServerClient(server.grpc_url)
        total = 100
        for i in range(steps):
            total += sid % 7 + i
            got = grpc_infer(g, model, sid % 7 + i, sid, start=i == 0, end=i == steps - 1)
            assert got == total, (sid, i, got, total)
        return sid

    def counts():
        stats = grpcclient.InferenceServerClient(server.grpc_url).get_inference_statistics(
            model, as_json=True)["model_stats"][0]["inference_stats"]
        return [int(stats.get(k, {}).get("count", 0)) for k in ("success", "fail")]

    before = counts()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        done = list(pool.map(run, range(20000, 20064)))
    assert len(done) == 64
    after = counts()
    assert after[0] - before[0] == 64 * steps
    assert after[1] == before[1]


def test_shutdown_does_not_wait_for_ever_on_held_requests(tmp_path):
    """A gRPC call whose request a model holds (here Triton's TRITONSERVER_DELAY_SCHEDULER hook,
    which forms no batch until 100 requests are queued) must not keep the server from exiting:
    gRPC's Shutdown waits for every call to finish, so past the exit timeout and a grace the
    server exits without them (status 1), as it does for HTTP requests."""
    repo = tmp_path / "models"
    controls_model(repo, "seq_direct", "direct { }")
    s = Server(str(repo), "--exit-timeout-secs=1", env={"TRITONSERVER_DELAY_SCHEDULER": "100"})
    g = grpcclient.InferenceServerClient(s.grpc_url)
    answers = queue.Queue()
    for sid in (1, 2):
        x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(one(1))
        g.async_infer("seq_direct", [x], lambda result, error: answers.put(error),
                      sequence_id=sid, sequence_start=True)
    threading.Event().wait(0.5)
    assert answers.empty()  # held
    assert s.stop() == 1
    with open(s.log_path) as log:
        assert "gRPC calls still waiting for their models; exiting without them" in log.read()
    for _ in range(2):
        assert answers.get(timeout=10) is not None  # each call ended with an error


def test_initial_state_file_shorter_than_the_state_fails_the_load(tmp_path):
    repo = tmp_path / "models"
    state_model(repo, "short_state", "direct { }")
    (repo / "short_state" / "initial_state" / "hundred").write_bytes(b"\x01\x02")
    s = Server(str(repo), "--exit-on-error=false", expect_ready=False)
    try:
        index = {m["name"]: m for m in httpclient.InferenceServerClient(s.url)
                 .get_model_repository_index()}
        assert index["short_state"]["state"] == "UNAVAILABLE"
        assert ("initial_state setting expects 4 bytes, but the data provided from hundredonly has "
                "2 bytes." in index["short_state"]["reason"])  # sic: Triton's words
    finally:
        s.stop()
