"""float64 references for the example models' outputs, from their ONNX files (numpy and onnx only,
no pytest or client imports): the e2e tests and the device scripts (scripts/device_cuda_deb.sh)
check served outputs against them."""
import os

import numpy as np

# ||out - ref||_inf allowed per precision for recommend_model's sigmoid scores (in [0, 1]).
TOLERANCE = {"fp32": 1e-5, "tf32": 3e-3, "bf16": 3e-2, "fp16": 5e-3, "int8": 3e-2}


def recommend_reference(repo, x):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(os.path.join(repo, "recommend_model", "1", "model.onnx"))
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ w[f"fc{i}.weight"].T + w[f"fc{i}.bias"]
        if i < 2:
            h = np.maximum(h, 0)
    return 1 / (1 + np.exp(-h))


def matmul_reference(repo, x):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(os.path.join(repo, "matmul_model", "1", "model.onnx"))
    return x.astype(np.float64) @ numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
