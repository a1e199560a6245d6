"""The `identity` test backend Triton's QA suites use (backend: "identity"): INPUT<i> copied to
OUTPUT<i> for any datatype, batched or not, with Triton's delay parameters and load-time checks."""
import os
import time

import numpy as np
import tritonclient.http as httpclient

from conftest import Server


def identity_model(repo, name, io, extra="", max_batch_size=8):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    inputs = ", ".join(f'{{ name: "INPUT{i}" data_type: {t} dims: [ -1 ] }}' for i, t in enumerate(io[0]))
    outputs = ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ -1 ] }}' for n, t in io[1])
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "identity"\nmax_batch_size: {max_batch_size}\n'
                f"input [ {inputs} ]\noutput [ {outputs} ]\n{extra}")


def test_identity_backend_copies_inputs_and_checks_its_config(tmp_path):
    repo = str(tmp_path / "models")
    identity_model(repo, "id_fp32_bytes", (["TYPE_FP32", "TYPE_STRING"],
                                           [("OUTPUT0", "TYPE_FP32"), ("OUTPUT1", "TYPE_STRING")]))
    identity_model(repo, "id_delay", (["TYPE_INT32"], [("OUTPUT0", "TYPE_INT32")]),
                   'parameters { key: "execute_delay_ms" value { string_value: "200" } }\n')
    identity_model(repo, "id_nobatch", (["TYPE_INT64"], [("OUTPUT0", "TYPE_INT64")]), max_batch_size=0)
    identity_model(repo, "bad_type", (["TYPE_FP32"], [("OUTPUT0", "TYPE_INT32")]))
    identity_model(repo, "bad_pairs", (["TYPE_FP32", "TYPE_FP32"], [("OUTPUT0", "TYPE_FP32")]))
    identity_model(repo, "bad_name", (["TYPE_FP32"], [("RESULT", "TYPE_FP32")]))
    identity_model(repo, "bad_delay", (["TYPE_FP32"], [("OUTPUT0", "TYPE_FP32")]),
                   'parameters { key: "execute_delay_ms" value { string_value: "soon" } }\n')
    s = Server(repo, "--exit-on-error=false")
    try:
        c = httpclient.InferenceServerClient(s.url)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        words = np.array([[b"a", b"bc"], [b"", b"\xff\x00"]], dtype=np.object_)
        i0 = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        i0.set_data_from_numpy(x)
        i1 = httpclient.InferInput("INPUT1", list(words.shape), "BYTES")
        i1.set_data_from_numpy(words)
        r = c.infer("id_fp32_bytes", [i0, i1])
        assert (r.as_numpy("OUTPUT0") == x).all()
        assert r.as_numpy("OUTPUT1").tolist() == words.tolist()
        # Only what is asked for is sent.
        r = c.infer("id_fp32_bytes", [i0, i1], outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
        assert r.as_numpy("OUTPUT0") is None and r.as_numpy("OUTPUT1").tolist() == words.tolist()
        v = np.array([[7, 8]], dtype=np.int32)
        i = httpclient.InferInput("INPUT0", [1, 2], "INT32")
        i.set_data_from_numpy(v)
        start = time.monotonic()
        assert (c.infer("id_delay", [i]).as_numpy("OUTPUT0") == v).all()
        assert time.monotonic() - start >= 0.2  # execute_delay_ms
        w = np.array([1, 2, 3], dtype=np.int64)
        i = httpclient.InferInput("INPUT0", [3], "INT64")
        i.set_data_from_numpy(w)
        assert (c.infer("id_nobatch", [i]).as_numpy("OUTPUT0") == w).all()
        index = {m["name"]: m for m in c.get_model_repository_index()}
        reasons = {n: index[n].get("reason", "") for n in ("bad_type", "bad_pairs", "bad_name", "bad_delay")}
        assert "expected input and output datatype to match, got FP32 and INT32" in reasons["bad_type"]
        assert "model configuration must have equal input/output pairs" in reasons["bad_pairs"]
        assert "expected output name to follow OUTPUT<index> pattern, got 'RESULT'" in reasons["bad_name"]
        assert "parameter 'execute_delay_ms' must be an integer" in reasons["bad_delay"]
        assert all(index[n]["state"] == "UNAVAILABLE" for n in reasons)
    finally:
        assert s.stop() == 0


DYNA = """
name: "{name}"
backend: "dyna_sequence"
max_batch_size: 4
sequence_batching {{
  max_sequence_idle_microseconds: 10000000
  oldest {{ max_candidate_sequences: 16 max_queue_delay_microseconds: 1000 }}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid} }} ] }}
  ]
}}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""

REPEAT_INT32 = """
name: "repeat_int32"
backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""


def test_dyna_sequence_accumulates_per_sequence_and_repeat_int32_answers_per_element(tmp_path):
    """Triton's dyna_sequence test backend: a sum per correlation id, the id added at the end, for
    numeric and string ids, two sequences interleaved; a string id that is not an integer is
    refused. Triton's repeat_int32 model: one response per element of IN, in order."""
    import queue

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
    repo = tmp_path / "models"
    for name, corrid in (("dyna_u64", "TYPE_UINT64"), ("dyna_str", "TYPE_STRING")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(DYNA.format(name=name, corrid=corrid))
    (repo / "repeat_int32" / "1").mkdir(parents=True)
    (repo / "repeat_int32" / "config.pbtxt").write_text(REPEAT_INT32)
    s = Server(str(repo))
    try:
        c = httpclient.InferenceServerClient(s.url)

        def step(model, sid, value, start=False, end=False):
            i = httpclient.InferInput("INPUT", [1, 1], "INT32")
            i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            return int(c.infer(model, [i], sequence_id=sid, sequence_start=start,
                               sequence_end=end).as_numpy("OUTPUT")[0][0])
        for model, a, b in (("dyna_u64", 1000, 2000), ("dyna_str", "1000", "2000")):
            assert step(model, a, 5, start=True) == 5
            assert step(model, b, 7, start=True) == 7
            assert step(model, a, 6) == 11
            assert step(model, b, 1) == 8
            assert step(model, a, 1, end=True) == 12 + 1000
            assert step(model, b, 2, end=True) == 10 + 2000
        try:
            step("dyna_str", "abc", 1, start=True)
            raise AssertionError("a non-integer string id was accepted")
        except InferenceServerException as e:
            assert "expects correlation ID to be decodable into an integer" in str(e), str(e)

        g = grpcclient.InferenceServerClient(s.grpc_url)
        got = queue.Queue()
        g.start_stream(callback=lambda result, error: got.put((result, error)))
        values = np.arange(100, 105, dtype=np.int32)
        inputs = [grpcclient.InferInput("IN", [5], "INT32"),
                  grpcclient.InferInput("DELAY", [5], "UINT32"),
                  grpcclient.InferInput("WAIT", [1], "UINT32")]
        inputs[0].set_data_from_numpy(values)
        inputs[1].set_data_from_numpy(np.full(5, 20, dtype=np.uint32))
        inputs[2].set_data_from_numpy(np.array([50], dtype=np.uint32))
        g.async_stream_infer("repeat_int32", inputs)
        answers = []
        for _ in range(5):
            result, error = got.get(timeout=10)
            assert error is None, str(error)
            answers.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0])))
        g.stop_stream()
        assert answers == [(100 + k, k) for k in range(5)]
    finally:
        assert s.stop() == 0, s.read_log()
