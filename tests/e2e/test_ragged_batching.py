"""Triton's ragged batching (docs/ragged-batching.md): inputs with allow_ragged_batch joined end to
end across a dynamic batch whatever their shapes, the batch inputs the server makes for each batch
(element counts plain and accumulated, with a leading zero, the largest count as a shape, each
item's shape as rows or flattened) and batch_output BATCH_SCATTER_WITH_INPUT_SHAPE, as Triton's
qa/L0_batch_input lays its models out (built here with onnx.helper), on ONNX Runtime and on the
native engine. Requests go over one gRPC stream, in order, so that the batcher (1 s queue delay,
max_batch_size 4) joins all four."""
import queue
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper

from conftest import Server
from test_onnxruntime import float_io, write_model


def save(repo, name, nodes, inputs, outputs, config):
    write_model(repo, name, nodes, inputs, outputs, f'name: "{name}"\n' + config)


def echo_model(repo, name, kinds, ragged_dims="[ -1 ]"):
    """RAGGED_INPUT (1-D: every request's elements) and two batch inputs, each output one row per
    request holding its input whole: Reshape to [1, n], times a column of ones as long as the
    batch (BATCH_AND_SIZE_INPUT / itself)."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, -1])
    column = helper.make_tensor("column", TensorProto.INT64, [2], [-1, 1])
    nodes = [helper.make_node("Constant", [], ["shape"], value=shape),
             helper.make_node("Constant", [], ["column"], value=column),
             helper.make_node("Div", ["BATCH_AND_SIZE_INPUT", "BATCH_AND_SIZE_INPUT"], ["ones"]),
             helper.make_node("Reshape", ["ones", "column"], ["expander"])]
    for src, dst in (("RAGGED_INPUT", "RAGGED_OUTPUT"), ("BATCH_AND_SIZE_INPUT", "BATCH_AND_SIZE_OUTPUT"),
                     ("BATCH_INPUT", "BATCH_OUTPUT")):
        nodes += [helper.make_node("Reshape", [src, "shape"], [src + "_row"]),
                  helper.make_node("MatMul", ["expander", src + "_row"], [dst])]
    inputs = [float_io(n, [f"{n}_n"]) for n in ("RAGGED_INPUT", "BATCH_AND_SIZE_INPUT", "BATCH_INPUT")]
    outputs = [float_io(n, [f"{n}_b", f"{n}_n"])
               for n in ("RAGGED_OUTPUT", "BATCH_AND_SIZE_OUTPUT", "BATCH_OUTPUT")]
    config = f"""max_batch_size: 4
input [ {{ name: "RAGGED_INPUT" data_type: TYPE_FP32 dims: {ragged_dims} allow_ragged_batch: true }} ]
output [ {{ name: "RAGGED_OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "BATCH_AND_SIZE_OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "BATCH_OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
batch_input [
  {{ kind: {kinds[0]} target_name: "BATCH_AND_SIZE_INPUT" data_type: TYPE_FP32 source_input: "RAGGED_INPUT" }},
  {{ kind: {kinds[1]} target_name: "BATCH_INPUT" data_type: TYPE_FP32 source_input: "RAGGED_INPUT" }}
]
dynamic_batching {{ max_queue_delay_microseconds: 1000000 }}
backend: "onnxruntime"
"""
    save(repo, name, nodes, inputs, outputs, config)


def build(root):
    """The model repository of Triton's qa/L0_batch_input (its models' names, inputs, outputs and
    configs), in 'root' (a pathlib.Path): scripts/triton_qa_batch_input.sh serves it to Triton's
    own batch_input_test.py."""
    echo_model(root, "ragged_element_count_acc_zero",
               ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO"))
    echo_model(root, "ragged_acc_shape",
               ("BATCH_ACCUMULATED_ELEMENT_COUNT", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"))
    echo_model(root, "batch_item_flatten",
               ("BATCH_ACCUMULATED_ELEMENT_COUNT", "BATCH_ITEM_SHAPE_FLATTEN"), "[ -1, -1 ]")
    # Each item's shape as rows [items, 2], answered per item.
    save(root, "batch_item", [helper.make_node("Identity", ["BATCH_INPUT"], ["BATCH_OUTPUT"])],
         [float_io("RAGGED_INPUT", ["n"]), float_io("BATCH_INPUT", ["items", 2])],
         [float_io("BATCH_OUTPUT", ["items", 2])],
         """max_batch_size: 4
input [ { name: "RAGGED_INPUT" data_type: TYPE_FP32 dims: [ -1, -1 ] allow_ragged_batch: true } ]
output [ { name: "BATCH_OUTPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "BATCH_INPUT" data_type: TYPE_FP32
                source_input: "RAGGED_INPUT" } ]
dynamic_batching { max_queue_delay_microseconds: 1000000 }
backend: "onnxruntime"
""")
    # An identity whose output goes back to each request in its input's shape.
    save(root, "ragged_io", [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
         [float_io("INPUT0", ["n"])], [float_io("OUTPUT0", ["n"])],
         """max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT0" } ]
dynamic_batching { max_queue_delay_microseconds: 1000000 }
backend: "onnxruntime"
""")
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return build(tmp_path_factory.mktemp("ragged") / "models")


@pytest.fixture(scope="module", params=["onnxruntime", "native"])
def server(request, repo):
    s = Server(str(repo), f"--onnx-engine={request.param}")
    s.engine = request.param
    yield s
    assert s.stop() == 0, s.read_log()


def stream(server, model, shapes, name, output):
    """One request per shape (filled with its first dimension), in order over one stream; the
    answers in order."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), answers))
    try:
        for shape in shapes:
            x = grpcclient.InferInput(name, list(shape), "FP32")
            x.set_data_from_numpy(np.full(shape, shape[-1] if len(shape) == 2 else shape[0],
                                          np.float32))
            client.async_stream_infer(model, [x], outputs=[grpcclient.InferRequestedOutput(output)])
        results = [answers.get(timeout=30) for _ in shapes]
    finally:
        client.stop_stream()
        client.close()
    for r in results:
        assert not isinstance(r, Exception), r
    return [r.as_numpy(output) for r in results]


LENGTHS = [[1, 2], [1, 4], [1, 1], [1, 3]]


def test_ragged_inputs_are_joined_end_to_end(server):
    joined = np.concatenate([np.full(n, n, np.float32) for _, n in LENGTHS])
    for got in stream(server, "ragged_acc_shape", LENGTHS, "RAGGED_INPUT", "RAGGED_OUTPUT"):
        np.testing.assert_array_equal(got, [joined])  # every request saw the whole batch


@pytest.mark.parametrize("model,output,want", [
    ("ragged_element_count_acc_zero", "BATCH_AND_SIZE_OUTPUT", [2, 4, 1, 3]),
    ("ragged_element_count_acc_zero", "BATCH_OUTPUT", [0, 2, 6, 7, 10]),
    ("ragged_acc_shape", "BATCH_AND_SIZE_OUTPUT", [2, 6, 7, 10]),
])
def test_element_counts(server, model, output, want):
    for got in stream(server, model, LENGTHS, "RAGGED_INPUT", output):
        np.testing.assert_array_equal(got, [want])


def test_the_largest_count_as_a_shape(server):
    for got in stream(server, "ragged_acc_shape", LENGTHS, "RAGGED_INPUT", "BATCH_OUTPUT"):
        assert got.shape == (1, 4)


def test_item_shapes_flattened_and_as_rows(server):
    shapes = [[1, 4, 1], [1, 1, 2], [1, 1, 2], [1, 2, 2]]
    for got in stream(server, "batch_item_flatten", shapes, "RAGGED_INPUT", "BATCH_OUTPUT"):
        np.testing.assert_array_equal(got, [[4, 1, 1, 2, 1, 2, 2, 2]])
    # A request of two items gets two rows.
    got = stream(server, "batch_item", [[2, 1, 2], [1, 1, 2], [1, 2, 2]], "RAGGED_INPUT",
                 "BATCH_OUTPUT")
    np.testing.assert_array_equal(got[0], [[1, 2], [1, 2]])
    np.testing.assert_array_equal(got[1], [[1, 2]])
    np.testing.assert_array_equal(got[2], [[2, 2]])


def test_outputs_scattered_by_input_shape(server):
    got = stream(server, "ragged_io", LENGTHS, "INPUT0", "OUTPUT0")
    for (_, n), answer in zip(LENGTHS, got):
        np.testing.assert_array_equal(answer, np.full((1, n), n, np.float32))


def test_the_batches_were_formed(server):
    log = server.read_log()
    assert ("runs on the native engine" in log) == (server.engine == "native"), log
    # Four requests per execution: the batcher joined the different lengths.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    stats = client.get_inference_statistics("ragged_io", as_json=True)["model_stats"][0]
    sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
    assert sizes.get(4, 0) >= 1, stats["batch_stats"]
