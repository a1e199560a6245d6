#!/usr/bin/env python3
"""Writes BERT-style text encoders as ONNX files, random weights, for the native engine's tests and
benchmarks (docs/native-engine.md):

  text_models.py OUT_DIR [--models bert_base,bert_tiny] [--seed N] [--pooled]

Built with onnx.helper node for node as PyTorch exports HuggingFace's BertModel at opset 17 (no
PyTorch needed): word, position and token-type embeddings by Gather, LayerNormalization, per layer
the query/key/value projections (MatMul + Add), heads by Reshape [0, 0, heads, size] and
Transpose, scores by MatMul and Div by sqrt(size), the padding mask as (1 - mask) * -3.4e38 added
before Softmax, the context back by Transpose and Reshape, the output projection with its
residual Add and LayerNormalization, the feed-forward block with GELU written out (Div by sqrt(2),
Erf, Add 1, Mul, Mul 0.5). Inputs input_ids and attention_mask (INT64, [batch, tokens]); output
last_hidden_state [batch, tokens, hidden], and with --pooled also sentence_embedding [batch,
hidden] (the mask-weighted mean, as sentence-transformers pools).

bert_base: 12 layers, hidden 768, 12 heads, feed-forward 3072, vocabulary 30522 (BERT-base's
shapes); bert_tiny: 2 layers, hidden 128, 2 heads, 512 (tests).
"""
import argparse
import os

import numpy as np
from onnx import TensorProto, helper, save

import vision_models

SHAPES = {"bert_base": dict(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, positions=512),
          "bert_tiny": dict(layers=2, hidden=128, heads=2, ffn=512, vocab=30522, positions=512)}


class Builder(vision_models.Builder):
    """vision_models' graph builder (names, constants, nodes) with a transformer's pieces."""

    def weight(self, prefix, shape, scale=0.02):
        return self.const(prefix, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def linear(self, x, n_in, n_out):
        y = self.node("MatMul", [x, self.weight("w", (n_in, n_out))])
        return self.node("Add", [y, self.weight("b", (n_out,))])

    def layer_norm(self, x, width):
        return self.node("LayerNormalization",
                         [x, self.const("gamma", np.ones(width, np.float32)),
                          self.const("beta", np.zeros(width, np.float32))],
                         axis=-1, epsilon=1e-12)

    def gelu(self, x):
        e = self.node("Erf", [self.node("Div", [x, self.const("sqrt2", np.float32(np.sqrt(2)))])])
        t = self.node("Add", [e, self.const("one", np.float32(1))])
        return self.node("Mul", [self.node("Mul", [x, t]), self.const("half", np.float32(0.5))])


def encoder(name, seed=0, pooled=False):
    s = SHAPES[name]
    hidden, heads = s["hidden"], s["heads"]
    size = hidden // heads
    b = Builder(seed)
    # Embeddings: word + position (0 .. tokens - 1, from the ids' shape) + token type 0.
    words = b.node("Gather", [b.weight("word_embeddings", (s["vocab"], hidden)), "input_ids"])
    tokens = b.node("Gather", [b.node("Shape", ["input_ids"]), b.const("one_i", np.int64(1))])
    positions = b.node("Range", [b.const("zero_i", np.int64(0)), tokens, b.const("step", np.int64(1))])
    pos = b.node("Gather", [b.weight("position_embeddings", (s["positions"], hidden)), positions])
    token_type = b.node("Gather", [b.weight("token_type_embeddings", (2, hidden)),
                                   b.const("type0", np.int64(0))])
    x = b.layer_norm(b.node("Add", [b.node("Add", [words, pos]), token_type]), hidden)
    # The additive mask, [batch, 1, 1, tokens]: 0 where attended, -3.4e38 at padding.
    mask = b.node("Cast", [b.node("Unsqueeze", ["attention_mask", b.const("axes", np.array([1, 2]))])],
                  to=TensorProto.FLOAT)
    mask = b.node("Mul", [b.node("Sub", [b.const("one_f", np.float32(1)), mask]),
                          b.const("lowest", np.float32(np.finfo(np.float32).min))])
    heads_shape = b.const("heads_shape", np.array([0, 0, heads, size], np.int64))
    merged_shape = b.const("merged_shape", np.array([0, 0, hidden], np.int64))
    scale = b.const("scale", np.float32(np.sqrt(size)))
    for _ in range(s["layers"]):
        def split(t, perm):
            return b.node("Transpose", [b.node("Reshape", [t, heads_shape])], perm=perm)
        q = split(b.linear(x, hidden, hidden), [0, 2, 1, 3])
        k = split(b.linear(x, hidden, hidden), [0, 2, 3, 1])
        v = split(b.linear(x, hidden, hidden), [0, 2, 1, 3])
        scores = b.node("Add", [b.node("Div", [b.node("MatMul", [q, k]), scale]), mask])
        context = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
        context = b.node("Reshape", [b.node("Transpose", [context], perm=[0, 2, 1, 3]), merged_shape])
        x = b.layer_norm(b.node("Add", [b.linear(context, hidden, hidden), x]), hidden)
        h = b.gelu(b.linear(x, hidden, s["ffn"]))
        x = b.layer_norm(b.node("Add", [b.linear(h, s["ffn"], hidden), x]), hidden)
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                             ["batch", "tokens", hidden])]
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="out"))
    if pooled:
        weights = b.node("Cast", [b.node("Unsqueeze", ["attention_mask", b.const("ax", np.array([2]))])],
                         to=TensorProto.FLOAT)
        total = b.node("ReduceSum", [b.node("Mul", [x, weights]), b.const("ax1", np.array([1]))],
                       keepdims=0)
        count = b.node("Clip", [b.node("ReduceSum", [weights, b.const("ax1b", np.array([1]))], keepdims=0),
                                b.const("tiny", np.float32(1e-9))])
        b.nodes.append(helper.make_node("Div", [total, count], ["sentence_embedding"], name="pool"))
        outputs.append(helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT,
                                                     ["batch", hidden]))
    graph = helper.make_graph(
        b.nodes, name,
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"])],
        outputs, initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--models", default="bert_base,bert_tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pooled", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models.split(","):
        path = os.path.join(args.out_dir, f"{name}.onnx")
        save(encoder(name, args.seed, args.pooled), path)
        print(path)


if __name__ == "__main__":
    main()
