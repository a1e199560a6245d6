"""Model warmup (config `model_warmup`, src/runtime/warmup.cc): every sample runs on every instance
before the model is READY, with zero, random or file data; warmup inferences are not counted in
the statistics; a sample that fails, a file of the wrong size, a variable dimension or a path out
of the model fails the load with Triton's message while the server keeps serving the rest."""
import json
import os
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from onnx import TensorProto, helper

from conftest import Server
from test_onnxruntime import write_model

IO = ('input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
      'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')


def add_model(repo, name, warmup, instances=2):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 4])
    write_model(repo, name, [helper.make_node("Add", ["X", "X"], ["Y"])], [x], [y],
                f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n' + IO
                + f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]\n" + warmup)


def sample(name, data, batch_size=2, count=3, dims="[ 4 ]", dtype="TYPE_FP32"):
    return (f'model_warmup [ {{ name: "{name}" batch_size: {batch_size} count: {count} '
            f'inputs {{ key: "X" value: {{ data_type: {dtype} dims: {dims} {data} }} }} }} ]\n')


def test_warmup_runs_on_every_instance_and_errors_fail_only_their_model(tmp_path):
    repo = tmp_path / "models"
    add_model(repo, "zero", sample("zeros", "zero_data: true"))
    add_model(repo, "random", sample("noise", "random_data: true", count=0))
    add_model(repo, "from_file", sample("file", 'input_data_file: "x.bin"'))
    (repo / "from_file" / "warmup").mkdir()
    (repo / "from_file" / "warmup" / "x.bin").write_bytes(np.ones(4, np.float32).tobytes())
    add_model(repo, "short_file", sample("short", 'input_data_file: "x.bin"'))
    (repo / "short_file" / "warmup").mkdir()
    (repo / "short_file" / "warmup" / "x.bin").write_bytes(b"\0" * 6)
    add_model(repo, "escape", sample("out", 'input_data_file: "../../zero/config.pbtxt"'))
    add_model(repo, "variable", sample("var", "zero_data: true", dims="[ -1 ]"))
    add_model(repo, "wrong_type", sample("bad", "zero_data: true", dtype="TYPE_INT32"))
    add_model(repo, "skipped", sample("none", "zero_data: true", batch_size=0))
    s = Server(str(repo), "--log-verbose=1", "--exit-on-error=false", expect_ready=False)
    try:
        c = httpclient.InferenceServerClient(s.url)
        log = s.read_log()
        for model in ("zero", "random", "from_file", "skipped"):
            assert c.is_model_ready(model), model
        # Every sample on every instance, each iteration (count 0 runs once).
        for instance in ("zero_0_0", "zero_0_1"):
            for n in (1, 2, 3):
                assert (f"model 'zero' instance {instance} is running warmup sample 'zeros' "
                        f"for iteration {n}") in log
        assert log.count("is running warmup sample 'zeros'") == 2 * 3
        assert log.count("is running warmup sample 'noise'") == 2
        assert "warmup sample 'none'" not in log
        index = {m["name"]: m for m in c.get_model_repository_index()}
        assert index["short_file"]["state"] == "UNAVAILABLE"
        assert ("failed to run warmup sample 'short': warmup setting expects 16 bytes, but the data "
                "provided from x.bin" in index["short_file"]["reason"])
        assert not c.is_model_ready("escape")
        assert "must stay inside the model directory" in index["escape"]["reason"]
        assert ("warmup setting expects all variable-size dimensions are specified for input 'X'"
                in index["variable"]["reason"])
        assert "failed to run warmup sample 'bad': " in index["wrong_type"]["reason"]
        # Warmup inferences are not in the statistics; real ones are.
        stats = c.get_inference_statistics("zero")["model_stats"][0]
        assert int(stats.get("inference_count", 0)) == 0
        x = httpclient.InferInput("X", [1, 4], "FP32")
        x.set_data_from_numpy(np.full((1, 4), 2, np.float32))
        assert (c.infer("from_file", [x]).as_numpy("Y") == 4).all()
        stats = c.get_inference_statistics("from_file")["model_stats"][0]
        assert int(stats["inference_count"]) == 1
    finally:
        s.stop()


def test_sequence_model_warms_up_with_its_control_inputs(tmp_path):
    """Warmup samples may name a sequence model's control inputs (Triton's L0_warmup does)."""
    repo = tmp_path / "models"
    i32 = lambda n: helper.make_tensor_value_info(n, TensorProto.INT32, ["b", 1])  # noqa: E731
    write_model(repo, "seq", [helper.make_node("Add", ["INPUT", "START"], ["OUTPUT"])],
                [i32("INPUT"), i32("START")], [i32("OUTPUT")],
                'name: "seq"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
                "sequence_batching { control_input [ { name: \"START\" control [ { kind: "
                "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }\n"
                'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
                'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
                'model_warmup [ { name: "w" batch_size: 1 inputs [ '
                '{ key: "INPUT" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }, '
                '{ key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ] } ]\n')
    s = Server(str(repo), "--log-verbose=1")
    try:
        assert "is running warmup sample 'w' for iteration 1" in s.read_log()
        c = httpclient.InferenceServerClient(s.url)
        x = httpclient.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(np.full((1, 1), 5, np.int32))
        assert c.infer("seq", [x], sequence_id=3, sequence_start=True).as_numpy("OUTPUT")[0, 0] == 6
    finally:
        assert s.stop() == 0


def cpu_seconds(pid):
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def override(batch_size, count):
    return json.dumps({
        "name": "long", "backend": "onnxruntime", "max_batch_size": 8,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [4]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        "model_warmup": [{"name": "w", "batch_size": batch_size, "count": count,
                          "inputs": {"X": {"data_type": "TYPE_FP32", "dims": [4],
                                           "zero_data": True}}}]})


def test_an_aborted_load_stops_its_warmup_and_warmup_is_bounded(tmp_path):
    """A load whose warmup outlasts --model-load-timeout-secs is answered as aborted and its warmup
    stops (the process goes idle); batch sizes over max_batch_size and request totals over the
    bound are refused before anything is built."""
    repo = tmp_path / "models"
    add_model(repo, "long", "", instances=1)
    s = Server(str(repo), "--model-control-mode=explicit", "--model-load-timeout-secs=1")
    try:
        c = httpclient.InferenceServerClient(s.url)
        with pytest.raises(InferenceServerException, match="batch_size 100000000 exceeds the "
                                                           "model's max_batch_size 8"):
            c.load_model("long", config=override(100_000_000, 1))
        with pytest.raises(InferenceServerException, match="count x batch_size makes 32000000000 "
                                                           "warmup requests per instance"):
            c.load_model("long", config=override(8, 4_000_000_000))
        for _ in range(2):
            with pytest.raises(InferenceServerException, match="aborted"):
                c.load_model("long", config=override(1, 1_000_000))
        time.sleep(0.5)  # the abort reaches the warmup loop within one iteration
        before = cpu_seconds(s.proc.pid)
        time.sleep(2)
        busy = cpu_seconds(s.proc.pid) - before
        assert busy < 0.3, f"the server used {busy:.2f} s of CPU in 2 s after the aborted loads"
        c.load_model("long", config=override(2, 3))  # a bounded warmup still loads
        assert c.is_model_ready("long")
    finally:
        assert s.stop() == 0, s.read_log()
