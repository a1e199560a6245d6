"""The Python backend: model.py files written to Triton's documented Python-backend API, served
unchanged (backends/python, docs/python-backend.md): add/sub with dynamic batching, a numpy
preprocessing model with strings, auto_complete_config, a decoupled model sending N responses (from
execute and from a thread), is_cancelled() (a decoupled stream cancelled by its client), BLS,
errors of every kind, stubs that die mid-request or mid-load, and custom metrics
(pb_utils.MetricFamily / Metric on the metrics endpoint)."""
import os
import queue
import signal
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Server

MODELS = {
    "sequence_echo": ('''
name: "sequence_echo"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
''', '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            seen = json.dumps({"id": r.correlation_id(), "flags": r.flags(),
                               "parameters": json.loads(r.parameters())})
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([seen.encode()], dtype=np.object_))]))
        return out
'''),
    "add_sub": ('''
name: "add_sub"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
''', '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(self.model_config, "OUTPUT0")["data_type"])
        self.batches = []
        pb_utils.Logger.log_info(
            f"add_sub initialized: {args['model_name']} v{args['model_version']} "
            f"{args['model_instance_kind']} {args['model_instance_name']}")

    def execute(self, requests):
        self.batches.append(len(requests))
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            params = json.loads(request.parameters())
            if params.get("fail"):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "asked to fail", pb_utils.TritonError.INVALID_ARG)))
                continue
            out = [pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtype)),
                   pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtype))]
            responses.append(pb_utils.InferenceResponse(output_tensors=out))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info(f"add_sub finalized after batches {self.batches}")
'''),
    "preprocess": ('''
backend: "python"
max_batch_size: 0
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] },
        { name: "CAPTION" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "PIXELS" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] },
         { name: "WORDS" data_type: TYPE_STRING dims: [ -1 ] } ]
''', '''
import numpy as np
import triton_python_backend_utils as pb_utils

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            caption = pb_utils.get_input_tensor_by_name(request, "CAPTION").as_numpy()
            pixels = ((image.astype(np.float32) / 255 - MEAN) / STD).transpose(2, 0, 1)
            words = np.array([w.decode().upper().encode() for w in caption], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PIXELS", np.ascontiguousarray(pixels)),
                pb_utils.Tensor("WORDS", words)]))
        return responses
'''),
    "auto": ('''
backend: "python"
''', '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_INT32", "dims": [2]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 10)]) for r in requests]
'''),
    "repeat": ('''
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "THREAD" data_type: TYPE_BOOL dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
''', '''
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            in_thread = bool(pb_utils.get_input_tensor_by_name(request, "THREAD").as_numpy()[0])
            sender = request.get_response_sender()
            if in_thread:
                threading.Thread(target=self.send_all, args=(sender, values.copy(), 0.01)).start()
            else:
                self.send_all(sender, values, 0)
        return None

    @staticmethod
    def send_all(sender, values, delay):
        import time
        for i, v in enumerate(values):
            time.sleep(delay)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([v], np.int32)),
                pb_utils.Tensor("IDX", np.array([i], np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''),
    "until_cancelled": ('''
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "REPORT" data_type: TYPE_BOOL dims: [ 1 ] } ]
output [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
''', '''
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """REPORT false: a response every 20 ms from a thread until the client cancels (at most 10 s).
    REPORT true: one response, how many streams ended by cancellation so far, and whether this
    request itself reads as cancelled (it must not)."""

    def initialize(self, args):
        self.cancelled_streams = 0

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            if bool(pb_utils.get_input_tensor_by_name(request, "REPORT").as_numpy()[0]):
                n = self.cancelled_streams * 10 + int(request.is_cancelled())
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("N", np.array([n], np.int32))]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                threading.Thread(target=self.stream, args=(sender,)).start()
        return None

    def stream(self, sender):
        for i in range(500):
            if sender.is_cancelled():
                self.cancelled_streams += 1
                break
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("N", np.array([i], np.int32))]))
            time.sleep(0.02)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''),
    "cancel_state": ('''
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "CANCELLED" data_type: TYPE_BOOL dims: [ 1 ] } ]
''', '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "CANCELLED", np.array([r.is_cancelled()]))]) for r in requests]
'''),
    "faulty": ('''
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
''', '''
import os
import signal
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0].decode()
        if mode == "raise":
            raise ValueError("the model raised this")
        if mode == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "count":
            return []
        if mode == "dtype":
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.ones(1, np.float64))])]
        if mode == "missing":
            return [pb_utils.InferenceResponse([])]
        if mode in ("forge", "garbage"):  # the model writes to the stub's socket itself
            import json, struct
            header = (json.dumps({"op": "execute_done", "id": 123456, "responses": "x"}).encode()
                      if mode == "forge" else b"{not json")
            os.write(3, struct.pack("<II", len(header), 0) + header)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([os.getpid()], np.float32))])]
'''),
    "bls": ('''
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
''', '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Calls other models of the server (BLS): the ONNX model double_onnx, add_sub, repeat."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            if mode == "onnx":  # x -> double_onnx -> y = 2x
                r = pb_utils.InferenceRequest(model_name="double_onnx", requested_output_names=["y"],
                                              inputs=[pb_utils.Tensor("x", x.reshape(1, 4))]).exec()
                if r.has_error():
                    raise pb_utils.TritonModelException(r.error().message())
                y = pb_utils.get_output_tensor_by_name(r, "y").as_numpy().reshape(4)
            elif mode == "chain":  # add_sub(2x, x).OUTPUT0 = 3x
                two = pb_utils.InferenceRequest(model_name="double_onnx", requested_output_names=["y"],
                                                inputs=[pb_utils.Tensor("x", x.reshape(1, 4))]).exec()
                twox = pb_utils.get_output_tensor_by_name(two, "y").as_numpy()
                r = pb_utils.InferenceRequest(
                    model_name="add_sub", requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", twox),
                            pb_utils.Tensor("INPUT1", x.reshape(1, 4))]).exec()
                y = pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy().reshape(4)
            elif mode == "decoupled":  # every value repeat sends back, in order
                values = []
                for r in pb_utils.InferenceRequest(
                        model_name="repeat", requested_output_names=["OUT"],
                        inputs=[pb_utils.Tensor("IN", x.astype(np.int32)),
                                pb_utils.Tensor("THREAD", np.array([False]))]).exec(decoupled=True):
                    if r.output_tensors():
                        values.append(pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy()[0])
                y = np.array(values, np.float32)
            else:  # a model that does not exist: its error comes back in the response
                r = pb_utils.InferenceRequest(model_name="no_such_model", requested_output_names=["y"],
                                              inputs=[pb_utils.Tensor("x", x)]).exec()
                responses.append(pb_utils.InferenceResponse(error=r.error()))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y.astype(np.float32))]))
        return responses
'''),
    "bls_async": ('''
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
''', '''
import asyncio
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().reshape(1, 4)
            # two models at once: double_onnx(x) + add_sub(x, x).OUTPUT1 (= 0) -> 2x
            a, b = await asyncio.gather(
                pb_utils.InferenceRequest(model_name="double_onnx", requested_output_names=["y"],
                                          inputs=[pb_utils.Tensor("x", x)]).async_exec(),
                pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=["OUTPUT1"],
                                          inputs=[pb_utils.Tensor("INPUT0", x),
                                                  pb_utils.Tensor("INPUT1", x)]).async_exec())
            y = (pb_utils.get_output_tensor_by_name(a, "y").as_numpy()
                 + pb_utils.get_output_tensor_by_name(b, "OUTPUT1").as_numpy())
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y.reshape(4))]))
        return responses
'''),
    "metrics": ('''
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
''', r'''
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils

Family = pb_utils.MetricFamily


class TritonPythonModel:
    def initialize(self, args):
        self.requests = Family(name="nereid_test_requests_total",
                               description="Requests seen by the metrics model",
                               kind=pb_utils.COUNTER)  # the module's constant, as older examples
        self.counter = self.requests.Metric(
            labels={"model": args["model_name"], "version": args["model_version"]})
        self.queue = Family("nereid_test_queue", "A gauge\nwith a newline", Family.GAUGE)
        self.gauge = self.queue.Metric(labels={"path": 'a"b\\c'})
        self.latency = Family("nereid_test_latency_seconds", "Latency", Family.HISTOGRAM)
        self.histogram = self.latency.Metric(labels={"model": "m"},
                                             buckets=[0.1, 1.0, 2.5, 5.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            case = json.loads(request.parameters()).get("case", "count")
            result = getattr(self, "case_" + case)()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([str(result).encode()], dtype=object))]))
        return responses

    def case_count(self):
        self.counter.increment(1)
        return self.counter.value()

    def case_pid(self):
        return os.getpid()

    def case_observe(self):
        for v in (0.05, 1.5, 6.0):
            self.histogram.observe(v)
        self.gauge.set(42.5)
        return "ok"

    def case_rules(self):
        failures = []

        def raises(what, fn, text=""):
            try:
                fn()
            except pb_utils.TritonModelException as e:
                if text not in str(e):
                    failures.append(f"{what}: raised '{e}', expected '{text}'")
                return
            failures.append(f"{what}: did not raise")

        raises("counter decrement", lambda: self.counter.increment(-1), "non-negative")
        raises("counter set", lambda: self.counter.set(1), "not supported for a counter")
        raises("counter observe", lambda: self.counter.observe(1))
        raises("histogram value", lambda: self.histogram.value())
        raises("histogram increment", lambda: self.histogram.increment(1))
        raises("histogram set", lambda: self.histogram.set(1))
        raises("histogram without buckets", lambda: self.latency.Metric(labels={"x": "1"}))
        raises("unsorted buckets", lambda: self.latency.Metric(buckets=[2.5, 0.1]), "ascending")
        raises("repeated buckets", lambda: self.latency.Metric(buckets=[1, 1, 2]), "ascending")
        self.empty = self.latency.Metric(labels={"empty": "buckets"}, buckets=[])
        raises("another kind under a taken name",
               lambda: Family("nereid_test_queue", "x", Family.COUNTER), "already exists")
        raises("a bad name", lambda: Family("2bad name", "x", Family.GAUGE), "Prometheus")
        raises("the server's prefix", lambda: Family("nv_mine", "x", Family.GAUGE), "nv_")
        raises("a bad label", lambda: self.queue.Metric(labels={"bad-label": "x"}), "label name")
        g = self.queue.Metric(labels={"path": "gauge-rules"})
        g.increment(2023.0)
        g.increment(-23.5)
        if g.value() != 1999.5:
            failures.append(f"gauge after increments: {g.value()}")
        g.set(999.9)
        if g.value() != 999.9:
            failures.append(f"gauge after set: {g.value()}")
        twin = Family("nereid_test_queue", "another description", Family.GAUGE)
        same = twin.Metric(labels={"path": "gauge-rules"})
        if same.value() != 999.9:
            failures.append(f"one name and kind is one family: {same.value()}")
        short_lived = Family("nereid_test_short_lived", "gone soon", Family.COUNTER)
        orphan = short_lived.Metric()
        del short_lived
        raises("a metric of a deleted family", lambda: orphan.increment(1), "has been deleted")
        return "ok" if not failures else "; ".join(failures)
'''),
}


def write(repo, name, config, code):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config).lstrip())
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(code).lstrip())


@pytest.fixture(scope="module")
def py_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("python") / "models"
    for name, (config, code) in MODELS.items():
        write(repo, name, config, code)
    # The ONNX model the BLS models call (ONNX Runtime backend): y = x + x.
    from onnx import TensorProto, helper
    (repo / "double_onnx" / "1").mkdir(parents=True)
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])])
    (repo / "double_onnx" / "1" / "model.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    (repo / "double_onnx" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    s = Server(str(repo), env={"NEREID_PYTHON": sys.executable})
    yield s
    assert s.stop() == 0, s.read_log()
    assert "add_sub finalized after batches" in open(s.log_path).read()


def add_sub_inputs(mod, a, b):
    inputs = [mod.InferInput("INPUT0", list(a.shape), "FP32"), mod.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_add_sub(py_server, mod):
    url = py_server.url if mod is httpclient else py_server.grpc_url
    c = mod.InferenceServerClient(url)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, np.float32)
    r = c.infer("add_sub", add_sub_inputs(mod, a, b))
    assert (r.as_numpy("OUTPUT0") == a + b).all() and (r.as_numpy("OUTPUT1") == a - b).all()
    r = c.infer("add_sub", add_sub_inputs(mod, a, b), outputs=[mod.InferRequestedOutput("OUTPUT1")])
    assert r.as_numpy("OUTPUT0") is None and (r.as_numpy("OUTPUT1") == a - b).all()
    assert "add_sub initialized: add_sub v1 CPU add_sub_0_0" in py_server.read_log()


@pytest.mark.parametrize("mod", [httpclient, grpcclient])
def test_sequence_id_and_flags_reach_the_model(py_server, mod):
    """The client's sequence_id (a number, or a string) and sequence_start/_end reach execute() as
    correlation_id() and flags(); like Triton, the parameters the server acts on itself are not
    among request.parameters()."""
    import json
    url = py_server.url if mod is httpclient else py_server.grpc_url
    c = mod.InferenceServerClient(url)
    x = mod.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.zeros(1, np.float32))

    def seen(**kw):
        r = c.infer("sequence_echo", [x], **kw)
        return json.loads(r.as_numpy("SEEN")[0])

    # HTTP carries any uint64; gRPC's int64_param up to 2**63 - 1 (tritonclient's own limit).
    big = 2**64 - 5 if mod is httpclient else 2**63 - 5
    got = seen(sequence_id=big, sequence_start=True, priority=1, timeout=10**9,
               parameters={"custom": 7})
    assert got == {"id": big, "flags": 1, "parameters": {"custom": 7}}
    assert seen(sequence_id="user-42", sequence_end=True) == {"id": "user-42", "flags": 2,
                                                               "parameters": {}}
    assert seen() == {"id": 0, "flags": 0, "parameters": {}}
    with pytest.raises(InferenceServerException, match="string correlation ID cannot be longer "
                                                       "than 128 characters"):
        c.infer("sequence_echo", [x], sequence_id="s" * 129)


def test_dynamic_batching_hands_execute_several_requests(py_server):
    c = httpclient.InferenceServerClient(py_server.url, concurrency=8)
    pending = []
    for k in range(8):
        a = np.full((1, 4), k, np.float32)
        pending.append((k, c.async_infer("add_sub", add_sub_inputs(httpclient, a, a))))
    for k, p in pending:
        assert (p.get_result().as_numpy("OUTPUT0") == 2 * k).all()
    stats = c.get_inference_statistics("add_sub")["model_stats"][0]
    assert stats["execution_count"] < stats["inference_count"]


def test_triton_error_per_request_with_its_code(py_server):
    c = httpclient.InferenceServerClient(py_server.url)
    a = np.ones((1, 4), np.float32)
    with pytest.raises(InferenceServerException, match="asked to fail") as e:
        c.infer("add_sub", add_sub_inputs(httpclient, a, a), parameters={"fail": True})
    assert e.value.status() == "400"  # TritonError.INVALID_ARG


def test_numpy_preprocessing_with_strings(py_server):
    c = grpcclient.InferenceServerClient(py_server.grpc_url)
    image = np.random.default_rng(1).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    caption = np.array([b"a", b"red", b"fox"], dtype=np.object_)
    inputs = [grpcclient.InferInput("IMAGE", [5, 7, 3], "UINT8"),
              grpcclient.InferInput("CAPTION", [3], "BYTES")]
    inputs[0].set_data_from_numpy(image)
    inputs[1].set_data_from_numpy(caption)
    r = c.infer("preprocess", inputs)
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    want = ((image.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1)
    assert np.abs(r.as_numpy("PIXELS") - want).max() < 1e-6
    assert list(r.as_numpy("WORDS")) == [b"A", b"RED", b"FOX"]


def test_auto_complete_config_from_model_py(py_server):
    c = httpclient.InferenceServerClient(py_server.url)
    config = c.get_model_config("auto")
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    assert config["input"][0]["name"] == "X" and config["output"][0]["data_type"] == "TYPE_INT32"
    x = np.array([[1, 2]], np.int32)
    i = httpclient.InferInput("X", [1, 2], "INT32")
    i.set_data_from_numpy(x)
    assert (c.infer("auto", [i]).as_numpy("Y") == x * 10).all()


@pytest.mark.parametrize("in_thread", [False, True], ids=["from_execute", "from_a_thread"])
def test_decoupled_model_sends_n_responses(py_server, in_thread):
    results = queue.Queue()
    c = grpcclient.InferenceServerClient(py_server.grpc_url)
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        values = np.array([4, 8, 15, 16, 23], np.int32)
        inputs = [grpcclient.InferInput("IN", [5], "INT32"), grpcclient.InferInput("THREAD", [1], "BOOL")]
        inputs[0].set_data_from_numpy(values)
        inputs[1].set_data_from_numpy(np.array([in_thread]))
        c.async_stream_infer("repeat", inputs, request_id="r1")
        got = []
        for _ in range(5):
            result, error = results.get(timeout=10)
            assert error is None, error
            got.append((int(result.as_numpy("IDX")[0]), int(result.as_numpy("OUT")[0])))
        assert got == list(enumerate(values.tolist()))
    finally:
        c.stop_stream()


def test_is_cancelled_is_false_for_a_live_request(py_server):
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    c = httpclient.InferenceServerClient(py_server.url)
    assert c.infer("cancel_state", [x]).as_numpy("CANCELLED").tolist() == [False]


def test_a_decoupled_model_sees_its_stream_cancelled(py_server):
    def stream(report, cancel_after):
        results = queue.Queue()
        c = grpcclient.InferenceServerClient(py_server.grpc_url)
        c.start_stream(callback=lambda result, error: results.put((result, error)))
        i = grpcclient.InferInput("REPORT", [1], "BOOL")
        i.set_data_from_numpy(np.array([report]))
        c.async_stream_infer("until_cancelled", [i])
        got = []
        for _ in range(cancel_after):
            result, error = results.get(timeout=10)
            assert error is None, error
            got.append(int(result.as_numpy("N")[0]))
        c.stop_stream(cancel_requests=True)
        return got

    assert stream(False, 3) == [0, 1, 2]  # then cancelled by the client
    # The model's thread notices within a few of its 20 ms steps and stops sending.
    deadline = time.time() + 10
    while (report := stream(True, 1)[0]) < 10 and time.time() < deadline:
        time.sleep(0.05)
    assert report == 10, report  # one stream ended by cancellation; the report itself is live


def faulty(c, mode):
    i = httpclient.InferInput("MODE", [1], "BYTES")
    i.set_data_from_numpy(np.array([mode.encode()], dtype=np.object_))
    return c.infer("faulty", [i])


@pytest.mark.parametrize("mode,message", [
    ("raise", "ValueError: the model raised this"),
    ("count", "execute\\(\\) must return a list of 1 InferenceResponse objects"),
])
def test_model_errors_are_clear_and_the_model_keeps_serving(py_server, mode, message):
    c = httpclient.InferenceServerClient(py_server.url)
    with pytest.raises(InferenceServerException, match=message):
        faulty(c, mode)
    assert faulty(c, "ok").as_numpy("OUT").shape == (1,)


def test_a_requested_output_execute_left_out_is_left_out_of_the_response(py_server):
    """Triton's Python backend sends what execute() returned (its ensemble QA relies on it)."""
    c = httpclient.InferenceServerClient(py_server.url)
    assert faulty(c, "missing").as_numpy("OUT") is None
    assert faulty(c, "ok").as_numpy("OUT").shape == (1,)


def test_an_output_of_another_dtype_than_the_config_is_sent_as_it_is(py_server):
    """As Triton's Python backend does (its bls_decoupled example relies on it), with a warning."""
    c = httpclient.InferenceServerClient(py_server.url)
    for _ in range(2):
        out = faulty(c, "dtype").as_numpy("OUT")
        assert out.dtype == np.float64 and (out == 1).all()
    log = py_server.read_log()
    assert log.count("output 'OUT' is FP32 in the config, but execute() returned FP64") == 1


def test_a_stub_killed_mid_request_fails_it_and_is_restarted(py_server):
    c = httpclient.InferenceServerClient(py_server.url)
    pid_before = int(faulty(c, "ok").as_numpy("OUT")[0])
    with pytest.raises(InferenceServerException, match="Python stub ended during execute.*signal 9"):
        faulty(c, "crash")
    pid_after = int(faulty(c, "ok").as_numpy("OUT")[0])
    assert pid_after != pid_before
    a = np.ones((1, 4), np.float32)  # the other models never noticed
    assert (c.infer("add_sub", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT0") == 2).all()
    assert "faulty' instance 'faulty_0_0': starting its Python stub again" in py_server.read_log()


def test_a_stub_killed_mid_load_fails_the_load_and_the_server_keeps_serving(tmp_path):
    pid_file = tmp_path / "pid"
    repo = tmp_path / "models"
    write(repo, "slow", '''
        backend: "python"
        max_batch_size: 0
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        ''', f'''
        import os, time
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def initialize(self, args):
                open({str(pid_file)!r}, "w").write(str(os.getpid()))
                time.sleep(60)

            def execute(self, requests):
                return []
        ''')
    write(repo, "add_sub", *MODELS["add_sub"])
    s = Server(str(repo), "--model-control-mode=explicit", "--load-model=add_sub",
               env={"NEREID_PYTHON": sys.executable})
    try:
        c = httpclient.InferenceServerClient(s.url)
        outcome = {}
        loader = threading.Thread(target=lambda: outcome.setdefault(
            "error", _load(httpclient.InferenceServerClient(s.url, network_timeout=60), "slow")))
        loader.start()
        deadline = time.time() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.time() < deadline
            time.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        loader.join(timeout=30)
        assert "Python stub ended during initialize() (killed by signal 9)" in outcome["error"]
        assert not c.is_model_ready("slow")
        a = np.ones((1, 4), np.float32)
        assert (c.infer("add_sub", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT0") == 2).all()
    finally:
        assert s.stop() == 0, s.read_log()


def _load(client, name):
    try:
        client.load_model(name)
        return ""
    except InferenceServerException as e:
        return str(e)


def test_missing_interpreter_is_a_clear_load_error(tmp_path):
    repo = tmp_path / "models"
    write(repo, "add_sub", *MODELS["add_sub"])
    s = Server(str(repo), "--exit-on-error=false", "--strict-readiness=false",
               env={"NEREID_PYTHON": "/nonexistent/python"})
    try:
        index = httpclient.InferenceServerClient(s.url).get_model_repository_index()
        reason = [m for m in index if m["name"] == "add_sub"][0]["reason"]
        assert "cannot start the Python interpreter '/nonexistent/python'" in reason, reason
    finally:
        assert s.stop() == 0


def bls(c, mode, x):
    inputs = [httpclient.InferInput("X", [4], "FP32"), httpclient.InferInput("MODE", [1], "BYTES")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(np.array([mode.encode()], dtype=np.object_))
    return c.infer("bls", inputs).as_numpy("Y")


def test_bls_calls_an_onnx_model_and_chains_models(py_server):
    c = httpclient.InferenceServerClient(py_server.url)
    x = np.array([1, 2, 3, 4], np.float32)
    assert (bls(c, "onnx", x) == 2 * x).all()
    assert (bls(c, "chain", x) == 3 * x).all()
    assert (bls(c, "decoupled", x) == x).all()  # repeat's responses, collected in order
    with pytest.raises(InferenceServerException, match="no_such_model"):
        bls(c, "missing", x)
    stats = c.get_inference_statistics("double_onnx")["model_stats"][0]
    assert stats["inference_count"] >= 2  # the BLS calls were real inferences of the ONNX model


def test_async_bls_runs_two_models_at_once(py_server):
    c = grpcclient.InferenceServerClient(py_server.grpc_url)
    x = np.array([0.5, -1, 2, 8], np.float32)
    i = grpcclient.InferInput("X", [4], "FP32")
    i.set_data_from_numpy(x)
    assert (c.infer("bls_async", [i]).as_numpy("Y") == 2 * x).all()


def test_frames_forged_by_model_code_do_not_confuse_the_server(py_server):
    """A model's code can write to its stub's socket: a well-formed frame that answers nothing is
    logged and ignored (the request still gets its real answer); a malformed one ends the stub,
    fails that request, and the next request gets a new stub. The server keeps serving."""
    c = httpclient.InferenceServerClient(py_server.url)
    assert faulty(c, "forge").as_numpy("OUT").shape == (1,)
    assert "an unexpected message from its Python stub ('execute_done') was ignored" in py_server.read_log()
    with pytest.raises(InferenceServerException, match="Python stub ended during execute"):
        faulty(c, "garbage")
    assert faulty(c, "ok").as_numpy("OUT").shape == (1,)


def metrics_case(c, case):
    i = httpclient.InferInput("IN", [1], "INT32")
    i.set_data_from_numpy(np.array([0], np.int32))
    return c.infer("metrics", [i], parameters={"case": case}).as_numpy("OUT")[0].decode()


def scrape(server):
    import urllib.request
    return urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics").read().decode()


def test_custom_metrics_counter_gauge_and_histogram(py_server):
    """pb_utils.MetricFamily / Metric as Triton documents them: the samples on the metrics
    endpoint with their labels (escaped), a counter's value read back, a histogram's buckets
    cumulative with +Inf, sum and count."""
    c = httpclient.InferenceServerClient(py_server.url)
    first = float(metrics_case(c, "count"))
    assert float(metrics_case(c, "count")) == first + 1
    assert metrics_case(c, "observe") == "ok"
    text = scrape(py_server)
    lines = set(text.splitlines())
    assert "# TYPE nereid_test_requests_total counter" in lines
    assert f'nereid_test_requests_total{{model="metrics",version="1"}} {int(first) + 1}' in lines
    assert "# HELP nereid_test_queue A gauge\\nwith a newline" in lines
    assert 'nereid_test_queue{path="a\\"b\\\\c"} 42.5' in lines
    assert "# TYPE nereid_test_latency_seconds histogram" in lines
    labels = 'model="m"'
    for le, n in [("0.1", 1), ("1", 1), ("2.5", 2), ("5", 2), ("10", 3), ("+Inf", 3)]:
        assert f'nereid_test_latency_seconds_bucket{{{labels},le="{le}"}} {n}' in lines, le
    assert f"nereid_test_latency_seconds_count{{{labels}}} 3" in lines
    assert f"nereid_test_latency_seconds_sum{{{labels}}} 7.55" in lines


def test_custom_metrics_refuse_what_triton_refuses(py_server):
    """Kinds checked per operation, bucket lists checked, one name and kind shared, another kind
    under a taken name refused, Prometheus names only, and a metric whose family was deleted
    refuses to work."""
    c = httpclient.InferenceServerClient(py_server.url)
    assert metrics_case(c, "rules") == "ok"
    lines = set(scrape(py_server).splitlines())
    assert 'nereid_test_latency_seconds_bucket{empty="buckets",le="+Inf"} 0' in lines
    assert "# HELP nereid_test_queue A gauge\\nwith a newline" in lines  # the first description
    assert not any("nereid_test_short_lived" in line for line in lines)  # its family was deleted


def test_custom_metrics_go_with_their_stub(py_server):
    """A stub that dies takes its metrics with it; the restarted stub registers them afresh."""
    c = httpclient.InferenceServerClient(py_server.url)
    metrics_case(c, "count")
    os.kill(int(metrics_case(c, "pid")), signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            assert float(metrics_case(c, "count")) == 1.0  # a new stub, a new counter
            break
        except InferenceServerException:  # the request that met the dead stub
            time.sleep(0.1)
    else:
        raise AssertionError("the metrics model did not come back")
    assert 'nereid_test_requests_total{model="metrics",version="1"} 1' in scrape(py_server).splitlines()
