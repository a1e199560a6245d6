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
