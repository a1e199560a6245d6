#!/usr/bin/env python3
"""Writes convolutional test models as ONNX files for the native engine's tests and benchmarks.

  vision_models.py OUT_DIR [--models resnet50,mobilenet_v2,small_cnn,resnext50] [--torchvision]
                   [--seed N]

Without --torchvision the graphs are built with onnx.helper, layer for layer as torchvision's
resnet50 and mobilenet_v2 are (Conv + BatchNormalization + ReLU/ReLU6, bottleneck residuals,
depthwise convolutions, MaxPool, GlobalAveragePool, Flatten, Gemm; resnext50 is torchvision's
resnext50_32x4d, its 3x3s in 32 groups), with random weights and random BatchNormalization
statistics, so no PyTorch is needed (CI). With --torchvision the
models are torchvision's own, exported by torch.onnx.export (the device host has PyTorch).
small_cnn is a few layers covering the other ops of the family (grouped convolution, padding
modes, AveragePool, Resize, ConvTranspose, Concat, LeakyRelu, HardSwish). Every model takes
'input' [batch, 3, H, W] FP32 (batch dynamic) and returns 'output'.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, prefix, array):
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, c_in, c_out, k, stride=1, groups=1, pad=None, bias=False, dilation=1):
        fan_in = c_in // groups * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (c_out, c_in // groups, k, k))
        inputs = [x, self.const("w", w.astype(np.float32))]
        if bias:
            inputs.append(self.const("b", self.rng.normal(0, 0.1, c_out).astype(np.float32)))
        p = (k // 2) * dilation if pad is None else pad
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[p, p, p, p], group=groups, dilations=[dilation, dilation])

    def bn(self, x, c):
        scale = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        shift = self.rng.normal(0, 0.1, c).astype(np.float32)
        mean = self.rng.normal(0, 0.1, c).astype(np.float32)
        var = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        return self.node("BatchNormalization",
                         [x, self.const("scale", scale), self.const("shift", shift),
                          self.const("mean", mean), self.const("var", var)], epsilon=1e-5)

    def relu6(self, x):
        return self.node("Clip", [x, self.const("lo", np.array(0, np.float32)),
                                  self.const("hi", np.array(6, np.float32))])

    def head(self, x, c, classes):
        x = self.node("GlobalAveragePool", [x])
        x = self.node("Flatten", [x], axis=1)
        w = self.rng.normal(0, 1 / np.sqrt(c), (classes, c)).astype(np.float32)
        return self.node("Gemm", [x, self.const("fc_w", w),
                                  self.const("fc_b", np.zeros(classes, np.float32))], transB=1)

    def model(self, x, output, size, name, classes, opset=13):
        self.nodes[-1].output[0] = output  # the final node's output is the graph's
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 3, size, size])],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", classes])],
            self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def resnet50(seed, size=224, classes=1000, groups=1, group_width=64, name="resnet50"):
    b = Builder(seed)
    x = b.node("Relu", [b.bn(b.conv("input", 3, 64, 7, stride=2, pad=3), 64)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        width = planes * group_width // 64 * groups  # the 3x3's channels (torchvision's rule)
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = b.node("Relu", [b.bn(b.conv(x, c_in, width, 1, pad=0), width)])
            y = b.node("Relu", [b.bn(b.conv(y, width, width, 3, stride=s, groups=groups), width)])
            y = b.bn(b.conv(y, width, planes * 4, 1, pad=0), planes * 4)
            shortcut = x
            if i == 0:
                shortcut = b.bn(b.conv(x, c_in, planes * 4, 1, stride=s, pad=0), planes * 4)
            x = b.node("Relu", [b.node("Add", [y, shortcut])])
            c_in = planes * 4
    b.head(x, 2048, classes)
    return b.model("input", "output", size, name, classes)


def resnext50(seed, size=224, classes=1000):
    """torchvision's resnext50_32x4d: ResNet-50 with its 3x3s in 32 groups of 4-32 channels."""
    return resnet50(seed, size, classes, groups=32, group_width=4, name="resnext50")


def mobilenet_v2(seed, size=224, classes=1000):
    b = Builder(seed)
    x = b.relu6(b.bn(b.conv("input", 3, 32, 3, stride=2), 32))
    c_in = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c_in * t
            y = x
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, c_in, hidden, 1, pad=0), hidden))
            y = b.relu6(b.bn(b.conv(y, hidden, hidden, 3, stride=stride, groups=hidden), hidden))
            y = b.bn(b.conv(y, hidden, c, 1, pad=0), c)
            x = b.node("Add", [x, y]) if stride == 1 and c_in == c else y
            c_in = c
    x = b.relu6(b.bn(b.conv(x, 320, 1280, 1, pad=0), 1280))
    b.head(x, 1280, classes)
    return b.model("input", "output", size, "mobilenet_v2", classes)


def small_cnn(seed, size=32, classes=10):
    b = Builder(seed)
    x = b.node("Relu", [b.conv("input", 3, 16, 3, bias=True)])
    a = b.node("LeakyRelu", [b.conv(x, 16, 16, 3, groups=4, bias=True)], alpha=0.1)
    c = b.node("HardSwish", [b.bn(b.conv(x, 16, 16, 3, dilation=2), 16)])
    x = b.node("Concat", [a, c], axis=1)
    x = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = b.node("Mul", [x, b.const("gain", b.rng.uniform(0.5, 1.5, (32, 1, 1)).astype(np.float32))])
    x = b.node("Resize", [x, "", b.const("scales", np.array([1, 1, 2, 2], np.float32))],
               mode="linear")
    w = b.rng.normal(0, 0.2, (32, 8, 2, 2)).astype(np.float32)
    x = b.node("ConvTranspose", [x, b.const("wt", w)], strides=[2, 2])
    x = b.node("HardSigmoid", [b.conv(x, 8, 8, 3, stride=2, bias=True)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    b.head(x, 8, classes)
    return b.model("input", "output", size, "small_cnn", classes, opset=14)  # (HardSwish)


TORCHVISION_NAMES = {"resnext50": "resnext50_32x4d"}


def from_torchvision(name, size):
    import torch
    import torchvision

    model = getattr(torchvision.models, TORCHVISION_NAMES.get(name, name))(weights=None).eval()
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{name}.onnx")
    torch.onnx.export(model, torch.randn(1, 3, size, size), path, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"},
                                                             "output": {0: "batch"}},
                      opset_version=13, dynamo=False)
    return onnx.load(path)


BUILDERS = {"resnet50": resnet50, "resnext50": resnext50, "mobilenet_v2": mobilenet_v2,
            "small_cnn": small_cnn}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--models", default="resnet50,mobilenet_v2,small_cnn")
    parser.add_argument("--torchvision", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=0, help="input height and width")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models.split(","):
        if name not in BUILDERS:
            sys.exit(f"unknown model {name}; one of {', '.join(BUILDERS)}")
        kwargs = {"size": args.size} if args.size else {}
        if args.torchvision and name != "small_cnn":
            model = from_torchvision(name, args.size or 224)
        else:
            model = BUILDERS[name](args.seed, **kwargs)
        path = os.path.join(args.out_dir, f"{name}.onnx")
        onnx.save(model, path)
        print(path)


if __name__ == "__main__":
    main()
