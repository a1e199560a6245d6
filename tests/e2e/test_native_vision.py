"""Convolutional networks configured for ONNX Runtime (Triton configs: platform onnxruntime_onnx,
KIND_CPU, dynamic batching) served with --onnx-engine=auto on Nereid's own engine: ResNet-50 and
MobileNetV2 and ResNeXt-50 (32x4d) as torchvision builds them (scripts/vision_models.py, random
weights, small inputs to keep the suite quick), a small CNN of the other ops of the family, and the real CNNs the
model packages ship (RapidOCR's text detector, recogniser and direction classifier, openWakeWord's
embedding). Each answer is
compared with Python's onnxruntime on the same input, over HTTP and gRPC, one request and many
concurrent (batched) ones; an attribute the engine cannot run exactly sends the model to ONNX
Runtime with the reason in the log."""
import concurrent.futures
import os
import re
import shutil
import sys
import time

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

import real_models
from conftest import Server

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import vision_models  # noqa: E402

# name -> (builder, input size, classes)
GENERATED = {"resnet50": (vision_models.resnet50, 64, 1000),
             "mobilenet_v2": (vision_models.mobilenet_v2, 64, 1000),
             "resnext50": (vision_models.resnext50, 64, 1000),
             "small_cnn": (vision_models.small_cnn, 32, 10)}
REAL = {name: file for name, file in real_models.model_files().items()
        if name in ("ocr_direction", "wakeword_embedding")}
if real_models.package_dir("rapidocr_onnxruntime"):  # its text detector and recogniser too
    for name, file in (("ocr_detector", "ch_PP-OCRv4_det_infer.onnx"),
                       ("ocr_recognizer", "ch_PP-OCRv4_rec_infer.onnx")):
        REAL[name] = os.path.join(real_models.package_dir("rapidocr_onnxruntime"), "models", file)
REAL_IO = {"ocr_direction": ("x", [3, 48, 192], "save_infer_model/scale_0.tmp_1", [2]),
           "wakeword_embedding": ("input_1", [76, 32, 1], "conv2d_19", [1, 1, 96]),
           "ocr_detector": ("x", [3, 96, 128], "sigmoid_0.tmp_0", [1, 96, 128]),
           "ocr_recognizer": ("x", [3, 48, 320], "softmax_11.tmp_0", [40, 6625]),
           "cubic": ("input", [1, 4, 4], "output", [1, 8, 8]),
           "scaled": ("input", [3, 6, 6], "output", [6, 6, 6])}


def config(name, input_name, dims, output_name, out_dims):
    # MobileNetV2 splits each op over 3 threads (the ONNX Runtime backend's parameter).
    threads = ('parameters { key: "intra_op_thread_count" value { string_value: "3" } }\n'
               if name == "mobilenet_v2" else "")
    return threads + f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "{input_name}" data_type: TYPE_FP32 dims: {dims} }} ]
output [ {{ name: "{output_name}" data_type: TYPE_FP32 dims: {out_dims} }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 20000 }}
"""


def io_of(name):
    name = name.removesuffix("_int8").removesuffix("_variants").removesuffix("_rows2")
    name = name.removesuffix("_rows")
    if name in GENERATED:
        _, size, classes = GENERATED[name]
        return "input", [3, size, size], "output", [classes]
    return REAL_IO[name]


MODELS = list(GENERATED) + list(REAL)


def text_strokes(n, seed):
    """n lines of dark strokes on white, as RapidOCR feeds its recogniser ((v / 255 - 0.5) / 0.5)."""
    rng = np.random.default_rng(seed)
    x = np.ones((n, 3, 48, 320), np.float32)
    for i in range(n):
        for _ in range(rng.integers(8, 24)):
            x0, y0 = rng.integers(4, 300), rng.integers(10, 30)
            w, h = rng.integers(2, 6), rng.integers(3, 20)
            if rng.random() < 0.5:
                w, h = h, w
            x[i, :, y0:y0 + h, x0:x0 + w] = -1.0 + 0.2 * rng.random()
    return x


@pytest.fixture(scope="module")
def vision_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("vision") / "models"
    for name in MODELS:
        (repo / name / "1").mkdir(parents=True)
        target = repo / name / "1" / "model.onnx"
        if name in GENERATED:
            build, size, classes = GENERATED[name]
            onnx.save(build(seed=1, size=size, classes=classes), str(target))
        else:
            shutil.copy(REAL[name], target)
        (repo / name / "config.pbtxt").write_text(config(name, *io_of(name)))
    # The int8 precision: every convolution but the depthwise ones quantized per output channel.
    (repo / "resnet50_int8" / "1").mkdir(parents=True)
    shutil.copy(repo / "resnet50" / "1" / "model.onnx", repo / "resnet50_int8" / "1" / "model.onnx")
    (repo / "resnet50_int8" / "config.pbtxt").write_text(
        config("resnet50_int8", *io_of("resnet50")) +
        'parameters { key: "precision" value { string_value: "int8" } }\n')
    # Precision variants on a CNN: both measured at load on a calibration set (the guard), and
    # the article's rule runs int8 while the load is low.
    (repo / "resnet50_variants" / "1").mkdir(parents=True)
    shutil.copy(repo / "resnet50" / "1" / "model.onnx",
                repo / "resnet50_variants" / "1" / "model.onnx")
    params = {"nereid.precision_variants": "fp32,int8", "nereid.accuracy_guard": "top1=0.9",
              "nereid.variant_policy": "low_load_low_precision", "nereid.variant_dwell_ms": "0"}
    (repo / "resnet50_variants" / "config.pbtxt").write_text(
        config("resnet50_variants", *io_of("resnet50")) + "".join(
            f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
            for k, v in params.items()))
    (repo / "resnet50_variants" / "calibration").mkdir()
    np.save(repo / "resnet50_variants" / "calibration" / "input.npy",
            np.random.default_rng(12).uniform(-1, 1, (16, 3, 64, 64)).astype(np.float32))
    # int8 with calibration inputs: the activations' per-channel smoothing measured at load and
    # kept only where the whole model comes closer to fp32 on them (RapidOCR's recogniser has
    # channels large on every pixel).
    if "ocr_recognizer" in REAL:
        (repo / "ocr_recognizer_int8" / "1").mkdir(parents=True)
        shutil.copy(REAL["ocr_recognizer"], repo / "ocr_recognizer_int8" / "1" / "model.onnx")
        (repo / "ocr_recognizer_int8" / "config.pbtxt").write_text(
            config("ocr_recognizer_int8", *io_of("ocr_recognizer")) +
            'parameters { key: "precision" value { string_value: "int8" } }\n')
        (repo / "ocr_recognizer_int8" / "calibration").mkdir()
        np.save(repo / "ocr_recognizer_int8" / "calibration" / "x.npy", text_strokes(8, 1))
    # Batches run row by row (nereid.split_batches; "auto" measures at load which is faster).
    (repo / "resnet50_rows" / "1").mkdir(parents=True)
    shutil.copy(repo / "resnet50" / "1" / "model.onnx", repo / "resnet50_rows" / "1" / "model.onnx")
    (repo / "resnet50_rows" / "config.pbtxt").write_text(
        config("resnet50_rows", *io_of("resnet50")) +
        'parameters { key: "nereid.split_batches" value { string_value: "true" } }\n')
    # The same with two intra-op threads: rows side by side, one per thread.
    (repo / "resnet50_rows2" / "1").mkdir(parents=True)
    shutil.copy(repo / "resnet50" / "1" / "model.onnx", repo / "resnet50_rows2" / "1" / "model.onnx")
    (repo / "resnet50_rows2" / "config.pbtxt").write_text(
        config("resnet50_rows2", *io_of("resnet50")) +
        'parameters { key: "nereid.split_batches" value { string_value: "true" } }\n'
        'parameters { key: "intra_op_thread_count" value { string_value: "2" } }\n')
    # An attribute the engine refuses (cubic Resize): ONNX Runtime serves this one.
    graph = helper.make_graph(
        [helper.make_node("Resize", ["input", "", "scales"], ["output"], mode="cubic")], "cubic",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 4, 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2])])
    (repo / "cubic" / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(repo / "cubic" / "1" / "model.onnx"))
    (repo / "cubic" / "config.pbtxt").write_text(
        config("cubic", "input", [1, 4, 4], "output", [1, 8, 8]))
    # Constants after convolutions: a per-channel [C, 1, 1] scale and a scalar shift fold into the
    # first Conv; a [C] scale broadcasts along the width (here as wide as the channels) and must not.
    rng = np.random.default_rng(5)
    c = 6
    tensors = [helper.make_tensor(n, TensorProto.FLOAT, s, rng.uniform(-1, 1, s).ravel().tolist())
               for n, s in (("w1", [c, 3, 3, 3]), ("b1", [c]), ("scale", [c, 1, 1]),
                            ("shift", [1]), ("w2", [c, c, 1, 1]), ("along_w", [c]))]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Mul", ["scale", "c1"], ["s1"]),
         helper.make_node("Add", ["s1", "shift"], ["a1"]),
         helper.make_node("Relu", ["a1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2"], ["c2"]),
         helper.make_node("Mul", ["c2", "along_w"], ["output"])], "scaled",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, 6, c])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", c, 6, c])], tensors)
    (repo / "scaled" / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(repo / "scaled" / "1" / "model.onnx"))
    (repo / "scaled" / "config.pbtxt").write_text(
        config("scaled", "input", [3, 6, c], "output", [c, 6, c]))
    return repo


@pytest.fixture(scope="module")
def vision_server(vision_repo):
    s = Server(str(vision_repo), "--onnx-engine=auto")
    yield s
    assert s.stop() == 0, s.read_log()


_sessions = {}


def reference(repo, name, x):
    if name not in _sessions:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        _sessions[name] = onnxruntime.InferenceSession(str(repo / name / "1" / "model.onnx"),
                                                       options)
    input_name, _, output_name, _ = io_of(name)
    return _sessions[name].run([output_name], {input_name: x})[0]


def infer(url, name, x, grpc):
    mod = grpcclient if grpc else httpclient
    c = mod.InferenceServerClient(url)
    input_name, _, output_name, _ = io_of(name)
    i = mod.InferInput(input_name, list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return c.infer(name, [i], outputs=[mod.InferRequestedOutput(output_name)]).as_numpy(output_name)


def close(got, want):
    # fp32 tolerance (docs/native-engine.md): 2e-4 of the output's largest magnitude; the engine
    # sums in another order than ONNX Runtime (implicit GEMM, folded BatchNormalization).
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = float(np.abs(want).max())
    diff = float(np.abs(got - want).max())
    assert diff <= 2e-4 * max(scale, 1e-3), (diff, scale)
    return diff


def test_every_cnn_runs_on_the_native_engine(vision_server):
    log = vision_server.read_log()
    for name in MODELS:
        assert f"model '{name}' (configured for onnxruntime) runs on the native engine" in log, name
        threads = 3 if name == "mobilenet_v2" else 1
        assert f"{threads} intra-op thread(s) per CPU instance" in next(
            ln for ln in log.splitlines() if f"model '{name}' (configured" in ln), name
        assert f"model '{name}': graph passes:" in log, name
    # Every BatchNormalization folds into its Conv, every residual Add and ReLU(6) joins a Conv's
    # epilogue, and the whole network runs channels-last between one conversion in and one out.
    for name, convs, residuals, activations in (("resnet50", 53, 16, 49),
                                                ("resnext50", 53, 16, 49),
                                                ("mobilenet_v2", 52, 10, 35)):
        line = next(ln for ln in log.splitlines() if f"model '{name}': graph passes:" in ln)
        assert f"BatchNormalization folded into Conv: {convs};" in line, line
        assert f"fused: {residuals} residual Add, {activations} activation" in line, line
        assert f"channels-last: {convs} Conv, 2 layout conversions" in line, line
    # MobileNetV2's 17 blocks run as one node each: the depthwise convolution with the 1x1 after it
    # and (all but the first, whose depthwise reads the stem) the 1x1 before it.
    line = next(ln for ln in log.splitlines() if "model 'mobilenet_v2': graph passes:" in ln)
    assert "depthwise Conv blocks fused: 16 1x1 before, 17 1x1 after" in line, line
    if "ocr_direction" in REAL:  # Paddle's HardSwish as Add/Clip/Mul/Div, then into the Convs
        line = next(ln for ln in log.splitlines() if "model 'ocr_direction': graph passes:" in ln)
        assert "HardSwish patterns fused: 18;" in line, line
        # (Its scale before each HardSwish folds into the Conv, which then takes the activation.)
        assert "constant Mul/Add folded into Conv: 18;" in line, line
        assert "fused: 7 residual Add, 42 activation" in line, line
    if "ocr_recognizer" in REAL:  # SVTR's layer norms written out (ReduceMean, Pow, Sqrt, ...)
        line = next(ln for ln in log.splitlines() if "model 'ocr_recognizer': graph passes:" in ln)
        assert "LayerNormalization patterns fused: 5;" in line, line


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_int8_convolutions_stay_close_to_onnxruntime(vision_server, vision_repo, grpc):
    line = next(ln for ln in vision_server.read_log().splitlines()
                if "model 'resnet50_int8': graph passes:" in ln)
    assert "Conv weights packed: 53 (53 in int8)" in line, line
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, [4, 3, 64, 64]).astype(np.float32)
    url = vision_server.grpc_url if grpc else vision_server.url
    got = infer(url, "resnet50_int8", x, grpc)
    want = reference(vision_repo, "resnet50", x)
    # Weights per output channel, each window per row: a few percent of the largest output on
    # random weights (docs/native-engine.md), and never the exact fp32 answer.
    diff = float(np.abs(got - want).max()) / float(np.abs(want).max())
    assert 1e-6 < diff <= 0.06, diff
    assert (got.argmax(1) == want.argmax(1)).all()


def test_precision_variants_of_a_cnn_are_measured_and_int8_serves(vision_server, vision_repo):
    c = httpclient.InferenceServerClient(vision_server.url)
    deadline = time.time() + 20
    while True:
        v = c.get_inference_statistics("resnet50_variants")["model_stats"][0]["variants"]
        if v["active"] == "int8" or time.time() > deadline:
            break
        time.sleep(0.1)
    by_name = {x["name"]: x for x in v["variants"]}
    assert by_name["fp32"]["admitted"] and by_name["int8"]["admitted"], v
    assert by_name["fp32"]["top1_agreement"] == 1 and by_name["fp32"]["max_abs_error"] == 0
    assert 0.9 <= by_name["int8"]["top1_agreement"] <= 1 and by_name["int8"]["max_abs_error"] > 0
    assert v["active"] == "int8", v
    x = np.random.default_rng(13).uniform(-1, 1, [2, 3, 64, 64]).astype(np.float32)
    got = infer(vision_server.url, "resnet50_variants", x, False)
    want = reference(vision_repo, "resnet50", x)
    assert (got.argmax(1) == want.argmax(1)).all()
    assert float(np.abs(got - want).max()) / float(np.abs(want).max()) <= 0.06


def smoothing_line(log, name):
    return next(ln for ln in log.splitlines()
                if f"model '{name}': int8 activations smoothed per channel:" in ln)


def test_int8_with_calibration_inputs_smooths_activations_only_where_that_pays(
        vision_server, vision_repo):
    # The load measures both int8 graphs against fp32 on the calibration inputs and keeps the
    # smoothed one only if it comes closer (its numbers in the log line).
    log = vision_server.read_log()
    for name, layers in (("resnet50_variants", 54), ("ocr_recognizer_int8", 31)):  # (Conv, Gemm)
        if name == "ocr_recognizer_int8" and "ocr_recognizer" not in REAL:
            continue
        line = smoothing_line(log, name)
        m = re.search(r"smoothed per channel: (\d+) of (\d+) calibrated layers: (kept|dropped) "
                      r"\(rms error ([0-9.e+-]+) against ([0-9.e+-]+) without, top-1 agreement "
                      r"([0-9.]+) against ([0-9.]+), on (\d+) calibration rows\)", line)
        assert m, line
        smoothed, calibrated, verdict = int(m[1]), int(m[2]), m[3]
        rms, rms_without, top1, top1_without = map(float, m.group(4, 5, 6, 7))
        assert calibrated == layers and 0 <= smoothed <= calibrated, line
        assert int(m[8]) == (16 if name == "resnet50_variants" else 8), line
        assert (verdict == "kept") == (rms < rms_without and top1 >= top1_without), line
    if "ocr_recognizer" not in REAL:
        return
    x = text_strokes(2, 77)
    got = infer(vision_server.url, "ocr_recognizer_int8", x, False)
    want = reference(vision_repo, "ocr_recognizer", x)
    assert got.shape == want.shape
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.85
    assert 1e-7 < float(np.abs(got - want).mean()) <= 1e-3  # (probabilities over 6,625 classes)


def test_a_refused_attribute_sends_the_model_to_onnxruntime(vision_server):
    log = vision_server.read_log()
    assert "model 'cubic': the native engine cannot run it" in log
    assert "mode 'cubic' is not supported" in log
    assert "model 'cubic' runs on ONNX Runtime" in log
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    assert infer(vision_server.url, "cubic", x, False).shape == (1, 1, 8, 8)


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
@pytest.mark.parametrize("name", MODELS)
def test_answers_match_onnxruntime(vision_server, vision_repo, name, grpc):
    _, dims, _, _ = io_of(name)
    rng = np.random.default_rng(3)
    for batch in (1, 3):
        x = rng.uniform(-1, 1, [batch] + dims).astype(np.float32)
        got = infer(vision_server.grpc_url if grpc else vision_server.url, name, x, grpc)
        close(got, reference(vision_repo, name, x))


def test_constant_scales_fold_into_convs_only_per_channel(vision_server, vision_repo):
    log = vision_server.read_log()
    line = next(ln for ln in log.splitlines() if "model 'scaled': graph passes:" in ln)
    assert "constant Mul/Add folded into Conv: 2;" in line, line  # not the [C] one
    assert "fused: 0 residual Add, 1 activation" in line, line
    x = np.random.default_rng(8).uniform(-1, 1, [2, 3, 6, 6]).astype(np.float32)
    for grpc in (False, True):
        close(infer(vision_server.grpc_url if grpc else vision_server.url, "scaled", x, grpc),
              reference(vision_repo, "scaled", x))
    if "ocr_detector" in REAL:  # MobileOne's learned scale and shift after each convolution
        line = next(ln for ln in log.splitlines() if "model 'ocr_detector': graph passes:" in ln)
        # (56 after convolutions and the head's two after its ConvTransposes, with one
        # BatchNormalization; the learned scalars after each HardSwish into the 1x1 after it.)
        assert "constant Mul/Add folded into Conv: 58;" in line, line
        assert "BatchNormalization folded into Conv: 3;" in line, line
        assert "constant Mul/Add folded into the Conv reading them: 20;" in line, line


@pytest.mark.parametrize("name", ["mobilenet_v2", "small_cnn"])
def test_concurrent_requests_are_batched_and_each_answered(vision_server, vision_repo, name):
    _, dims, _, _ = io_of(name)
    rng = np.random.default_rng(11)
    xs = [rng.uniform(-1, 1, [1] + dims).astype(np.float32) for _ in range(16)]
    c = httpclient.InferenceServerClient(vision_server.url)
    before = c.get_inference_statistics(name)["model_stats"][0]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda x: infer(vision_server.url, name, x, False), xs))
    for x, got in zip(xs, answers):  # every request its own answer
        close(got, reference(vision_repo, name, x))
    after = c.get_inference_statistics(name)["model_stats"][0]
    requests = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert requests == 16
    assert executions < 16, (requests, executions)  # dynamic batching joined some


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_batches_split_row_by_row_answer_as_whole_batches(vision_server, vision_repo, grpc):
    log = vision_server.read_log()
    assert "model 'resnet50_rows': batches run row by row (nereid.split_batches)" in log, log
    # "auto" measured the others at load and logged its choice (or, on a machine so loaded that one
    # row falls outside the window it measures, why it did not).
    assert ("model 'resnet50': 8 rows as one batch" in log or
            "model 'resnet50': one row " in log and "not measured" in log), log
    url = vision_server.grpc_url if grpc else vision_server.url
    # resnet50_rows2: two threads, rows side by side (3 rows), or whole (1 row: fewer than threads).
    for model in ("resnet50_rows", "resnet50_rows2"):
        for rows in (3, 1):
            x = np.random.default_rng(21 + rows).uniform(-1, 1, [rows, 3, 64, 64]).astype(np.float32)
            got = infer(url, model, x, grpc)
            close(got, reference(vision_repo, "resnet50", x))
            # Row by row against the whole batch: the same within the fp32 tolerance (few-row
            # products take another kernel, which sums in another order).
            close(got, infer(url, "resnet50", x, grpc))
        # Concurrent requests batched by the scheduler, then run row by row: each its own answer.
        xs = [np.random.default_rng(30 + i).uniform(-1, 1, [1 + i % 2, 3, 64, 64]).astype(np.float32)
              for i in range(8)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda v, m=model: infer(url, m, v, grpc), xs))
        for v, a in zip(xs, answers):
            close(a, reference(vision_repo, "resnet50", v))


def test_bad_parameter_values_refuse_the_model(tmp_path):
    repo = tmp_path / "models"
    (repo / "m" / "1").mkdir(parents=True)
    onnx.save(vision_models.small_cnn(seed=1, size=32, classes=10), str(repo / "m" / "1" / "model.onnx"))
    (repo / "m" / "config.pbtxt").write_text(
        config("m", "input", [3, 32, 32], "output", [10]) +
        'parameters { key: "nereid.split_batches" value { string_value: "sometimes" } }\n')
    (repo / "q" / "1").mkdir(parents=True)  # and an int8 smoothing that is no alpha
    shutil.copy(repo / "m" / "1" / "model.onnx", repo / "q" / "1" / "model.onnx")
    (repo / "q" / "config.pbtxt").write_text(
        config("q", "input", [3, 32, 32], "output", [10]) +
        'parameters { key: "precision" value { string_value: "int8" } }\n'
        'parameters { key: "nereid.int8_smoothing" value { string_value: "1.5" } }\n')
    s = Server(str(repo), "--onnx-engine=native", "--exit-on-error=false", "--strict-readiness=false")
    try:
        c = httpclient.InferenceServerClient(s.url)
        assert not c.is_model_ready("m") and not c.is_model_ready("q")
        log = s.read_log()
        assert "parameter 'nereid.split_batches' must be auto, true or false, got 'sometimes'" in log
        assert ("model 'q': parameter 'nereid.int8_smoothing' must be auto, off or an alpha from "
                "0 to 1, got '1.5'") in log
    finally:
        s.stop()
