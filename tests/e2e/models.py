"""Test-only models: an identity model per KServe datatype (written as ONNX Identity graphs)."""
import os

from onnx import TensorProto, helper

# KServe datatype -> (ONNX element type, config data_type)
DATATYPES = {
    "BOOL": (TensorProto.BOOL, "TYPE_BOOL"),
    "INT8": (TensorProto.INT8, "TYPE_INT8"),
    "INT16": (TensorProto.INT16, "TYPE_INT16"),
    "INT32": (TensorProto.INT32, "TYPE_INT32"),
    "INT64": (TensorProto.INT64, "TYPE_INT64"),
    "UINT8": (TensorProto.UINT8, "TYPE_UINT8"),
    "UINT16": (TensorProto.UINT16, "TYPE_UINT16"),
    "UINT32": (TensorProto.UINT32, "TYPE_UINT32"),
    "UINT64": (TensorProto.UINT64, "TYPE_UINT64"),
    "FP16": (TensorProto.FLOAT16, "TYPE_FP16"),
    "BF16": (TensorProto.BFLOAT16, "TYPE_BF16"),
    "FP32": (TensorProto.FLOAT, "TYPE_FP32"),
    "FP64": (TensorProto.DOUBLE, "TYPE_FP64"),
    "BYTES": (TensorProto.STRING, "TYPE_STRING"),
}


def identity_name(datatype):
    return f"identity_{datatype.lower()}"


def write_identity_models(repo):
    for datatype, (onnx_type, config_type) in DATATYPES.items():
        name = identity_name(datatype)
        graph = helper.make_graph(
            [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], name,
            [helper.make_tensor_value_info("INPUT0", onnx_type, ["batch", -1])],
            [helper.make_tensor_value_info("OUTPUT0", onnx_type, ["batch", -1])])
        # dims [-1] means "any length": ONNX symbolic dims carry over.
        graph.input[0].type.tensor_type.shape.dim[1].dim_param = "n"
        graph.output[0].type.tensor_type.shape.dim[1].dim_param = "n"
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
        with open(os.path.join(repo, name, "1", "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(f'name: "{name}"\nbackend: "native"\nmax_batch_size: 8\n'
                    f'input [ {{ name: "INPUT0" data_type: {config_type} dims: [ -1 ] }} ]\n'
                    f'output [ {{ name: "OUTPUT0" data_type: {config_type} dims: [ -1 ] }} ]\n'
                    # A Triton field Nereid accepts without acting on it (the load log says so).
                    + ('optimization { graph { level: 1 } }\n' if datatype == "FP32" else ''))
