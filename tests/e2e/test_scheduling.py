"""Scheduling through the real server: dynamic batching merges waiting requests, the schedule policy
extension (priority, timeout), queue limits (503), statistics (Triton's JSON) and Prometheus metrics."""
import os
import queue
import time
import urllib.request
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from conftest import Server


def identity(repo, name, config_extra):
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], name,
                              [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["b", 4])])
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "1", "model.onnx"), "wb") as f:
        f.write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "native"\nmax_batch_size: 8\n'
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n' + config_extra)


@pytest.fixture(scope="module")
def sched_server(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("sched") / "models")
    # Requests wait up to 0.4 s for company: two of them form one batch; a third finds the queue full.
    identity(repo, "slow_batch", "dynamic_batching { max_queue_delay_microseconds: 400000\n"
                                 "  priority_levels: 2 default_priority_level: 2\n"
                                 "  default_queue_policy { max_queue_size: 2 allow_timeout_override: true } }\n")
    identity(repo, "goal", 'dynamic_batching { }\nparameters { key: "nereid.latency_goal_us" '
                           'value: { string_value: "5000" } }\n')
    identity(repo, "energy_goal", 'dynamic_batching { }\nparameters { key: "nereid.latency_goal_us" '
                                  'value: { string_value: "20000" } }\nparameters { key: '
                                  '"nereid.batching_objective" value: { string_value: "energy" } }\n')
    identity(repo, "bad_objective", 'dynamic_batching { }\nparameters { key: '
                                    '"nereid.batching_objective" value: { string_value: "green" } }\n')
    s = Server(repo, "--exit-on-error=false")
    yield s
    assert s.stop() == 0, s.read_log()


def request(value, client=None):
    i = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(np.full((1, 4), value, dtype=np.float32))
    return [i]


def slow_batch_stats(c):
    stats = c.get_inference_statistics("slow_batch")["model_stats"][0]
    pairs = {b["batch_size"]: b["compute_infer"]["count"] for b in stats.get("batch_stats", [])}
    return (stats["inference_count"], stats["execution_count"],
            stats["inference_stats"]["success"]["count"], stats["inference_stats"]["fail"]["count"],
            stats["inference_stats"]["queue"]["ns"], pairs.get(2, 0))


def test_waiting_requests_are_batched_and_a_full_queue_rejects(sched_server):
    c = httpclient.InferenceServerClient(sched_server.url, concurrency=4)
    before = slow_batch_stats(c)  # what earlier tests left in the statistics
    first = c.async_infer("slow_batch", request(1))
    second = c.async_infer("slow_batch", request(2))
    deadline = time.time() + 10  # both queued, waiting for the delay: the pending gauge says so
    while sched_server.metrics().get(
            'nv_inference_pending_request_count{model="slow_batch",version="1"}', 0) < 2:
        assert time.time() < deadline
        time.sleep(0.005)
    with pytest.raises(InferenceServerException) as e:
        httpclient.InferenceServerClient(sched_server.url).infer("slow_batch", request(3))
    assert "Exceeds maximum queue size" in str(e.value) and "503" in str(e.value)
    assert (first.get_result(timeout=10).as_numpy("OUTPUT0") == 1).all()
    assert (second.get_result(timeout=10).as_numpy("OUTPUT0") == 2).all()
    after = slow_batch_stats(c)
    inferences, executions, success, fail, queue_ns, batches_of_two = (
        a - b for a, b in zip(after, before))
    assert inferences == 2 and executions == 1 and batches_of_two == 1
    assert success == 2 and fail == 1
    assert queue_ns > 0.1e9  # they waited for the delay


def test_request_timeout_and_priority_parameters(sched_server):
    c = httpclient.InferenceServerClient(sched_server.url)
    with pytest.raises(InferenceServerException, match="Request timeout expired"):
        c.infer("slow_batch", request(1), timeout=1000)  # 1 ms, while the batcher waits 400 ms
    with pytest.raises(InferenceServerException, match="priority 5 is out of range"):
        c.infer("slow_batch", request(1), priority=5)
    r = c.infer("slow_batch", request(7), priority=1)
    assert (r.as_numpy("OUTPUT0") == 7).all()


def test_latency_goal_model_serves_and_says_so(sched_server):
    c = httpclient.InferenceServerClient(sched_server.url)
    for k in range(20):
        assert (c.infer("goal", request(k)).as_numpy("OUTPUT0") == k).all()
    assert "model 'goal': latency-goal batching, p99 <= 5000 us" in sched_server.read_log()


def test_energy_objective_batches_concurrent_requests_and_a_bad_one_is_refused(sched_server):
    # gRPC's asynchronous calls leave at once (the HTTP client's take ~10 ms each here).
    g = grpcclient.InferenceServerClient(sched_server.grpc_url)
    for _ in range(5):
        done = queue.Queue()
        for k in range(8):
            i = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            i.set_data_from_numpy(np.full((1, 4), k, dtype=np.float32))
            g.async_infer("energy_goal", [i], partial(lambda k, result, error: done.put((k, result, error)), k))
        for _ in range(8):
            k, result, error = done.get(timeout=10)
            assert error is None and (result.as_numpy("OUTPUT0") == k).all(), error
    g.close()
    c = httpclient.InferenceServerClient(sched_server.url)
    stats = c.get_inference_statistics("energy_goal")["model_stats"][0]
    assert stats["inference_count"] == 40
    # Sizes it has not measured yet are waited for: eight requests at once make batches.
    assert stats["execution_count"] < 40, stats
    log = sched_server.read_log()
    assert ("model 'energy_goal': latency-goal batching, p99 <= 20000 us, fewest joules per "
            "inference (measured)") in log
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["bad_objective"]["state"] == "UNAVAILABLE"
    assert ("parameter 'nereid.batching_objective' must be 'throughput' or 'energy', got 'green'"
            in index["bad_objective"]["reason"]), index["bad_objective"]


def test_statistics_for_all_models_and_unknown_model(sched_server):
    c = httpclient.InferenceServerClient(sched_server.url)
    names = {m["name"] for m in c.get_inference_statistics()["model_stats"]}
    assert {"slow_batch", "goal"} <= names
    with pytest.raises(InferenceServerException, match="not available"):
        c.get_inference_statistics("nope")


def test_prometheus_metrics(sched_server):
    c = httpclient.InferenceServerClient(sched_server.url)
    c.infer("goal", request(1))
    text = urllib.request.urlopen(f"http://127.0.0.1:{sched_server.metrics_port}/metrics").read().decode()
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert int(lines['nv_inference_request_success{model="goal",version="1"}']) >= 1
    assert 'nv_inference_request_failure{model="slow_batch",version="1",reason="REJECTED"}' in lines
    assert 'nv_inference_queue_duration_us{model="goal",version="1"}' in lines
    assert lines['nereid_inference_request_duration_us_bucket{model="goal",version="1",le="+Inf"}'] == \
        lines['nereid_inference_request_duration_us_count{model="goal",version="1"}']
    assert "# TYPE nv_inference_pending_request_count gauge" in text


def test_triton_s_delay_scheduler_hook_holds_the_first_batch(tmp_path):
    repo = str(tmp_path / "models")
    identity(repo, "held", "dynamic_batching { }\n")
    s = Server(repo, env={"TRITONSERVER_DELAY_SCHEDULER": "4"})
    try:
        g = grpcclient.InferenceServerClient(s.grpc_url)
        done = queue.Queue()
        for k in range(4):
            i = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            i.set_data_from_numpy(np.full((1, 4), k, dtype=np.float32))
            g.async_infer("held", [i], partial(lambda k, result, error: done.put((k, result, error)), k))
            time.sleep(0.05)  # one at a time: without the hook each would run alone
        for _ in range(4):
            k, result, error = done.get(timeout=10)
            assert error is None and (result.as_numpy("OUTPUT0") == k).all(), error
        c = httpclient.InferenceServerClient(s.url)
        stats = c.get_inference_statistics("held")["model_stats"][0]
        assert stats["execution_count"] == 1
        assert [b["batch_size"] for b in stats["batch_stats"]] == [4]
        assert (c.infer("held", request(9)).as_numpy("OUTPUT0") == 9).all()  # the gate stays open
        assert c.get_inference_statistics("held")["model_stats"][0]["execution_count"] == 2
        assert "test hook TRITONSERVER_DELAY_SCHEDULER=4" in s.read_log()
        g.close()
    finally:
        assert s.stop() == 0
