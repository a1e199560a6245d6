"""Placement on ONNX Runtime's execution providers (docs/placement.md): the server runs ONNX
Runtime from the onnxruntime-openvino wheel (scripts/requirements-openvino.txt, installed into
.venv/onnxruntime-openvino; NEREID_ONNXRUNTIME_LIBRARY points at its library) and serves

- Triton's `cpu_execution_accelerator: [ { name: "openvino" } ]` on KIND_CPU, on OpenVINO's CPU
  plugin, its answers equal to ORT's CPU provider's (Python's onnxruntime) within tolerance;
- Nereid's accelerator kind: KIND_MODEL with `nereid.device: "openvino:CPU"` on the same, and
  `openvino:NPU` (no NPU here) falling back to the CPU provider with a log line and a metric, or
  refused with `nereid.accelerator_fallback: "refuse"`;
- gpu_execution_accelerators on KIND_CPU instances not applied (logged), as Triton does;
- configs Triton refuses (an unknown accelerator or parameter) refused with Triton's words, and
  a cache folder outside the model's directory refused.

A BERT-shaped encoder (scripts/text_models.py bert_tiny) and a small CNN (convolutions, grouped
and dilated, batch norm, pooling)."""
import glob
import os
import re
import shutil
import sys
import time

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import urllib.request

from conftest import Server
from test_gpu import GPUS, NO_GPU_REASON

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import real_models  # noqa: E402
import text_models  # noqa: E402
import vision_models  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
LIBRARY = next(iter(sorted(glob.glob(os.path.join(
    ROOT, ".venv", "onnxruntime-openvino", "onnxruntime", "capi", "libonnxruntime.so.*")))), None)
NEEDS_OPENVINO = pytest.mark.skipif(
    LIBRARY is None, reason="onnxruntime-openvino is not installed (scripts/install-deps.sh)")

TEXT_IO = """max_batch_size: 8
input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
        { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "sentence_embedding" data_type: TYPE_FP32 dims: [ 128 ] } ]
"""
MINILM_IO = """max_batch_size: 8
input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
        { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "461" data_type: TYPE_FP32 dims: [ 384 ] } ]
"""
CNN_IO = """max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 10 ] } ]
"""
OPENVINO = ('optimization { execution_accelerators { cpu_execution_accelerator: [ { name: '
            '"openvino"%s } ] } }\n')
CPU = "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
MODEL_KIND = "instance_group [ { kind: KIND_MODEL count: 1 } ]\n"


def device(name, fallback=None):
    out = f'parameters {{ key: "nereid.device" value {{ string_value: "{name}" }} }}\n'
    if fallback:
        out += (f'parameters {{ key: "nereid.accelerator_fallback" value {{ string_value: '
                f'"{fallback}" }} }}\n')
    return out


# name -> (file, io, rest of the config)
MODELS = {
    "text_cpu": ("text", TEXT_IO, CPU),
    "text_openvino": ("text", TEXT_IO, CPU + OPENVINO % ' parameters { key: "precision" value: '
                                                        '"FP32" }'),
    "text_device_cpu": ("text", TEXT_IO, MODEL_KIND + device("openvino:CPU")),
    "text_npu": ("text", TEXT_IO, MODEL_KIND + device("openvino:NPU")),
    "cnn_openvino": ("cnn", CNN_IO, CPU + OPENVINO % ""),
    "cnn_device_cpu": ("cnn", CNN_IO, MODEL_KIND + device("openvino:CPU")),
    "cnn_tensorrt_on_cpu": ("cnn", CNN_IO, CPU + 'optimization { execution_accelerators { '
                            'gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: '
                            '"precision_mode" value: "FP16" } } ] } }\n'),
}
MINILM = real_models.paraphrase_minilm_file()
if MINILM is not None:
    # paraphrase-MiniLM-L3 (its wheel's file): OpenVINO 2025.4's CPU plugin refuses to compile it
    # (an INT64 by INT32 Multiply in its pooling's Expand), so ORT cannot create the session
    # with OpenVINO: the instance falls back to the CPU provider.
    MODELS["minilm_openvino"] = ("minilm", MINILM_IO, CPU + OPENVINO % "")
# Refused at load, with the words in the log.
BAD = {
    "npu_refuse": (MODEL_KIND + device("openvino:NPU", "refuse"),
                   "model 'npu_refuse': parameter nereid.device 'openvino:NPU': OpenVINO "
                   "(device_type NPU): SessionOptionsAppendExecutionProvider_OpenVINO_V2: "),
    "unknown_cpu": (CPU + 'optimization { execution_accelerators { cpu_execution_accelerator: '
                    '[ { name: "unknown_cpu" } ] } }\n',
                    "unknown Execution Accelerator 'unknown_cpu' is requested"),
    "unknown_trt_param": (CPU + 'optimization { execution_accelerators { '
                          'gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: '
                          '"segment_size" value: "1" } } ] } }\n',
                          "unknown parameter 'segment_size' is provided for TensorRT Execution "
                          "Accelerator"),
    "bad_trt_value": (CPU + 'optimization { execution_accelerators { gpu_execution_accelerator: '
                      '[ { name: "tensorrt" parameters { key: "max_workspace_size_bytes" value: '
                      '"abc" } } ] } }\n',
                      "failed to convert 'abc' to unsigned long long integral number"),
    "cache_outside": (CPU + OPENVINO % ' parameters { key: "cache_dir" value: "../../elsewhere" }',
                      "parameter 'cache_dir' must be a folder inside the model's version "
                      "directory (a relative path), got '../../elsewhere'"),
    "bad_device": (MODEL_KIND + device("npu"),
                   "parameter 'nereid.device' must name an accelerator as openvino:<device>"),
    "device_without_kind": (CPU + device("openvino:CPU"),
                            "parameter 'nereid.device' places KIND_MODEL instances, but no "
                            "instance_group is KIND_MODEL"),
    "bad_fallback": (MODEL_KIND + device("openvino:CPU", "sometimes"),
                     "parameter 'nereid.accelerator_fallback' must be cpu or refuse, got "
                     "'sometimes'"),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("placement") / "models"
    files = {"text": text_models.encoder("bert_tiny", seed=9, pooled=True),
             "cnn": vision_models.small_cnn(seed=4, size=32, classes=10)}
    if MINILM is not None:
        files["minilm"] = onnx.load(MINILM)
    for name, (kind, io, rest) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(files[kind], str(root / name / "1" / "model.onnx"))
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\nplatform: "onnxruntime_onnx"\n' + io + rest)
    for name, (rest, _) in BAD.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(files["text"], str(root / name / "1" / "model.onnx"))
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\nplatform: "onnxruntime_onnx"\n' + TEXT_IO + rest)
    return root


@pytest.fixture(scope="module")
def server(repo):
    s = Server(str(repo), "--onnx-engine=onnxruntime", "--exit-on-error=false",
               "--strict-readiness=false", env={"NEREID_ONNXRUNTIME_LIBRARY": LIBRARY})
    yield s
    assert s.stop() == 0, s.read_log()


def reference(repo, name, feeds, output):
    session = onnxruntime.InferenceSession(str(repo / name / "1" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    return session.run([output], feeds)[0]


def text_feeds(batch, tokens, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 1000, (batch, tokens), dtype=np.int64)
    mask = np.ones((batch, tokens), np.int64)
    mask[0, tokens // 2:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def infer(url, name, feeds, output, grpc):
    mod = grpcclient if grpc else httpclient
    inputs = []
    for key, value in feeds.items():
        inputs.append(mod.InferInput(key, list(value.shape),
                                     "INT64" if value.dtype == np.int64 else "FP32"))
        inputs[-1].set_data_from_numpy(value)
    return mod.InferenceServerClient(url).infer(name, inputs).as_numpy(output)


@NEEDS_OPENVINO
def test_the_library_offers_openvino(server):
    assert re.search(r"execution providers: OpenVINOExecutionProvider, CPUExecutionProvider",
                     server.read_log()), server.read_log()


@NEEDS_OPENVINO
@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_placement_answers_as_the_cpu_provider(server, repo, name, grpc):
    url = server.grpc_url if grpc else server.url
    for batch in (1, 5):
        if name.startswith(("text", "minilm")):
            feeds = text_feeds(batch, 19, batch)
            output = "461" if name.startswith("minilm") else "sentence_embedding"
        else:
            feeds = {"input": np.random.default_rng(batch).standard_normal(
                (batch, 3, 32, 32)).astype(np.float32)}
            output = "output"
        got = infer(url, name, feeds, output, grpc)
        want = reference(repo, name, feeds, output)
        assert got.shape == want.shape
        # OpenVINO's CPU plugin runs its own kernels (fp32: "precision" FP32, its default on CPU).
        assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1), name


@NEEDS_OPENVINO
def test_the_log_and_metrics_say_where_each_instance_runs(server):
    log = server.read_log()
    lines = {m: next((l for l in log.splitlines() if f"model '{m}' instance '{m}_0_0'" in l
                      and "runs on ONNX Runtime's" in l), "") for m in MODELS}
    assert "OpenVINO (device_type CPU, precision FP32), CPU execution provider(s); device " \
           "openvino:CPU" in lines["text_openvino"], lines
    assert "(KIND_MODEL) runs on ONNX Runtime's OpenVINO (device_type CPU), CPU" in \
        lines["text_device_cpu"], lines
    assert "CPU execution provider(s); device cpu (asked for openvino:NPU)" in \
        lines["text_npu"], lines
    assert ("model 'text_npu' instance 'text_npu_0_0' (KIND_MODEL): falls back from parameter "
            "nereid.device 'openvino:NPU': OpenVINO (device_type NPU): ") in log
    assert "Device NPU is not available" in log  # OpenVINO's own reason, carried into the line
    assert ("model 'cnn_tensorrt_on_cpu' instance 'cnn_tensorrt_on_cpu_0_0' (KIND_CPU): "
            "gpu_execution_accelerator not applied (KIND_GPU instances only)") in log
    text = urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics").read().decode()
    assert ('nereid_instance_placement{device="openvino:CPU",instance="text_openvino_0_0",'
            'model="text_openvino",requested="openvino:CPU",version="1"} 1') in text, text
    assert ('nereid_instance_placement{device="cpu",instance="text_npu_0_0",model="text_npu",'
            'requested="openvino:NPU",version="1"} 1') in text, text
    assert ('nereid_placement_fallback_total{model="text_npu",requested="openvino:NPU",'
            'version="1"} 1') in text, text
    assert 'nereid_placement_fallback_total{model="text_openvino"' not in text
    # An accelerator without a meter: its energy is the host CPU's estimate, labelled so.
    estimate = ('nereid_energy_inferences_total{model="text_device_cpu",version="1",'
                'scope="process-cpu",source="estimate"}')
    for _ in range(50):
        if server.metrics().get(estimate, 0) > 0:
            break
        time.sleep(0.1)
    assert server.metrics().get(estimate, 0) > 0, server.metrics()
    if MINILM is not None:  # a provider that refuses the model when the session is created
        assert ("model 'minilm_openvino' instance 'minilm_openvino_0_0' (KIND_CPU): falls back "
                "from cpu_execution_accelerator 'openvino': model 'minilm_openvino': ONNX Runtime "
                "cannot load") in log, log
        assert "CPU execution provider(s); device cpu (asked for openvino:CPU)" in \
            lines["minilm_openvino"], lines


@NEEDS_OPENVINO
@pytest.mark.parametrize("name", sorted(BAD))
def test_configs_that_cannot_place_are_refused(server, name):
    client = httpclient.InferenceServerClient(server.url)
    assert not client.is_model_ready(name)
    assert BAD[name][1] in server.read_log(), server.read_log()


@NEEDS_OPENVINO
def test_the_cache_folder_stays_inside_the_model(tmp_path):
    repo = tmp_path / "models"
    (repo / "m" / "1").mkdir(parents=True)
    onnx.save(vision_models.small_cnn(seed=4, size=32, classes=10), str(repo / "m" / "1" / "model.onnx"))
    (repo / "m" / "config.pbtxt").write_text(
        'name: "m"\nplatform: "onnxruntime_onnx"\n' + CNN_IO + CPU +
        OPENVINO % ' parameters { key: "cache_dir" value: "ov_cache" }')
    s = Server(str(repo), "--onnx-engine=onnxruntime", env={"NEREID_ONNXRUNTIME_LIBRARY": LIBRARY})
    try:
        x = np.zeros((1, 3, 32, 32), np.float32)
        infer(s.url, "m", {"input": x}, "output", False)
        # OpenVINO compiled the model into the cache folder in the version directory.
        assert os.listdir(repo / "m" / "1" / "ov_cache"), "no cache written"
    finally:
        assert s.stop() == 0
    shutil.rmtree(repo)


def fields(raw):
    """The fields of a serialized protobuf message: [(number, bytes or int)]."""
    out, at = [], 0

    def varint():
        nonlocal at
        value, shift = 0, 0
        while True:
            b = raw[at]
            at += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value
    while at < len(raw):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 2:
            n = varint()
            out.append((number, raw[at:at + n]))
            at += n
        elif wire == 1:
            out.append((number, raw[at:at + 8]))
            at += 8
        else:
            out.append((number, raw[at:at + 4]))
            at += 4
    return out


def grpc_placement(stats):
    """Nereid's field 1001 of a ModelStatistics, which Triton's own stubs keep as unknown."""
    names = {1: "model", 2: "instance", 3: "kind", 4: "device", 5: "requested"}
    return [{names[n]: v.decode() for n, v in fields(raw)}
            for number, raw in fields(stats.SerializeToString()) if number == 1001]


@NEEDS_OPENVINO
def test_statistics_and_metadata_show_where_each_instance_runs(server):
    want = [{"model": "text_npu", "instance": "text_npu_0_0", "kind": "KIND_MODEL",
             "device": "cpu", "requested": "openvino:NPU"}]
    http = httpclient.InferenceServerClient(server.url)
    assert http.get_inference_statistics("text_npu")["model_stats"][0]["placement"] == want
    assert http.get_inference_statistics("text_openvino")["model_stats"][0]["placement"][0][
        "device"] == "openvino:CPU"
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert grpc_placement(grpc.get_inference_statistics("text_npu").model_stats[0]) == want
    # The model's metadata too (a field of Nereid's beside KServe's).
    assert http.get_model_metadata("text_npu")["placement"] == want
    assert grpc_placement(grpc.get_model_metadata("text_npu")) == want


@NEEDS_OPENVINO
def test_an_ensemble_shows_each_steps_placement_in_statistics_and_traces(tmp_path):
    """A pipeline of a step on ORT's CPU provider (a scaling) and one on OpenVINO (the CNN): the
    ensemble's statistics list each step's instances and devices; its trace's children say
    which instance and device ran each step."""
    from onnx import TensorProto, helper
    repo = tmp_path / "models"
    (repo / "scale" / "1").mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])], "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, 32, 32])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8),
              str(repo / "scale" / "1" / "model.onnx"))
    (repo / "scale" / "config.pbtxt").write_text(
        'name: "scale"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]\n' + CPU)
    (repo / "cnn" / "1").mkdir(parents=True)
    onnx.save(vision_models.small_cnn(seed=4, size=32, classes=10), str(repo / "cnn" / "1" / "model.onnx"))
    (repo / "cnn" / "config.pbtxt").write_text(
        'name: "cnn"\nplatform: "onnxruntime_onnx"\n' + CNN_IO + MODEL_KIND + device("openvino:CPU"))
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text("""name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling { step [
  { model_name: "scale" model_version: -1 input_map { key: "x" value: "IMAGE" }
    output_map { key: "y" value: "scaled" } },
  { model_name: "cnn" model_version: -1 input_map { key: "input" value: "scaled" }
    output_map { key: "output" value: "SCORES" } } ] }
""")
    trace = str(tmp_path / "trace.json")
    s = Server(str(repo), "--trace-config", f"triton,file={trace}", "--trace-config",
               "level=TIMESTAMPS", "--trace-config", "rate=1",
               env={"NEREID_ONNXRUNTIME_LIBRARY": LIBRARY})
    try:
        x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
        got = infer(s.url, "pipeline", {"IMAGE": x}, "SCORES", False)
        want = reference(repo, "cnn", {"input": 2 * x}, "output")
        assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1)
        stats = httpclient.InferenceServerClient(s.url).get_inference_statistics("pipeline")
        assert stats["model_stats"][0]["placement"] == [
            {"model": "scale", "instance": "scale_0_0", "kind": "KIND_CPU", "device": "cpu",
             "requested": "cpu"},
            {"model": "cnn", "instance": "cnn_0_0", "kind": "KIND_MODEL",
             "device": "openvino:CPU", "requested": "openvino:CPU"}], stats
    finally:
        assert s.stop() == 0, s.read_log()
    import json
    with open(trace) as f:
        entries = json.load(f)
    steps = {e["model_name"]: e for e in entries if "model_name" in e and "parent_id" in e}
    assert steps["scale"]["model_instance"] == "scale_0_0" and steps["scale"]["device"] == "cpu"
    assert steps["cnn"]["model_instance"] == "cnn_0_0"
    assert steps["cnn"]["device"] == "openvino:CPU", entries


@pytest.mark.skipif(GPUS == 0, reason=f"GPU tests skipped: {NO_GPU_REASON}")
@pytest.mark.parametrize("fallback", ["cpu", "refuse"])
def test_kind_gpu_on_a_library_without_cuda_falls_back_or_is_refused(tmp_path, fallback):
    """The ONNX Runtime library the server finds by default (the plain onnxruntime wheel: no CUDA
    provider) and a config asking for KIND_GPU with TensorRT: each instance falls back to the CPU
    provider (logged, counted) and answers as it, or the load is refused."""
    repo = tmp_path / "models"
    (repo / "m" / "1").mkdir(parents=True)
    onnx.save(vision_models.small_cnn(seed=4, size=32, classes=10), str(repo / "m" / "1" / "model.onnx"))
    (repo / "m" / "config.pbtxt").write_text(
        'name: "m"\nplatform: "onnxruntime_onnx"\n' + CNN_IO +
        'instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n'
        'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" '
        '} ] } }\n' + f'parameters {{ key: "nereid.accelerator_fallback" value {{ string_value: '
        f'"{fallback}" }} }}\n')
    # Python's onnxruntime (the CPU wheel; on the device machine the host's own).
    library = sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi",
                                            "libonnxruntime.so*")))
    if not library or "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("no ONNX Runtime library without CUDA's provider here")
    s = Server(str(repo), "--exit-on-error=false", "--strict-readiness=false",
               env={"NEREID_ONNXRUNTIME_LIBRARY": library[0]})
    try:
        log = s.read_log()
        ready = httpclient.InferenceServerClient(s.url).is_model_ready("m")
        if fallback == "refuse":
            assert not ready
            assert "has no TensorrtExecutionProvider" in log and \
                "(parameter nereid.accelerator_fallback is refuse)" in log, log
            return
        assert ready, log
        assert "model 'm' instance 'm_0_0' (KIND_GPU): falls back from gpu_execution_accelerator " \
               "'tensorrt': the ONNX Runtime library at" in log, log
        assert "model 'm' instance 'm_0_0' (KIND_GPU): falls back from KIND_GPU: the ONNX Runtime " \
               "library at" in log, log
        x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
        got = infer(s.url, "m", {"input": x}, "output", False)
        want = reference(repo, "m", {"input": x}, "output")
        assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1)
        samples = s.metrics()
        assert samples.get(
            'nereid_placement_fallback_total{model="m",requested="tensorrt:0",version="1"}') == 1, \
            samples
    finally:
        assert s.stop() == 0, s.read_log()
