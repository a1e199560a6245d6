"""The model-zoo graphs of the onnx wheel (ResNet-50, DenseNet-121, Inception v1/v2, ShuffleNet,
SqueezeNet, VGG-19, AlexNet, ZFNet-512) and the real CNNs the model packages ship (RapidOCR's text
detector, recogniser and direction classifier, openWakeWord's embedding) configured for ONNX
Runtime on KIND_GPU and served by the native engine's GPU path (--onnx-engine=auto): Concat, LRN,
Softmax, Transpose, Sum, Max, Resize, ConvTranspose, standalone BatchNormalization, the
recogniser's layer norms and attention, and load-time shape arithmetic around the convolutions. Each answer is compared with Python's onnxruntime on the CPU
on the same input. The detector's open height and width are fixed by its config's dims. Without a
GPU every test skips; scripts/gpu_device_run.sh runs this file on the device machine."""
import os

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import real_models
from conftest import Server
from test_gpu import GPUS, NO_GPU_REASON
from test_model_zoo import LIGHT, io_of
from test_model_zoo import MODELS as ZOO

pytestmark = pytest.mark.skipif(GPUS == 0, reason=f"GPU tests skipped: {NO_GPU_REASON}")

# name -> (file, input dims per row (the batch first in the file), output dims per row)
REAL = {}
_ocr = real_models.package_dir("rapidocr_onnxruntime")
if _ocr:
    REAL["ocr_detector"] = (os.path.join(_ocr, "models", "ch_PP-OCRv4_det_infer.onnx"),
                            [3, 128, 160], [1, 128, 160])
    REAL["ocr_direction"] = (os.path.join(_ocr, "models", "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
                             [3, 48, 192], [2])
    # SVTR: layer norms written out, attention (Q, K and V sliced from a batch-moving Transpose).
    REAL["ocr_recognizer"] = (os.path.join(_ocr, "models", "ch_PP-OCRv4_rec_infer.onnx"),
                              [3, 48, 320], [40, 6625])
if "wakeword_embedding" in real_models.model_files():
    REAL["wakeword_embedding"] = (real_models.model_files()["wakeword_embedding"], [76, 32, 1],
                                  [1, 1, 96])
REAL = {name: entry for name, entry in REAL.items() if os.path.exists(entry[0])}  # (as carried)
# Of the output's largest magnitude: the sums run in another order than ONNX Runtime's
# (docs/native-engine.md); bf16 rounds every activation between layers.
TOLERANCE = {"fp32": 2e-4, "bf16": 6e-2}


def write(repo, name, path, precision):
    x, x_dims, y, y_dims = io_of(onnx.load(path))
    if name in REAL:  # batched: the file's first dimension is the batch
        _, x_dims, y_dims = REAL[name]
        batch = 4
    else:  # the zoo's fixed [1, ...] shapes, no batching
        batch = 0
    model = f"{name}_{precision}"
    (repo / model / "1").mkdir(parents=True)
    with open(path, "rb") as src, open(repo / model / "1" / "model.onnx", "wb") as dst:
        dst.write(src.read())
    (repo / model / "config.pbtxt").write_text(f"""name: "{model}"
platform: "onnxruntime_onnx"
max_batch_size: {batch}
input [ {{ name: "{x}" data_type: TYPE_FP32 dims: {x_dims} }} ]
output [ {{ name: "{y}" data_type: TYPE_FP32 dims: {y_dims} }} ]
instance_group [ {{ kind: KIND_GPU count: 1 }} ]
parameters {{ key: "precision" value {{ string_value: "{precision}" }} }}
""")
    return x, x_dims, y


MODELS = {name: os.path.join(LIGHT, f"light_{name}.onnx") for name in ZOO}
MODELS.update({name: spec[0] for name, spec in REAL.items()})
CASES = [(name, p) for name in MODELS for p in ("fp32", "bf16")]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("gpu_zoo") / "models"
    io = {}
    for name, precision in CASES:
        io[name] = write(repo, name, MODELS[name], precision)
    # 24 models, each tuned per batch size at load: half a minute on the H200.
    s = Server(str(repo), "--onnx-engine=auto", start_timeout=300)
    yield s, io
    assert s.stop() == 0, s.read_log()


_sessions = {}


def reference(name, x_name, x):
    if name not in _sessions:
        _sessions[name] = onnxruntime.InferenceSession(MODELS[name],
                                                       providers=["CPUExecutionProvider"])
    return _sessions[name].run(None, {x_name: x})[0]


@pytest.mark.parametrize("name,precision", CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_gpu_engine_answers_as_onnxruntime_does(zoo, name, precision):
    server, io = zoo
    model = f"{name}_{precision}"
    log = server.read_log()
    line = next((ln for ln in log.splitlines() if f"model '{model}' on GPU 0" in ln), "")
    assert "native GPU engine" in line, log
    x_name, x_dims, y_name = io[name]
    rng = np.random.default_rng(3)
    shape = [2] + x_dims if name in REAL else x_dims
    x = rng.uniform(0, 1, shape).astype(np.float32)
    want = reference(name, x_name, x)
    grpc = name in ("resnet50", "ocr_detector")
    mod = grpcclient if grpc else httpclient
    c = mod.InferenceServerClient(server.grpc_url if grpc else server.url)
    i = mod.InferInput(x_name, shape, "FP32")
    i.set_data_from_numpy(x)
    got = c.infer(model, [i]).as_numpy(y_name)
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-3)
    print(f"{model}: max abs diff {diff:.2e} of the largest output")
    assert diff <= TOLERANCE[precision], (model, diff)
    if precision == "fp32" and want.ndim == 2 and want.shape[1] > 2:
        assert (got.argmax(1) == want.argmax(1)).all()


def test_open_dims_without_fixed_config_dims_are_refused_naming_them(tmp_path):
    if "ocr_detector" not in REAL:
        pytest.skip("rapidocr_onnxruntime is not installed")
    repo = tmp_path / "models"
    (repo / "det" / "1").mkdir(parents=True)
    with open(REAL["ocr_detector"][0], "rb") as src:
        (repo / "det" / "1" / "model.onnx").write_bytes(src.read())
    (repo / "det" / "config.pbtxt").write_text("""name: "det"
backend: "native"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [3, -1, -1] } ]
output [ { name: "sigmoid_0.tmp_0" data_type: TYPE_FP32 dims: [1, -1, -1] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
""")
    s = Server(str(repo), "--exit-on-error=false", "--strict-readiness=false")
    try:
        c = httpclient.InferenceServerClient(s.url)
        assert not c.is_model_ready("det")
        assert "the GPU engine needs [rows, fixed dims...]" in s.read_log(), s.read_log()
    finally:
        s.stop()
