#!/usr/bin/env python3
"""Writes an ONNX model whose large FP32 weights are stored as FLOAT16, each read through a Cast
back to FLOAT (a constant subgraph every engine folds at load): half the bytes, for carrying a
real model to the device machine within a call's 64 MiB (scripts/device_carry.sh). The weights are
rounded to fp16 once; every engine then reads the same fp32 values, so comparisons between them
stay exact.

  halve_weights.py IN.onnx OUT.onnx [--min-elements N] [--keep-rows TABLE:N]

--keep-rows zeroes the rows of initializer TABLE from N on (an embedding table's rarer tokens:
BERT's vocabulary is ordered roughly by frequency), so that the file compresses to a fraction;
the rows kept, and every other weight, are the model's own (fp16-rounded).
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def halve(model, min_elements=1024, keep_rows=None):
    graph = model.graph
    kept, casts = [], []
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT or np.prod(init.dims) < min_elements:
            kept.append(init)
            continue
        values = numpy_helper.to_array(init).astype(np.float16)
        if keep_rows and init.name == keep_rows[0]:
            values[int(keep_rows[1]):] = 0
        half = numpy_helper.from_array(values, init.name + ".fp16")
        kept.append(half)
        casts.append(helper.make_node("Cast", [half.name], [init.name], name=init.name + ".cast",
                                      to=TensorProto.FLOAT))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--min-elements", type=int, default=1024)
    parser.add_argument("--keep-rows", default="")
    args = parser.parse_args()
    keep = args.keep_rows.rsplit(":", 1) if args.keep_rows else None
    onnx.save(halve(onnx.load(args.source), args.min_elements, keep), args.target)


if __name__ == "__main__":
    main()
