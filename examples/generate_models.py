#!/usr/bin/env python3
"""Generates the ONNX files of the example repository (examples/models) with the `onnx` package.

Configs (config.pbtxt) are committed; model files are generated so the repository holds no binaries.
Weights come from a fixed seed, so every run writes identical files.

Usage: python3 examples/generate_models.py [--out examples/models]
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def save(model_proto, path):
    onnx.checker.check_model(model_proto)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model_proto, path)
    print(f"wrote {path}")


def simple():
    """Triton's classic 'simple': OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT32 [16])."""
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 16]) for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 16]) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
    ]
    graph = helper.make_graph(nodes, "simple", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def recommend_model(rng):
    """A 3-layer MLP scoring 1000 items from a 1024-wide user feature vector (21 MB of FP32 weights:
    at batch 1 each request streams every weight once, which is what dynamic batching amortizes)."""
    sizes = [1024, 2048, 1024, 1000]
    initializers, nodes = [], []
    x = "input__0"
    for i in range(3):
        w = (rng.standard_normal((sizes[i + 1], sizes[i])) / np.sqrt(sizes[i])).astype(np.float32)
        b = (rng.standard_normal(sizes[i + 1]) * 0.01).astype(np.float32)
        initializers += [numpy_helper.from_array(w, f"fc{i}.weight"), numpy_helper.from_array(b, f"fc{i}.bias")]
        y = f"fc{i}" if i < 2 else "logits"
        # transB=1: weights stored [out, in], as PyTorch's Linear exports them.
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [y], name=f"fc{i}", transB=1))
        if i < 2:
            nodes.append(helper.make_node("Relu", [y], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    nodes.append(helper.make_node("Sigmoid", ["logits"], ["output__0"], name="scores"))
    graph = helper.make_graph(
        nodes, "recommend_model",
        [helper.make_tensor_value_info("input__0", TensorProto.FLOAT, ["batch", 1024])],
        [helper.make_tensor_value_info("output__0", TensorProto.FLOAT, ["batch", 1000])],
        initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def matmul_model(rng):
    """input__0 [-1, 1024] times a fixed 1024x1024 weight."""
    w = (rng.standard_normal((1024, 1024)) / 32.0).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input__0", "weight"], ["output__0"], name="matmul")],
        "matmul_model",
        [helper.make_tensor_value_info("input__0", TensorProto.FLOAT, ["rows", 1024])],
        [helper.make_tensor_value_info("output__0", TensorProto.FLOAT, ["rows", 1024])],
        [numpy_helper.from_array(w, "weight")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(here, "models"))
    args = parser.parse_args()
    rng = np.random.default_rng(20261129)
    save(simple(), os.path.join(args.out, "simple", "1", "model.onnx"))
    save(recommend_model(rng), os.path.join(args.out, "recommend_model", "1", "model.onnx"))
    save(matmul_model(rng), os.path.join(args.out, "matmul_model", "1", "model.onnx"))
    labels = os.path.join(args.out, "recommend_model", "item_labels.txt")
    with open(labels, "w") as f:
        f.write("".join(f"item_{i}\n" for i in range(1000)))
    print(f"wrote {labels}")


if __name__ == "__main__":
    main()
