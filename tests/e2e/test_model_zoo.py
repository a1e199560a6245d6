"""The onnx wheel's model-zoo graphs (onnx/backend/test/data/light: ResNet-50, DenseNet-121,
Inception v1 and v2, ShuffleNet, SqueezeNet, VGG-19, AlexNet and ZFNet-512 as the ONNX model zoo
published them, opset 9, IR version 3, their weights written as ConstantOfShape nodes) configured
for ONNX Runtime (platform onnxruntime_onnx, KIND_CPU) and served with --onnx-engine=auto: each
must load on Nereid's native engine and answer as Python's onnxruntime does on the same input."""
import os

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.http as httpclient

from conftest import Server

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet", "squeezenet",
          "vgg19", "bvlc_alexnet", "zfnet512"]


def io_of(model):
    """(input name, dims, output name, dims): the one input that is not an initializer."""
    initializers = {i.name for i in model.graph.initializer}
    x = next(i for i in model.graph.input if i.name not in initializers)
    y = model.graph.output[0]
    dims = lambda v: [d.dim_value for d in v.type.tensor_type.shape.dim]  # noqa: E731
    return x.name, dims(x), y.name, dims(y)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("zoo") / "models"
    io = {}
    for name in MODELS:
        path = os.path.join(LIGHT, f"light_{name}.onnx")
        io[name] = io_of(onnx.load(path))
        x, x_dims, y, y_dims = io[name]
        (repo / name / "1").mkdir(parents=True)
        with open(path, "rb") as src, open(repo / name / "1" / "model.onnx", "wb") as dst:
            dst.write(src.read())
        (repo / name / "config.pbtxt").write_text(f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ {{ name: "{x}" data_type: TYPE_FP32 dims: {x_dims} }} ]
output [ {{ name: "{y}" data_type: TYPE_FP32 dims: {y_dims} }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
""")
    s = Server(str(repo), "--onnx-engine=auto")
    yield s, repo, io
    assert s.stop() == 0, s.read_log()


@pytest.mark.parametrize("name", MODELS)
def test_zoo_graph_runs_on_the_native_engine_as_onnxruntime_does(zoo, name):
    server, repo, io = zoo
    assert f"model '{name}' (configured for onnxruntime) runs on the native engine" in \
        server.read_log(), server.read_log()
    x_name, x_dims, y_name, _ = io[name]
    x = np.random.default_rng(7).uniform(0, 1, x_dims).astype(np.float32)
    i = httpclient.InferInput(x_name, x_dims, "FP32")
    i.set_data_from_numpy(x)
    got = httpclient.InferenceServerClient(server.url, network_timeout=120).infer(
        name, [i]).as_numpy(y_name)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    want = onnxruntime.InferenceSession(str(repo / name / "1" / "model.onnx"), options).run(
        [y_name], {x_name: x})[0]
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    # The fp32 tolerance of docs/native-engine.md: 2e-4 of the output's largest magnitude.
    assert float(np.abs(got - want).max()) <= 2e-4 * max(scale, 1e-3), (name, scale)


def test_weights_listed_as_inputs_fold_at_load(zoo):
    # IR version 3 lists every weight as a graph input too (with an initializer, written here
    # through ConstantOfShape). The config declares only the image, so no request can replace a
    # weight: they are constants, their subgraphs fold at load and BatchNormalization folds into
    # the convolutions (the zoo's ResNet-50 as torchvision's: 53 folded, 16 residual Sums fused).
    server, _, _ = zoo
    line = next(ln for ln in server.read_log().splitlines()
                if "model 'resnet50': graph passes:" in ln)
    assert "constant folding: 239 nodes" in line, line
    assert "BatchNormalization folded into Conv: 53;" in line, line
    assert "fused: 16 residual Add, 49 activation" in line, line
