"""Ensembles (platform "ensemble") through the real binary and tritonclient: steps as a data flow,
pruning of steps nothing asked for, nested ensembles, statistics per step and for the ensemble,
Triton's response parameters, tensors passed between steps without copies, explicit-mode loading
of the steps' models, and Triton's load-time messages for broken ensembles."""
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from functools import partial
from queue import Queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import Server, http_status

ADD_SUB = """
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }},
        {{ name: "B" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "TWICE_A" data_type: TYPE_INT32 dims: [ 16 ] }},
         {{ name: "TWICE_B" data_type: TYPE_INT32 dims: [ 16 ] }},
         {{ name: "DOUBLE_A" data_type: TYPE_INT32 dims: [ 16 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "simple" model_version: 2
     input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "B" }}
     output_map {{ key: "OUTPUT0" value: "sum" }} output_map {{ key: "OUTPUT1" value: "diff" }} }},
  {{ model_name: "simple" model_version: 1
     input_map {{ key: "INPUT0" value: "sum" }} input_map {{ key: "INPUT1" value: "diff" }}
     output_map {{ key: "OUTPUT0" value: "TWICE_A" }} output_map {{ key: "OUTPUT1" value: "TWICE_B" }} }},
  {{ model_name: "simple" model_version: -1
     input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "A" }}
     output_map {{ key: "OUTPUT0" value: "DOUBLE_A" }} }}
] }}
"""

NESTED = """
name: "nested"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "Y" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "Z" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "ens" model_version: -1
    input_map { key: "A" value: "X" } input_map { key: "B" value: "Y" }
    output_map { key: "TWICE_A" value: "x2" } },
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "x2" } input_map { key: "INPUT1" value: "Y" }
    output_map { key: "OUTPUT1" value: "Z" } }
] }
"""

# An ensemble that does not batch over a model that does: Triton gives the step's inputs a batch
# dimension of 1 and takes it off the outputs again.
UNBATCHED = """
name: "unbatched"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" } }
] }
"""


def write(repo, name, text, versions=(1,)):
    for v in versions:
        os.makedirs(os.path.join(repo, name, str(v)), exist_ok=True)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(text)


def make_repository(root, source):
    """simple (versions 1 and 2, both served), the ensemble 'ens' over it and 'nested' over that."""
    repo = os.path.join(root, "models")
    shutil.copytree(os.path.join(source, "simple"), os.path.join(repo, "simple"))
    shutil.copytree(os.path.join(repo, "simple", "1"), os.path.join(repo, "simple", "2"))
    with open(os.path.join(repo, "simple", "config.pbtxt"), "a") as f:
        f.write("\nversion_policy: { all { } }\n")
    write(repo, "ens", ADD_SUB.format(name="ens"))
    write(repo, "nested", NESTED)
    write(repo, "unbatched", UNBATCHED)
    return repo


@pytest.fixture(scope="module")
def ensemble_server(repository, tmp_path_factory):
    repo = make_repository(str(tmp_path_factory.mktemp("ensemble")), repository)
    s = Server(repo, "--log-verbose=1")
    yield s
    assert s.stop() == 0, s.read_log()


def inputs(module, a, b, names=("A", "B")):
    out = []
    for name, value in zip(names, (a, b)):
        i = module.InferInput(name, list(value.shape), "INT32")
        i.set_data_from_numpy(value)
        out.append(i)
    return out


def successes(client, model):
    stats = client.get_inference_statistics(model)["model_stats"]
    return {s["version"]: s["inference_stats"]["success"]["count"] for s in stats}


def test_ensemble_runs_its_steps_over_http_and_grpc(ensemble_server):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    http = httpclient.InferenceServerClient(ensemble_server.url)
    r = http.infer("ens", inputs(httpclient, a, b))
    assert (r.as_numpy("TWICE_A") == 2 * a).all()
    assert (r.as_numpy("TWICE_B") == 2 * b).all()
    assert (r.as_numpy("DOUBLE_A") == 2 * a).all()
    grpc = grpcclient.InferenceServerClient(ensemble_server.grpc_url)
    r = grpc.infer("ens", inputs(grpcclient, a, b))
    assert (r.as_numpy("TWICE_B") == 2 * b).all()
    # The metadata and config are the ensemble's own.
    assert http.get_model_metadata("ens")["platform"] == "ensemble"
    assert http.get_model_config("ens")["ensemble_scheduling"]["step"][0]["model_name"] == "simple"
    # A nested ensemble: Z = 2 * X - Y.
    r = http.infer("nested", inputs(httpclient, a, b, names=("X", "Y")))
    assert (r.as_numpy("Z") == 2 * a - b).all()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_ensemble_without_batching_feeds_a_batching_step(ensemble_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(
        ensemble_server.url if protocol == "http" else ensemble_server.grpc_url)
    a = np.arange(16, dtype=np.int32)
    b = np.full(16, 5, dtype=np.int32)
    r = client.infer("unbatched", inputs(module, a, b))
    assert r.as_numpy("SUM").shape == (16,)  # [1, 16] from the step, [16] as configured
    assert (r.as_numpy("SUM") == a + b).all()


def test_steps_that_feed_nothing_asked_for_are_not_run(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.url)
    a = np.ones((1, 16), dtype=np.int32)
    before = successes(client, "simple")
    ens_before = successes(client, "ens")["1"] if "1" in successes(client, "ens") else 0
    r = client.infer("ens", inputs(httpclient, a, a),
                     outputs=[httpclient.InferRequestedOutput("DOUBLE_A")])
    assert (r.as_numpy("DOUBLE_A") == 2).all() and r.as_numpy("TWICE_A") is None
    after = successes(client, "simple")
    # Only the third step ran: on the newest version (2); version 1's step was pruned.
    assert after["1"] == before["1"] and after["2"] == before["2"] + 1
    r = client.infer("ens", inputs(httpclient, a, a),
                     outputs=[httpclient.InferRequestedOutput("TWICE_B")])
    assert (r.as_numpy("TWICE_B") == 2).all()
    final = successes(client, "simple")
    assert final["1"] == after["1"] + 1 and final["2"] == after["2"] + 1
    # The ensemble counts each request once.
    assert successes(client, "ens")["1"] == ens_before + 2


def test_every_response_carries_the_sequence_parameters(ensemble_server):
    results = Queue()
    client = grpcclient.InferenceServerClient(ensemble_server.grpc_url)
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), results))
    a = np.ones((1, 16), dtype=np.int32)
    flags = [(True, False), (False, False), (False, True)]
    for n, (start, end) in enumerate(flags):
        client.async_stream_infer("ens", inputs(grpcclient, a, a), request_id=str(n),
                                  sequence_id=4242, sequence_start=start, sequence_end=end,
                                  outputs=[grpcclient.InferRequestedOutput("DOUBLE_A")])
    got = []
    for _ in flags:
        result, error = results.get(timeout=10)
        assert error is None, error
        p = result.get_response().parameters
        got.append((p["sequence_start"].bool_param, p["sequence_end"].bool_param,
                    p["sequence_id"].int64_param))
    client.stop_stream()
    assert got == [(s, e, 4242) for s, e in flags]
    # Over HTTP too, without a sequence.
    r = httpclient.InferenceServerClient(ensemble_server.url).infer(
        "ens", inputs(httpclient, a, a)).get_response()
    assert r["parameters"] == {"sequence_id": 0, "sequence_start": False, "sequence_end": False}


def test_tensors_pass_between_steps_without_copies(ensemble_server):
    """The frontend may copy each client input byte once (gRPC slices, alignment); the three
    steps of 'nested' pass six step inputs and four outputs by reference: a copy of any of them
    would take the count past the client's own bytes."""
    def copied():
        text = urllib.request.urlopen(
            f"http://localhost:{ensemble_server.metrics_port}/metrics").read().decode()
        return {d: int(v) for d, v in
                re.findall(r'^nereid_tensor_copy_bytes\{direction="(\w+)"\} (\d+)$', text, re.M)}

    client = grpcclient.InferenceServerClient(ensemble_server.grpc_url)
    a = np.arange(128, dtype=np.int32).reshape(8, 16)
    before = copied()
    for _ in range(5):
        r = client.infer("nested", inputs(grpcclient, a, a, names=("X", "Y")))
        assert (r.as_numpy("Z") == a).all()
    after = copied()
    assert after["output"] == before["output"]
    assert after["input"] - before["input"] <= 5 * 2 * a.nbytes


def test_a_step_error_is_the_ensembles_error_and_unmapped_inputs_are_refused(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.url)
    a = np.ones((1, 16), dtype=np.int32)
    with pytest.raises(Exception, match="unexpected inference input 'C'"):
        client.infer("ens", inputs(httpclient, a, a, names=("A", "C")))
    # Batch 9 passes no ensemble rule that the steps would not: the ensemble's own check says so.
    big = np.ones((9, 16), dtype=np.int32)
    with pytest.raises(Exception, match="batch-size must be <= 8"):
        client.infer("ens", inputs(httpclient, big, big))
    assert client.is_server_live()


def load_error(server, name):
    request = urllib.request.Request(f"http://{server.url}/v2/repository/models/{name}/load",
                                     data=b"{}", method="POST")
    try:
        urllib.request.urlopen(request)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]
    return 200, ""


def test_explicit_load_loads_the_steps_and_bad_ensembles_get_tritons_messages(repository, tmp_path):
    repo = make_repository(str(tmp_path), repository)
    step = ('{{ model_name: "{m}" model_version: {v} input_map {{ key: "INPUT0" value: "A" }} '
            'input_map {{ key: "INPUT1" value: "{b}" }} output_map {{ key: "OUTPUT0" value: "Z" }} }}')

    def broken(name, steps, b_type="TYPE_INT32"):
        write(repo, name, f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
              f'input [ {{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }}, '
              f'{{ name: "B" data_type: {b_type} dims: [ 16 ] }} ]\n'
              f'output [ {{ name: "Z" data_type: TYPE_INT32 dims: [ 16 ] }} ]\n'
              f'ensemble_scheduling {{ step [ {", ".join(steps)} ] }}\n')

    broken("cycle_a", [step.format(m="cycle_b", v=-1, b="B")])
    write(repo, "cycle_b", open(os.path.join(repo, "cycle_a", "config.pbtxt")).read()
          .replace('"cycle_a"', '"cycle_b"').replace('model_name: "cycle_b"', 'model_name: "cycle_a"'))
    broken("missing", [step.format(m="nowhere", v=-1, b="B")])
    broken("old_version", [step.format(m="simple", v=7, b="B")])
    broken("bad_type", [step.format(m="simple", v=-1, b="B")], b_type="TYPE_FP32")
    broken("bad_input", [step.format(m="simple", v=-1, b="B").replace('"INPUT1"', '"INPUT9"')])
    broken("unused", [step.format(m="simple", v=-1, b="A")])
    write(repo, "has_groups", ADD_SUB.format(name="has_groups") + "instance_group [ { kind: KIND_CPU } ]\n")
    s = Server(repo, "--model-control-mode=explicit")
    try:
        client = httpclient.InferenceServerClient(s.url)
        assert not client.is_model_ready("simple")
        client.load_model("nested")  # loads ens, which loads simple
        assert client.is_model_ready("simple") and client.is_model_ready("ens")
        a = np.ones((1, 16), dtype=np.int32)
        assert (client.infer("nested", inputs(httpclient, a, a, names=("X", "Y"))).as_numpy("Z") == 1).all()
        expected = {
            "cycle_a": "circular dependency between ensembles: cycle_a -> ... -> cycle_b -> cycle_a",
            "missing": "ensemble missing contains models that are not available or ambiguous: nowhere",
            "old_version": "ensemble 'old_version' depends on 'simple' whose required version 7 is not loaded",
            "bad_type": "in ensemble bad_type, ensemble tensor B: inconsistent data type: TYPE_FP32 is "
                        "inferred from model bad_type while TYPE_INT32 is inferred from model simple",
            "bad_input": "in ensemble bad_input, ensemble tensor B is mapping to non-existing input INPUT9 "
                         "in model simple",
            "unused": "ensemble input 'B' for ensemble unused' is not used",
            "has_groups": "instance group should not be specified for ensemble 'has_groups'",
        }
        for name, message in expected.items():
            code, error = load_error(s, name)
            assert code == 400 and message in error, (name, error)
        # A reload that would close a loop through ensembles already loaded (ens -> nested -> ens):
        # refused, the old 'ens' keeps serving.
        looped = {"name": "ens", "platform": "ensemble", "max_batch_size": 8,
                  "input": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("A", "B")],
                  "output": [{"name": "TWICE_A", "data_type": "TYPE_INT32", "dims": [16]}],
                  "ensemble_scheduling": {"step": [{"model_name": "nested", "model_version": -1,
                                                    "input_map": {"X": "A", "Y": "B"},
                                                    "output_map": {"Z": "TWICE_A"}}]}}
        with pytest.raises(Exception, match="circular dependency between ensembles: ens -> ... -> nested -> ens"):
            client.load_model("ens", config=json.dumps(looped))
        assert (client.infer("nested", inputs(httpclient, a, a, names=("X", "Y"))).as_numpy("Z") == 1).all()
        # Unloading a step's model unloads the ensembles that name it, nested ones too (Triton's);
        # loading the model again does not bring them back.
        client.unload_model("simple")
        for name in ("ens", "nested"):
            assert not client.is_model_ready(name)
            with pytest.raises(Exception, match="Request for unknown model: '" + name):
                client.infer(name, inputs(httpclient, a, a))
        client.load_model("simple")
        assert client.is_model_ready("simple") and not client.is_model_ready("ens")
        # Loading the ensemble loads an unloaded step model again; unload_dependents takes it along.
        client.unload_model("simple")
        client.load_model("ens")
        assert client.is_model_ready("simple") and client.is_model_ready("ens")
        client.unload_model("ens", unload_dependents=True)
        assert not client.is_model_ready("ens") and not client.is_model_ready("simple")
        # Unloading a model no repository has is not an error (Triton's).
        client.unload_model("no_such_model")
        assert client.is_server_live()
    finally:
        assert s.stop() == 0, s.read_log()


def test_an_ensemble_with_response_cache_answers_repeats_without_its_steps(repository, tmp_path):
    repo = make_repository(str(tmp_path), repository)
    with open(os.path.join(repo, "ens", "config.pbtxt"), "a") as f:
        f.write("response_cache { enable: true }\n")
    s = Server(repo, "--cache-config=local,size=1048576")
    try:
        client = httpclient.InferenceServerClient(s.url)
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        first = client.infer("ens", inputs(httpclient, a, a))
        steps = successes(client, "simple")
        again = client.infer("ens", inputs(httpclient, a, a))
        assert (again.as_numpy("TWICE_A") == first.as_numpy("TWICE_A")).all()
        assert (again.as_numpy("DOUBLE_A") == 2 * a).all()
        assert successes(client, "simple") == steps  # answered from the cache: no step ran
        stats = client.get_inference_statistics("ens")["model_stats"][0]["inference_stats"]
        assert stats["cache_hit"]["count"] == 1 and stats["success"]["count"] == 2
    finally:
        assert s.stop() == 0, s.read_log()


SLOW_STEP = """
name: "slow"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "execute_delay_ms" value: { string_value: "400" } }
"""

GATED = """
name: "gated"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { max_inflight_requests: 1 step [
  { model_name: "slow" model_version: -1
    input_map { key: "INPUT0" value: "X" } output_map { key: "OUTPUT0" value: "Y" } }
] }
"""


def test_requests_waiting_for_a_full_step_hold_no_io_thread(tmp_path):
    """Eight requests to an ensemble whose step allows one in flight (400 ms each) on a server with
    two HTTP I/O threads: the seven without room wait in line, not on a thread, so liveness and
    another model answer at once meanwhile, and every request is answered with its own value."""
    repo = tmp_path / "models"
    write(repo, "slow", SLOW_STEP)
    write(repo, "fast", SLOW_STEP.replace('"slow"', '"fast"').replace('"400"', '"0"'))
    write(repo, "gated", GATED)
    s = Server(str(repo), "--http-thread-count=2")
    try:
        http = httpclient.InferenceServerClient(s.url, concurrency=8)
        pending = []
        for k in range(8):
            i = httpclient.InferInput("X", [1], "INT32")
            i.set_data_from_numpy(np.array([k], dtype=np.int32))
            pending.append(http.async_infer("gated", [i]))
        time.sleep(0.3)  # the first holds the step; the others are in line
        for _ in range(5):
            t0 = time.monotonic()
            status, _ = http_status(f"http://{s.url}/v2/health/live")
            live_s = time.monotonic() - t0
            assert status == 200
            assert live_s < 0.1, f"liveness took {live_s * 1000:.0f} ms"
        t0 = time.monotonic()
        other = httpclient.InferenceServerClient(s.url)
        i = httpclient.InferInput("INPUT0", [1], "INT32")
        i.set_data_from_numpy(np.array([42], dtype=np.int32))
        assert int(other.infer("fast", [i]).as_numpy("OUTPUT0")[0]) == 42
        assert time.monotonic() - t0 < 0.1
        # The step has run at most twice by now: the limit held while the others waited.
        slow = other.get_inference_statistics("slow")["model_stats"][0]
        assert int(slow["inference_stats"]["success"]["count"]) <= 2
        for k, p in enumerate(pending):
            assert int(p.get_result(timeout=30).as_numpy("Y")[0]) == k
        slow = other.get_inference_statistics("slow")["model_stats"][0]
        assert int(slow["inference_stats"]["success"]["count"]) == 8
    finally:
        assert s.stop() == 0, s.read_log()
