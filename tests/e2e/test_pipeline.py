"""A pipeline split across devices (Triton's ensemble): a Python pre-processing step on the CPU
(uint8 pixels -> scaled float features) feeding recommend_model on KIND_GPU where there is a GPU
(scripts/gpu_device_run.sh runs this file on the device), on KIND_CPU everywhere (CI). Over HTTP
and gRPC, against a float64 reference; the server's tensor copies per request are printed and
bounded (no step output is copied: only the frontend may copy client input bytes, once). Then two
native steps back to back (recommend_model -> Relu): on KIND_GPU the scores stay in device memory
between them (nereid_tensor_handoff_bytes{kind="ensemble",memory="device"}), on KIND_CPU in host
memory. And a sequence's implicit state, which on KIND_GPU stays in device memory from one request
to the next (kind="sequence_state")."""
import os
import pathlib
import re
import shutil
import sys
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from onnx import helper

from conftest import Server
from references import TOLERANCE, recommend_reference
from test_gpu import GPUS, write_repo
from test_onnxruntime import float_io, write_model

SCALE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            raw = pb_utils.get_input_tensor_by_name(r, "RAW").as_numpy()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("FEATURES", (raw.astype(np.float32) / 255.0))]))
        return out
'''

SCALE_CONFIG = '''name: "scale"
backend: "python"
max_batch_size: 32
input [ { name: "RAW" data_type: TYPE_UINT8 dims: [ 1024 ] } ]
output [ { name: "FEATURES" data_type: TYPE_FP32 dims: [ 1024 ] } ]
instance_group [ { kind: KIND_CPU, count: 2 } ]
'''

PIPELINE = '''name: "{name}"
platform: "ensemble"
max_batch_size: 32
input [ {{ name: "RAW" data_type: TYPE_UINT8 dims: [ 1024 ] }} ]
output [ {{ name: "SCORES" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "scale" model_version: -1
     input_map {{ key: "RAW" value: "RAW" }} output_map {{ key: "FEATURES" value: "features" }} }},
  {{ model_name: "{model}" model_version: -1
     input_map {{ key: "input__0" value: "features" }} output_map {{ key: "output__0" value: "SCORES" }} }}
] }}
'''

KINDS = ["cpu"] + (["gpu"] if GPUS else [])

RELU_CONFIG = '''name: "relu_{kind}"
backend: "native"
max_batch_size: 32
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
instance_group [ {{ kind: KIND_{upper}, count: 1 }} ]
'''

TWO_NATIVE = '''name: "scores_relu_{kind}"
platform: "ensemble"
max_batch_size: 32
input [ {{ name: "FEATURES" data_type: TYPE_FP32 dims: [ 1024 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "{model}" model_version: -1
     input_map {{ key: "input__0" value: "FEATURES" }} output_map {{ key: "output__0" value: "scores" }} }},
  {{ model_name: "relu_{kind}" model_version: -1
     input_map {{ key: "X" value: "scores" }} output_map {{ key: "Y" value: "OUT" }} }}
] }}
'''


ACCUMULATOR_CONFIG = '''name: "acc_{kind}"
backend: "native"
max_batch_size: 1
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 16 ] }} ]
sequence_batching {{
  max_sequence_idle_microseconds: 10000000
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 16 ] }} ]
}}
instance_group [ {{ kind: KIND_{upper}, count: 1 }} ]
'''


def write_accumulator(repo, kind):
    """OUTPUT = STATE_OUT = STATE_IN + INPUT: a running sum in implicit state."""
    io = [float_io(n, ("N", 16)) for n in ("INPUT", "STATE_IN", "OUTPUT", "STATE_OUT")]
    write_model(pathlib.Path(repo), f"acc_{kind}",
                [helper.make_node("Add", ["INPUT", "STATE_IN"], ["OUTPUT"]),
                 helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"])], io[:2], io[2:],
                ACCUMULATOR_CONFIG.format(kind=kind, upper=kind.upper()))


def write_relu(repo, kind):
    write_model(pathlib.Path(repo), f"relu_{kind}", [helper.make_node("Relu", ["X"], ["Y"])],
                [float_io("X", ("N", 1000))], [float_io("Y", ("N", 1000))],
                RELU_CONFIG.format(kind=kind, upper=kind.upper()))


@pytest.fixture(scope="module")
def pipeline_server(tmp_path_factory):
    repo = write_repo(str(tmp_path_factory.mktemp("pipeline")), precisions=("tf32",))
    os.makedirs(os.path.join(repo, "scale", "1"))
    with open(os.path.join(repo, "scale", "1", "model.py"), "w") as f:
        f.write(SCALE)
    with open(os.path.join(repo, "scale", "config.pbtxt"), "w") as f:
        f.write(SCALE_CONFIG)
    for kind, model in (("cpu", "recommend_cpu"), ("gpu", "recommend_tf32")):
        os.makedirs(os.path.join(repo, f"pipeline_{kind}", "1"))
        with open(os.path.join(repo, f"pipeline_{kind}", "config.pbtxt"), "w") as f:
            f.write(PIPELINE.format(name=f"pipeline_{kind}", model=model))
        write_relu(repo, kind)
        write_accumulator(repo, kind)
        os.makedirs(os.path.join(repo, f"scores_relu_{kind}", "1"))
        with open(os.path.join(repo, f"scores_relu_{kind}", "config.pbtxt"), "w") as f:
            f.write(TWO_NATIVE.format(kind=kind, model=model))
    # The reference reads the ONNX file from a directory of its own; a machine without a GPU
    # serves only what it can load.
    reference = str(tmp_path_factory.mktemp("reference"))
    shutil.copytree(os.path.join(repo, "recommend_model"), os.path.join(reference, "recommend_model"))
    if not GPUS:
        for name in os.listdir(repo):
            if name not in ("scale", "recommend_cpu", "pipeline_cpu", "relu_cpu", "scores_relu_cpu", "acc_cpu"):
                shutil.rmtree(os.path.join(repo, name))
    s = Server(repo, env={"NEREID_PYTHON": sys.executable})
    s.reference = reference
    yield s
    assert s.stop() == 0, s.read_log()


def copies(server):
    text = urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics").read().decode()
    return {d: int(v) for d, v in
            re.findall(r'^nereid_tensor_copy_bytes\{direction="(\w+)"\} (\d+)$', text, re.M)}


def handoffs(server, kind="ensemble"):
    text = urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics").read().decode()
    return {m: int(v) for m, v in re.findall(
        rf'^nereid_tensor_handoff_bytes\{{kind="{kind}",memory="(\w+)"\}} (\d+)$', text, re.M)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_cpu_python_step_feeds_the_model(pipeline_server, kind, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = pipeline_server.url if protocol == "http" else pipeline_server.grpc_url
    client = module.InferenceServerClient(url)
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(8, 1024), dtype=np.uint8)
    i = module.InferInput("RAW", list(raw.shape), "UINT8")
    i.set_data_from_numpy(raw)
    client.infer(f"pipeline_{kind}", [i])  # warm
    before = copies(pipeline_server)
    scores = client.infer(f"pipeline_{kind}", [i]).as_numpy("SCORES")
    after = copies(pipeline_server)
    reference = recommend_reference(pipeline_server.reference, raw.astype(np.float64) / 255.0)
    error = np.abs(scores - reference).max()
    print(f"pipeline_{kind} {protocol}: max abs diff {error:.2e}; server copies per request: "
          f"input {after['input'] - before['input']} B, output {after['output'] - before['output']} B "
          f"(client input {raw.nbytes} B)")
    assert error <= TOLERANCE["tf32" if kind == "gpu" else "fp32"] * 10
    assert after["output"] == before["output"]
    assert after["input"] - before["input"] <= raw.nbytes
    stats = client.get_inference_statistics(f"pipeline_{kind}")
    if protocol == "grpc":
        stats = {"model_stats": [{"inference_stats": {"success": {"count": s.inference_stats.success.count}}}
                                 for s in stats.model_stats]}
    assert int(stats["model_stats"][0]["inference_stats"]["success"]["count"]) >= 2


@pytest.mark.parametrize("kind", KINDS)
def test_two_native_steps_hand_off_where_they_run(pipeline_server, kind):
    client = httpclient.InferenceServerClient(pipeline_server.url)
    rng = np.random.default_rng(11)
    features = rng.random((8, 1024), dtype=np.float32)
    i = httpclient.InferInput("FEATURES", list(features.shape), "FP32")
    i.set_data_from_numpy(features)
    client.infer(f"scores_relu_{kind}", [i])  # warm
    before, copied = handoffs(pipeline_server), copies(pipeline_server)
    out = client.infer(f"scores_relu_{kind}", [i]).as_numpy("OUT")
    after, copied_after = handoffs(pipeline_server), copies(pipeline_server)
    reference = np.maximum(recommend_reference(pipeline_server.reference, features.astype(np.float64)), 0)
    error = np.abs(out - reference).max()
    moved = {m: after[m] - before[m] for m in ("host", "device")}
    print(f"scores_relu_{kind}: max abs diff {error:.2e}; hand-off per request {moved}; server "
          f"input copies {copied_after['input'] - copied['input']} B")
    assert error <= TOLERANCE["tf32" if kind == "gpu" else "fp32"] * 10
    scores_bytes = 8 * 1000 * 4
    # On the GPU the scores stay in device memory; on the CPU they pass in host memory. Either
    # way the server copies none of them (only the client's bytes, at most once).
    assert moved == ({"host": 0, "device": scores_bytes} if kind == "gpu"
                     else {"host": scores_bytes, "device": 0})
    assert copied_after["input"] - copied["input"] <= features.nbytes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_sequence_state_stays_where_the_engine_runs(pipeline_server, kind, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = pipeline_server.url if protocol == "http" else pipeline_server.grpc_url
    client = module.InferenceServerClient(url)
    rng = np.random.default_rng(3)
    xs = [rng.random((1, 16), dtype=np.float32) for _ in range(4)]
    before = handoffs(pipeline_server, "sequence_state")
    sequence_id = 71 if protocol == "http" else 72
    for k, x in enumerate(xs):
        i = module.InferInput("INPUT", [1, 16], "FP32")
        i.set_data_from_numpy(x)
        out = client.infer(f"acc_{kind}", [i], sequence_id=sequence_id, sequence_start=k == 0,
                           sequence_end=k == len(xs) - 1).as_numpy("OUTPUT")
        np.testing.assert_allclose(out, np.sum(xs[:k + 1], axis=0), rtol=1e-5)
    after = handoffs(pipeline_server, "sequence_state")
    moved = {m: after[m] - before[m] for m in ("host", "device")}
    print(f"acc_{kind} {protocol}: state hand-off over 3 requests {moved}")
    # Requests 2-4 read the state the previous one wrote: 3 x 64 bytes, on the GPU in device memory.
    assert moved == ({"host": 0, "device": 192} if kind == "gpu" else {"host": 192, "device": 0})
