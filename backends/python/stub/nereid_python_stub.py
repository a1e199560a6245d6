"""The stub process of Nereid's Python backend: one per model instance, running a Triton model.py
(`TritonPythonModel`) in its own interpreter. The backend (backends/python/python_backend.cc)
starts it with three descriptors:

  3  a Unix stream socket: framed messages, each <u32 header length><u32 payload length><header>
     <payload bytes>, little endian; the header is JSON, except an execute call's, which starts
     with "E" (Channel._execute_header)
  4  the input region (memfd, written by the backend): input tensors of the batch being executed
  5  the output region (memfd, mapped and written here, grown with ftruncate): output tensors of
     the batch's responses

Messages in: auto_complete, initialize, execute, finalize, and `infer_response` (answers to the
model's BLS requests). Out: *_done replies, `response` (a decoupled model's response sender),
`infer` (a BLS request: pb_utils.InferenceRequest(...).exec()) and `log`. Tensors of `response`,
`infer` and `infer_response` travel in the frame's payload, since they may be sent from any thread
at any time. Only the main thread reads the socket (no thread hop on the request path): between
requests in its loop, and while a model's BLS call made on the main thread waits (exec() reads
frames until its answer is there; async_exec() has the event loop watch the socket). Answers to
calls made on other threads are handed to them. docs/python-backend.md describes the contract.
"""
import asyncio
import importlib.util
import json
import mmap
import os
import select
import socket
import struct
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb_utils  # noqa: E402

SOCKET_FD, INPUT_FD, OUTPUT_FD = 3, 4, 5


class Channel:
    def __init__(self):
        self.sock = socket.socket(fileno=SOCKET_FD)
        self.lock = threading.Lock()
        self.poller = select.poll()
        self.poller.register(SOCKET_FD, select.POLLIN)
        self.spin_ns = 0  # how long recv() polls before it sleeps (set by initialize)
        self.described = {}  # execute headers' JSON text -> parsed

    def send(self, header, payload=b""):
        data = json.dumps(header).encode()
        with self.lock:
            self.sock.sendall(struct.pack("<II", len(data), len(payload)) + data)
            if payload:
                self.sock.sendall(payload)

    def _exact(self, n):
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def recv(self):
        if self.spin_ns:  # the next request often comes within microseconds: catch it awake
            deadline = time.perf_counter_ns() + self.spin_ns
            while not self.poller.poll(0) and time.perf_counter_ns() < deadline:
                pass
        header_len, payload_len = struct.unpack("<II", self._exact(8))
        frame = self._exact(header_len + payload_len)
        if frame[:1] == b"E":
            return self._execute_header(frame, header_len), frame[header_len:]
        return json.loads(frame[:header_len]), frame[header_len:]

    def _execute_header(self, frame, header_len):
        """An execute call's header: <"E"><u32 requests><u64 call id>, per request <u64 handle><u32
        id length><id>, then <u64 input size> and the JSON list describing the requests (parsed
        once per distinct text: it repeats while the clients send the same shapes)."""
        count, call = struct.unpack_from("<IQ", frame, 1)
        pos, heads = 13, []
        for _ in range(count):
            handle, size = struct.unpack_from("<QI", frame, pos)
            heads.append((handle, frame[pos + 12:pos + 12 + size].decode(errors="replace")))
            pos += 12 + size
        (input_size,) = struct.unpack_from("<Q", frame, pos)
        text = frame[pos + 8:header_len]
        described = self.described.get(text)
        if described is None:
            if len(self.described) >= 64:
                self.described.clear()
            described = self.described[text] = json.loads(text)
        return {"op": "execute", "id": call, "input_size": input_size,
                "requests": [dict(d, handle=h, id=i) for d, (h, i) in zip(described, heads)]}


def tensor_bytes(tensor):
    """(datatype, shape, bytes-like) of a pb_utils.Tensor as the protocol carries it."""
    array = tensor.as_numpy()
    datatype = tensor.triton_dtype()
    if datatype == "BYTES":
        return datatype, list(array.shape), pb_utils.serialize_byte_tensor(array)
    return datatype, list(array.shape), memoryview(np.ascontiguousarray(array)).cast("B")


def error_of(error):
    if error is None:
        return None
    if isinstance(error, pb_utils.TritonError):
        return {"message": error.message(), "code": error.code()}
    return {"message": str(error), "code": pb_utils.TritonError.INTERNAL}


def tensors_from_payload(specs, payload):
    tensors = []
    for spec in specs:
        buf = memoryview(payload)[spec["offset"]:spec["offset"] + spec["size"]]
        if spec["datatype"] == "BYTES":
            array = pb_utils.deserialize_bytes_tensor(buf, spec["shape"])
        else:
            array = np.frombuffer(buf, dtype=pb_utils.triton_to_numpy_type(spec["datatype"]))
            array = array.reshape(spec["shape"]).copy()
        tensors.append(pb_utils.Tensor(spec["name"], array, spec["datatype"]))
    return tensors


class Stub:
    def __init__(self):
        self.channel = Channel()
        self.control = []  # requests from the backend read while a BLS call waited
        self.calls = {}  # BLS call id -> callback(header, payload)
        self.calls_lock = threading.Lock()
        self.next_call = 0
        self.main = threading.main_thread()
        pb_utils._bls_submit = self.bls_submit
        pb_utils._bls_wait = self.bls_wait
        pb_utils._bls_forget = self.forget_call
        pb_utils._is_cancelled = self.query_cancelled
        self.model = None
        self.decoupled = False
        self.input_map = None
        self.input_size = 0
        self.output_capacity = 0
        self.output_map = None
        self.loop = None
        pb_utils.Logger._send = lambda level, message: self.channel.send(
            {"op": "log", "level": level, "message": message})

    # ---- model.py ------------------------------------------------------------------------------
    @staticmethod
    def load_class(model_py):
        sys.path.insert(0, os.path.dirname(model_py))  # model.py may import its neighbours
        spec = importlib.util.spec_from_file_location("model", model_py)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not hasattr(module, "TritonPythonModel"):
            raise pb_utils.TritonModelException(f"{model_py} defines no class TritonPythonModel")
        return module.TritonPythonModel

    def auto_complete(self, header):
        cls = self.load_class(header["model_py"])
        config = pb_utils.ModelConfig(json.loads(header["config"]))
        if hasattr(cls, "auto_complete_config"):
            config = cls.auto_complete_config(config)
            if not isinstance(config, pb_utils.ModelConfig):
                raise pb_utils.TritonModelException(
                    "auto_complete_config must return the pb_utils.ModelConfig it was given")
        return {"config": json.dumps(config.as_dict())}

    def initialize(self, header):
        self.channel.spin_ns = int(header.get("spin_us", 0)) * 1000
        pb_utils._metrics_call = self.metrics_call
        pb_utils._metrics_send = self.channel.send
        cls = self.load_class(header["model_py"])
        self.model = cls()
        args = header["args"]
        self.decoupled = bool(json.loads(args["model_config"]).get(
            "model_transaction_policy", {}).get("decoupled", False))
        if hasattr(self.model, "initialize"):
            result = self.model.initialize(args)
            if asyncio.iscoroutine(result):
                self.run_coroutine(result)
        return {}

    def run_coroutine(self, coroutine):
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        # BLS answers arrive on the socket while the loop runs: the loop reads them.
        self.loop.add_reader(SOCKET_FD, self.read_one)
        try:
            return self.loop.run_until_complete(coroutine)
        finally:
            self.loop.remove_reader(SOCKET_FD)

    # ---- execute -------------------------------------------------------------------------------
    def map_inputs(self, size):
        if size > self.input_size or self.input_map is None:
            self.input_map = mmap.mmap(INPUT_FD, max(size, mmap.PAGESIZE))
            self.input_size = max(size, mmap.PAGESIZE)

    def input_tensor(self, spec):
        buf = memoryview(self.input_map)[spec["offset"]:spec["offset"] + spec["size"]]
        if spec["datatype"] == "BYTES":
            array = pb_utils.deserialize_bytes_tensor(buf, spec["shape"])
        else:
            array = np.frombuffer(buf, dtype=pb_utils.triton_to_numpy_type(spec["datatype"]))
            array = array.reshape(spec["shape"])
            if self.decoupled:  # a decoupled model may keep its inputs past execute()
                array = array.copy()
        return pb_utils.Tensor(spec["name"], array, spec["datatype"])

    def execute(self, header):
        self.map_inputs(header["input_size"])
        requests = []
        for r in header["requests"]:
            sender = ResponseSender(self, r["handle"]) if self.decoupled else None
            requests.append(pb_utils.InferenceRequest._incoming(
                inputs=[self.input_tensor(i) for i in r["inputs"]], request_id=r["id"],
                flags=r["flags"], correlation_id=r.get("correlation_id", 0),
                parameters=r["parameters"], requested_output_names=r["outputs"], sender=sender,
                handle=r["handle"]))
        result = self.model.execute(requests)
        if asyncio.iscoroutine(result):
            result = self.run_coroutine(result)
        if self.decoupled:
            return {}
        if not isinstance(result, (list, tuple)) or len(result) != len(requests):
            raise pb_utils.TritonModelException(
                f"execute() must return a list of {len(requests)} InferenceResponse objects, one "
                f"per request; it returned {type(result).__name__}"
                + (f" of length {len(result)}" if isinstance(result, (list, tuple)) else ""))
        if self.output_capacity and os.fstat(OUTPUT_FD).st_size < self.output_capacity:
            # The server gave the pages of a large output back: map anew when needed.
            self.output_map, self.output_capacity = None, 0
        responses, offset = [], 0
        for response in result:
            if not isinstance(response, pb_utils.InferenceResponse):
                raise pb_utils.TritonModelException(
                    f"execute() returned a {type(response).__name__} where an InferenceResponse "
                    "belongs")
            entry = {"error": error_of(response.error()), "outputs": []}
            if response.error() is None:
                for tensor in response.output_tensors():
                    datatype, shape, data = tensor_bytes(tensor)
                    offset = (offset + 63) & ~63
                    size = len(data) if isinstance(data, bytes) else data.nbytes
                    if offset + size > self.output_capacity:
                        self.output_capacity = max(offset + size, 2 * self.output_capacity, 1 << 20)
                        os.ftruncate(OUTPUT_FD, self.output_capacity)
                        self.output_map = mmap.mmap(OUTPUT_FD, self.output_capacity)
                    if size:
                        self.output_map[offset:offset + size] = data
                    entry["outputs"].append({"name": tensor.name(), "datatype": datatype,
                                             "shape": shape, "offset": offset, "size": size})
                    offset += size
            responses.append(entry)
        return {"responses": responses, "output_size": self.output_capacity}

    # ---- BLS -----------------------------------------------------------------------------------
    def read_one(self):
        """Reads one frame (main thread only): a BLS answer goes to its call, anything else waits
        for the main loop."""
        header, payload = self.channel.recv()
        if header["op"] != "infer_response":
            self.control.append((header, payload))
            return
        with self.calls_lock:
            callback = (self.calls.pop(header["call"], None) if header["final"]
                        else self.calls.get(header["call"]))
        if callback is not None:
            callback(header, payload)

    def bls_wait(self, done, deadline=None):
        """Waits for done() on the main thread by reading the socket, until the time.monotonic()
        'deadline' at most; returns False elsewhere (the caller then blocks on its own queue,
        which the main thread fills)."""
        if threading.current_thread() is not self.main:
            return False
        while not done():
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                if not self.channel.poller.poll(max(1, int(left * 1000))):
                    continue
            self.read_one()
        return True

    def forget_call(self, call):
        """Drops the callback of a call its caller gave up on (a BLS timeout)."""
        with self.calls_lock:
            self.calls.pop(call, None)

    def new_call(self, deliver):
        """A call id for a question to the server; deliver(header, payload) gets its answers
        (read_one hands them over)."""
        with self.calls_lock:
            self.next_call += 1
            self.calls[self.next_call] = deliver
            return self.next_call

    def bls_submit(self, request, on_response):
        """Sends a pb_utils.InferenceRequest into the server; on_response(InferenceResponse, final)
        is called for each response."""
        def deliver(header, payload):
            error = header.get("error")
            response = pb_utils.InferenceResponse(
                output_tensors=[] if error else tensors_from_payload(header["outputs"], payload),
                error=pb_utils.TritonError(error["message"], error["code"]) if error else None)
            on_response(response, header["final"])

        call = self.new_call(deliver)
        specs, payload = [], bytearray()
        for tensor in request.inputs():
            datatype, shape, data = tensor_bytes(tensor)
            size = len(data) if isinstance(data, bytes) else data.nbytes
            specs.append({"name": tensor.name(), "datatype": datatype, "shape": shape,
                          "offset": len(payload), "size": size})
            payload += data
        self.channel.send({"op": "infer", "call": call, "model": request.model_name(),
                           "version": int(request.model_version()), "id": request.request_id(),
                           "inputs": specs, "outputs": request.requested_output_names(),
                           "timeout": request.timeout(),
                           "parameters": json.loads(request.parameters())},
                          bytes(payload))
        return call

    def ask(self, header):
        """Sends the server a question and returns its answer's header: the main thread reads the
        answer itself; another thread gets it handed over by the main thread."""
        answered = threading.Event()
        answer = []

        def deliver(reply, payload):
            answer.append(reply)
            answered.set()

        call = self.new_call(deliver)
        self.channel.send(dict(header, call=call))
        if not self.bls_wait(answered.is_set):
            answered.wait()
        return answer[0]

    def query_cancelled(self, handle):
        """Whether the client cancelled the request with this handle (request.is_cancelled())."""
        return bool(self.ask({"op": "is_cancelled", "handle": handle}).get("cancelled"))

    def metrics_call(self, header):
        """A custom-metrics message the server answers (pb_utils.MetricFamily, Metric, value());
        its error raised as a TritonModelException."""
        answer = self.ask(header)
        if answer.get("error"):
            raise pb_utils.TritonModelException(answer["error"])
        return answer

    # ---- the loop ------------------------------------------------------------------------------
    def serve(self):
        handlers = {"auto_complete": self.auto_complete, "initialize": self.initialize,
                    "execute": self.execute}
        while True:
            if self.control:
                header, _ = self.control.pop(0)
            else:
                try:
                    self.read_one()
                except (EOFError, OSError):
                    return
                continue
            op = header["op"]
            if op == "finalize":
                if self.model is not None and hasattr(self.model, "finalize"):
                    try:
                        self.model.finalize()
                    except Exception:  # noqa: BLE001 - a failing finalize is logged, not fatal
                        traceback.print_exc()
                self.channel.send({"op": "finalize_done", "id": header.get("id")})
                return
            reply = {"op": op + "_done", "id": header.get("id")}
            try:
                reply.update(handlers[op](header))
            except Exception as e:  # noqa: BLE001 - every model error becomes the reply's error
                traceback.print_exc()
                reply["error"] = f"{type(e).__name__}: {e}"
            self.channel.send(reply)
            if op == "auto_complete":
                return


class ResponseSender:
    """request.get_response_sender() of a decoupled model: send() from any thread, any number of
    times, the last with flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL."""

    def __init__(self, stub, handle):
        self._stub = stub
        self._handle = handle
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        with self._lock:
            if self._closed:
                raise pb_utils.TritonModelException(
                    "this request's final response was already sent")
            final = bool(flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if response is None and not final:
                raise pb_utils.TritonModelException("send() needs a response or the FINAL flag")
            header = {"op": "response", "handle": self._handle, "final": final, "error": None,
                      "outputs": []}
            payload = bytearray()
            if response is not None:
                header["error"] = error_of(response.error())
                if response.error() is None:
                    for tensor in response.output_tensors():
                        datatype, shape, data = tensor_bytes(tensor)
                        header["outputs"].append({"name": tensor.name(), "datatype": datatype,
                                                  "shape": shape, "offset": len(payload),
                                                  "size": len(data) if isinstance(data, bytes) else data.nbytes})
                        payload += data
            self._stub.channel.send(header, bytes(payload))
            self._closed = final

    def is_cancelled(self):
        """Whether the client cancelled the request (a gRPC stream cancelled, a client gone): the
        model may stop sending and end with the final flag."""
        return self._stub.query_cancelled(self._handle)


def exit_with_the_server():
    """Ends this process when the server's end of the socket closes (the server exited or was
    killed), even while the model's code is stuck in execute(): no stub outlives its server."""
    def watch():
        poller = select.poll()
        poller.register(SOCKET_FD, select.POLLRDHUP)
        while True:
            for _, events in poller.poll():
                if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    os._exit(0)
    threading.Thread(target=watch, name="nereid-parent-watch", daemon=True).start()


if __name__ == "__main__":
    exit_with_the_server()
    Stub().serve()
