"""recommend_model in each precision a user can serve it in, for tests/e2e/test_precision.py and
bench/precision_cpu.sh: beside recommend_model (the native engine, fp32) it writes recommend_int8
(the native engine with `precision: int8`), and the same graph through the onnxruntime backend as
recommend_ort (fp32), recommend_ort_dynamic (ONNX Runtime's dynamic quantization: MatMulInteger,
int8 weights per channel) and recommend_ort_qdq (static QDQ: QuantizeLinear/DequantizeLinear
around each MatMul, activations calibrated on 8 batches of random inputs). The repository must
hold examples/models with its models generated."""
import os
import re
import shutil

import numpy as np

ORT_CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ 1024 ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
parameters {{ key: "intra_op_thread_count" value {{ string_value: "1" }} }}
{batching}"""

PRECISION = 'parameters { key: "precision" value { string_value: "%s" } }'


def add_native_variant(repo, name, precision):
    base = os.path.join(repo, "recommend_model")
    shutil.copytree(base, os.path.join(repo, name))
    with open(os.path.join(base, "config.pbtxt")) as f:
        config = f.read()
    config = re.sub(r'name: "recommend_model"', f'name: "{name}"', config)
    if "precision" in config:  # examples/models_gpu names one already
        config = re.sub(r'string_value: "\w+"', f'string_value: "{precision}"', config)
    else:
        config += "\n" + PRECISION % precision + "\n"
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)


def write_precision_models(repo, batching=""):
    """'batching': a dynamic_batching block for the ONNX Runtime models (the native ones keep
    recommend_model's own); their instance count follows recommend_model's (2)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)

    class Random(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.batches = iter([{"input__0": rng.standard_normal((8, 1024)).astype(np.float32)}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    add_native_variant(repo, "recommend_int8", "int8")
    src = os.path.join(repo, "recommend_model", "1", "model.onnx")
    for name in ("recommend_ort", "recommend_ort_dynamic", "recommend_ort_qdq"):
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(ORT_CONFIG.format(name=name, count=2, batching=batching))
    shutil.copy(src, os.path.join(repo, "recommend_ort", "1", "model.onnx"))
    quantize_dynamic(src, os.path.join(repo, "recommend_ort_dynamic", "1", "model.onnx"),
                     weight_type=QuantType.QInt8, per_channel=True)
    quantize_static(src, os.path.join(repo, "recommend_ort_qdq", "1", "model.onnx"), Random(),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


def add_variants_model(repo, name, parameters, calibration_rows=64):
    """recommend_model as 'name' with precision variants: 'parameters' maps nereid.* keys to
    values; 'calibration_rows' > 0 writes calibration/input__0.npy (standard normal rows)."""
    base = os.path.join(repo, "recommend_model")
    shutil.copytree(base, os.path.join(repo, name))
    with open(os.path.join(base, "config.pbtxt")) as f:
        config = f.read()
    config = re.sub(r'name: "recommend_model"', f'name: "{name}"', config)
    config = re.sub(r'parameters \{ key: "precision".*\n', "", config)
    for key, value in parameters.items():
        config += f'\nparameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config + "\n")
    if calibration_rows > 0:
        os.makedirs(os.path.join(repo, name, "calibration"))
        x = np.random.default_rng(11).standard_normal((calibration_rows, 1024)).astype(np.float32)
        np.save(os.path.join(repo, name, "calibration", "input__0.npy"), x)


if __name__ == "__main__":  # python precision_models.py REPO [DYNAMIC_BATCHING_BLOCK]
    import sys
    write_precision_models(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
