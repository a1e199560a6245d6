"""Ensembles with a decoupled step (Triton's rule): each response of the decoupled step is an
iteration of its outputs, the steps after it run once per iteration, the ensemble is decoupled
itself and answers once per iteration, then with the final flag; max_inflight_requests bounds the
step requests of one step in flight."""
import queue
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Server
from test_backend_abi import repeat_model

# The second step reports how many of its executions were running at once when it started (a
# counter in a locked file shared by its instances' processes), taking 100 ms each.
PROBE_PY = '''
import fcntl
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.path = os.path.join(args["model_repository"], "running")

    def add(self, d):
        with open(self.path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            n = int(f.read() or 0) + d
            f.seek(0)
            f.truncate()
            f.write(str(n))
            return n

    def execute(self, requests):
        responses = []
        for r in requests:
            n = self.add(1)
            time.sleep(0.1)
            self.add(-1)
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x), pb_utils.Tensor("RUNNING", np.array([n], np.int32))]))
        return responses
'''

PROBE = """
name: "probe"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "RUNNING" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 4 } ]
"""

# repeat_decoupled (3 responses by default: IN * 1, 2, 3) feeding repeat (one response, IN * 1).
STREAM = """
name: "stream"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "repeat_decoupled" model_version: -1
    input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "many" } },
  { model_name: "repeat_plain" model_version: -1
    input_map { key: "IN" value: "many" } output_map { key: "OUT" value: "Y" } }
] }
"""

LIMITED = """
name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ -1 ] }},
         {{ name: "RUNNING" data_type: TYPE_INT32 dims: [ 1 ] }} ]
ensemble_scheduling {{ {limit} step [
  {{ model_name: "repeat_decoupled" model_version: -1
     input_map {{ key: "IN" value: "X" }} output_map {{ key: "OUT" value: "many" }} }},
  {{ model_name: "probe" model_version: -1
     input_map {{ key: "IN" value: "many" }}
     output_map {{ key: "OUT" value: "Y" }} output_map {{ key: "RUNNING" value: "RUNNING" }} }}
] }}
"""


def write(repo, name, config, files=None):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    for path, text in (files or {}).items():
        (repo / name / "1" / path).write_text(text)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("decoupled_ensemble") / "models"
    repeat_model(repo, "repeat_decoupled", decoupled=True, batching=False)
    repeat_model(repo, "repeat_plain", batching=False)
    write(repo, "stream", STREAM)
    write(repo, "probe", PROBE, {"model.py": PROBE_PY})
    write(repo, "limited", LIMITED.format(name="limited", limit="max_inflight_requests: 1"))
    write(repo, "unlimited", LIMITED.format(name="unlimited", limit=""))
    s = Server(str(repo), env={"NEREID_PYTHON": sys.executable})
    yield s
    assert s.stop() == 0, s.read_log()


def stream(s, model, x, **kwargs):
    """Sends one request on a gRPC stream (asking for the final flag) and collects its responses
    up to the one marked final: the responses that carry outputs, and whether the final flag came
    alone. The flag rides on the last response when the last step to finish produced one, and comes
    alone when the decoupled step's own final flag arrived last (Triton's rule)."""
    g = grpcclient.InferenceServerClient(s.grpc_url)
    results = queue.Queue()
    g.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        i = grpcclient.InferInput("X", list(x.shape), "INT32")
        i.set_data_from_numpy(x)
        g.async_stream_infer(model, [i], request_id="e1", enable_empty_final_response=True,
                             **kwargs)
        got = []
        while not got or not is_final(got[-1]):
            result, error = results.get(timeout=60)
            assert error is None, str(error)
            got.append(result)
        with pytest.raises(queue.Empty):
            results.get(timeout=0.5)
    finally:
        g.stop_stream()
    data = [r for r in got if r.get_response().outputs]
    assert all(not is_final(r) for r in got[:-1])
    return data, not got[-1].get_response().outputs


def is_final(result):
    return result.get_response().parameters["triton_final_response"].bool_param


def test_each_response_of_a_decoupled_step_runs_the_next_and_answers(server):
    x = np.array([1, 2, 3], dtype=np.int32)
    http = httpclient.InferenceServerClient(server.url)
    before = http.get_inference_statistics("repeat_plain")["model_stats"][0]["inference_stats"]
    data, _ = stream(server, "stream", x)
    # The plain step's instances may finish out of order: the set of answers is IN * 1, 2, 3.
    assert sorted(tuple(r.as_numpy("Y")) for r in data) == [tuple(x * k) for k in (1, 2, 3)]
    for r in data:
        response = r.get_response()
        assert response.id == "e1" and response.model_name == "stream"
        assert "sequence_id" in response.parameters  # Triton's parameters, on each response
    # The plain step ran once per response of the decoupled one.
    after = http.get_inference_statistics("repeat_plain")["model_stats"][0]["inference_stats"]
    assert int(after["success"]["count"]) - int(before["success"]["count"]) == 3


def test_a_request_parameter_sets_how_many_and_zero_sends_only_the_flag(server):
    x = np.array([5], dtype=np.int32)
    data, _ = stream(server, "stream", x, parameters={"repeat": 5})
    assert sorted(int(r.as_numpy("Y")[0]) for r in data) == [5, 10, 15, 20, 25]
    data, alone = stream(server, "stream", x, parameters={"repeat": 0})
    assert data == [] and alone


def test_the_ensemble_is_decoupled_and_refused_where_triton_refuses_it(server):
    http = httpclient.InferenceServerClient(server.url)
    config = http.get_model_config("stream")
    assert config["model_transaction_policy"]["decoupled"] is True
    i = httpclient.InferInput("X", [1], "INT32")
    i.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="decoupled transaction policy"):
        http.infer("stream", [i])


def test_max_inflight_requests_bounds_a_step(server):
    x = np.array([1], dtype=np.int32)
    limited, _ = stream(server, "limited", x, parameters={"repeat": 8})
    assert max(int(r.as_numpy("RUNNING")[0]) for r in limited) == 1
    assert sorted(int(r.as_numpy("Y")[0]) for r in limited) == list(range(1, 9))
    # Without the limit the eight probe requests overlap on its four instances.
    unlimited, _ = stream(server, "unlimited", x, parameters={"repeat": 8})
    assert max(int(r.as_numpy("RUNNING")[0]) for r in unlimited) > 1


def test_a_response_cache_on_a_decoupled_ensemble_is_refused(tmp_path):
    repo = tmp_path / "models"
    repeat_model(repo, "repeat_decoupled", decoupled=True, batching=False)
    repeat_model(repo, "repeat_plain", batching=False)
    write(repo, "stream", STREAM + "response_cache { enable: true }\n")
    s = Server(str(repo), "--model-control-mode=explicit", "--cache-config=local,size=1048576")
    try:
        http = httpclient.InferenceServerClient(s.url)
        with pytest.raises(InferenceServerException,
                           match="Response Cache does not currently support model stream with "
                                 "'decoupled' transaction policy"):
            http.load_model("stream")
        assert http.is_model_ready("repeat_decoupled")  # its steps loaded and serve
    finally:
        assert s.stop() == 0, s.read_log()


def test_a_client_leaving_while_a_step_waits_for_room_loses_nothing_else(server):
    """The decoupled step streams 20 values into a step limited to one request in flight (100 ms
    each); the client cancels after the first answer. The waits end (a cancelled request does not
    wait for room), and the ensemble then serves the next client completely."""
    g = grpcclient.InferenceServerClient(server.grpc_url)
    results = queue.Queue()
    g.start_stream(callback=lambda result, error: results.put((result, error)))
    i = grpcclient.InferInput("X", [1], "INT32")
    i.set_data_from_numpy(np.array([1], dtype=np.int32))
    g.async_stream_infer("limited", [i], request_id="gone", parameters={"repeat": 20})
    result, error = results.get(timeout=60)
    assert error is None, str(error)
    g.stop_stream(cancel_requests=True)
    data, _ = stream(server, "limited", np.array([3], dtype=np.int32), parameters={"repeat": 3})
    assert sorted(int(r.as_numpy("Y")[0]) for r in data) == [3, 6, 9]
    assert httpclient.InferenceServerClient(server.url).is_server_live()
