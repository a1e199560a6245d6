"""Nereid's implementation of the `triton_python_backend_utils` module a Triton Python model imports
(`import triton_python_backend_utils as pb_utils`), written to Triton's documented Python-backend
API: Tensor, InferenceRequest (as execute() receives it), InferenceResponse, the response sender of
decoupled models, TritonError, TritonModelException, ModelConfig for auto_complete_config, Logger and
the config helpers. The stub process (nereid_python_stub.py) drives it; docs/python-backend.md."""
import json
import queue
import time

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

# KServe datatype <-> numpy dtype. BF16 has no numpy type: its raw bits travel as uint16.
_TO_NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
             "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
             "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
             "BYTES": np.object_, "BF16": np.uint16}


def triton_to_numpy_type(datatype):
    """A KServe datatype ("FP32") or config type ("TYPE_FP32", "TYPE_STRING") as a numpy type."""
    name = datatype[5:] if datatype.startswith("TYPE_") else datatype
    return _TO_NUMPY["BYTES" if name == "STRING" else name]


def triton_string_to_numpy(triton_type_string):
    return triton_to_numpy_type(triton_type_string)


_FROM_NUMPY = {np.dtype(t): name for name, t in _TO_NUMPY.items() if name not in ("BF16", "BYTES")}
_FROM_NUMPY.update({np.dtype(np.object_): "BYTES"})


def numpy_to_triton_type(np_type):
    try:
        dtype = np.dtype(np_type)
    except TypeError:
        dtype = None
    if dtype is not None:
        name = _FROM_NUMPY.get(dtype)
        if name is not None:
            return name
        if dtype.kind in ("S", "U", "O"):
            return "BYTES"
    raise TritonModelException(f"numpy type {np_type} has no Triton datatype")


def serialize_byte_tensor(array):
    """BYTES elements as the protocol carries them: a 4-byte little-endian length before each."""
    parts = []
    for element in np.asarray(array, dtype=np.object_).ravel(order="C"):
        b = element if isinstance(element, bytes) else str(element).encode("utf-8")
        parts.append(len(b).to_bytes(4, "little"))
        parts.append(b)
    return b"".join(parts)


def deserialize_bytes_tensor(buffer, shape=None):
    out, at, view = [], 0, memoryview(buffer)
    while at + 4 <= len(view):
        n = int.from_bytes(view[at:at + 4], "little")
        out.append(bytes(view[at + 4:at + 4 + n]))
        at += 4 + n
    array = np.array(out, dtype=np.object_)
    return array.reshape(shape) if shape is not None else array


class TritonError(Exception):
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self._message = str(message)
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code


class TritonModelException(Exception):
    pass


class Tensor:
    """A named tensor: pb_utils.Tensor(name, numpy_array)."""

    def __init__(self, name, data, datatype=None):
        if not isinstance(data, np.ndarray):
            raise TritonModelException(f"tensor '{name}': data must be a numpy array")
        if data.dtype.kind in ("U", "S"):
            data = data.astype(np.object_)
        self._name = name
        self._array = data
        self._datatype = datatype or _FROM_NUMPY.get(data.dtype) or numpy_to_triton_type(data.dtype)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)

    def triton_dtype(self):
        return self._datatype

    def is_cpu(self):
        return True

    def to_dlpack(self):
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name, capsule):
        return Tensor(name, np.from_dlpack(capsule))


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._outputs = list(output_tensors or [])
        self._error = error
        self._parameters = parameters or {}

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return json.dumps(self._parameters)


class InferenceRequest:
    """A request: as execute() receives it, or built by the model to call another model of the
    server (BLS): InferenceRequest(model_name=..., requested_output_names=[...], inputs=[...])
    then .exec() or await .async_exec()."""

    def __init__(self, model_name=None, requested_output_names=None, inputs=None, request_id="",
                 correlation_id=0, model_version=-1, flags=0, timeout=0, preferred_memory=None,
                 trace=None, parameters=None):
        requested = list(requested_output_names or [])
        for name in requested:
            if not isinstance(name, str):
                raise TypeError("requested_output_names must be a list of str (output names), "
                                f"got {type(name).__name__} {name!r}")
        if not isinstance(timeout, int) or timeout < 0:
            raise TypeError(f"timeout must be a non-negative int (microseconds), got {timeout!r}")
        if parameters is not None and not isinstance(parameters, (dict, str)):
            raise TypeError("parameters must be a dict (or its JSON text)")
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        self._model_name = model_name
        self._requested = requested
        self._timeout = timeout
        self._inputs = list(inputs or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        self._parameters = parameters or {}
        self._sender = None
        self._handle = None  # the server's handle of an incoming request

    @classmethod
    def _incoming(cls, inputs, request_id, flags, correlation_id, parameters,
                  requested_output_names, sender, handle=None):
        r = cls(inputs=inputs, request_id=request_id, correlation_id=correlation_id, flags=flags,
                parameters=parameters, requested_output_names=requested_output_names)
        r._sender = sender
        r._handle = handle
        return r

    def inputs(self):
        return self._inputs

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def parameters(self):
        return json.dumps(self._parameters)

    def requested_output_names(self):
        return list(self._requested)

    def timeout(self):
        return self._timeout

    def get_response_sender(self):
        if self._sender is None:
            raise TritonModelException("get_response_sender() needs a decoupled model "
                                       "(model_transaction_policy { decoupled: true })")
        return self._sender

    def is_cancelled(self):
        """Whether the client cancelled this request (or went away): a long-running execute() or a
        decoupled model's sender thread may stop early. Asks the server; False for requests the
        model built itself."""
        if self._handle is None or _is_cancelled is None:
            return False
        return _is_cancelled(self._handle)

    def set_release_flags(self, flags):
        if flags != TRITONSERVER_REQUEST_RELEASE_ALL:
            raise TritonModelException("request rescheduling is not supported by Nereid yet")

    # ---- BLS -----------------------------------------------------------------------------------
    def _check_bls(self):
        if _bls_submit is None or not self._model_name:
            raise TritonModelException("InferenceRequest.exec() needs model_name, and runs inside "
                                       "a model's initialize() or execute()")

    def exec(self, decoupled=False):
        """Runs the request in the server and waits: the InferenceResponse (check has_error()), or
        with decoupled=True an iterator over every response of a decoupled model (the last may be
        empty: it carries only the final flag)."""
        self._check_bls()
        responses = queue.Queue()
        finished = []

        def on_response(response, final):
            responses.put((response, final))
            if final:
                finished.append(True)

        call = _bls_submit(self, on_response)
        deadline = time.monotonic() + self._timeout / 1e6 if self._timeout else None
        if decoupled:
            return _drain(responses, finished, call, deadline)
        collected = []
        # On the main thread _bls_wait reads the answer itself; elsewhere the main thread hands it
        # over through 'responses'.
        _bls_wait(lambda: finished, deadline)
        while True:
            try:
                response, final = responses.get(timeout=_left(deadline))
            except queue.Empty:
                return _timed_out(call)
            collected.append(response)
            if final:
                break
        with_data = [r for r in collected if r.has_error() or r.output_tensors()]
        return with_data[0] if with_data else collected[-1]

    async def async_exec(self, decoupled=False):
        """exec() for `async def execute`: awaits the response without blocking the event loop."""
        import asyncio
        self._check_bls()
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        collected = []

        def on_response(response, final):
            collected.append(response)
            if final:
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

        call = _bls_submit(self, on_response)
        try:
            await asyncio.wait_for(done, self._timeout / 1e6 if self._timeout else None)
        except asyncio.TimeoutError:
            return _timed_out(call)
        if decoupled:
            return iter(collected)
        with_data = [r for r in collected if r.has_error() or r.output_tensors()]
        return with_data[0] if with_data else collected[-1]


def _left(deadline):
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _timed_out(call):
    """The response of a BLS call whose timeout passed; its late answers are dropped."""
    _bls_forget(call)
    return InferenceResponse(error=TritonError("Request timeout expired", TritonError.UNAVAILABLE))


def _drain(responses, finished, call, deadline):
    while True:
        _bls_wait(lambda: finished or not responses.empty(), deadline)
        try:
            response, final = responses.get(timeout=_left(deadline))
        except queue.Empty:
            yield _timed_out(call)
            return
        yield response
        if final:
            return


_bls_submit = None  # set by the stub: sends a request into the server
_bls_wait = None  # set by the stub: on its main thread, reads the socket until a condition holds
_bls_forget = None  # set by the stub: drops a call's answers still to come
_is_cancelled = None  # set by the stub: asks the server whether a request was cancelled


def get_input_tensor_by_name(request, name):
    for t in request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(response, name):
    for t in response.output_tensors():
        if t.name() == name:
            return t
    return None


def _config_entry(model_config, key, name):
    if isinstance(model_config, str):
        model_config = json.loads(model_config)
    for entry in model_config.get(key, []):
        if entry.get("name") == name:
            return entry
    return None


def get_input_config_by_name(model_config, name):
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config, name):
    return _config_entry(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config):
    """Whether the config (its dict, or its JSON text) makes the model decoupled."""
    if isinstance(model_config, str):
        model_config = json.loads(model_config)
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """What auto_complete_config(auto_complete_model_config) gets and returns."""

    def __init__(self, config):
        self._config = config

    def as_dict(self):
        return json.loads(json.dumps(self._config))

    def set_max_batch_size(self, max_batch_size):
        current = int(self._config.get("max_batch_size", 0))
        if current > 0 and max_batch_size != current and max_batch_size > 0 and current > max_batch_size:
            raise TritonModelException(
                f"max_batch_size {current} in the config exceeds the {max_batch_size} the model sets")
        if current == 0:
            self._config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self):
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, policy):
        self._config["model_transaction_policy"] = dict(policy)

    def _add(self, key, entry):
        for field in ("name", "data_type", "dims"):
            if field not in entry:
                raise TritonModelException(f"{key} entry {entry} has no '{field}'")
        for existing in self._config.setdefault(key, []):
            if existing["name"] == entry["name"]:
                if (existing.get("data_type") != entry["data_type"] or
                        [int(d) for d in existing.get("dims", [])] != [int(d) for d in entry["dims"]]):
                    raise TritonModelException(
                        f"{key} '{entry['name']}' already exists with a different data_type or dims")
                return
        self._config[key].append({k: (list(v) if k == "dims" else v) for k, v in entry.items()})

    def add_input(self, entry):
        self._add("input", entry)

    def add_output(self, entry):
        self._add("output", entry)


# ---- custom metrics ------------------------------------------------------------------------------
# Set by an instance's stub once initialize() begins: _metrics_call(header) sends a message the
# server answers (the answer's header; TritonModelException on an error), _metrics_send(header) one
# it does not. Families and metrics are named by ids of this process.
_metrics_call = None
_metrics_send = None
_metrics_next_id = 0
_metrics_families = set()  # ids of the families not deleted yet


def _metrics_id():
    global _metrics_next_id
    _metrics_next_id += 1
    return _metrics_next_id


def _metrics_tell(header):
    try:
        if _metrics_send is not None:
            _metrics_send(header)
    except Exception:  # the stub is going away (interpreter shutdown): the server cleans up
        pass


class MetricFamily:
    """A family of custom metrics on the server's metrics endpoint: MetricFamily(name, description,
    kind) with kind COUNTER, GAUGE or HISTOGRAM; its Metric(labels={...}, buckets=[...]) are the
    samples. Two families of one name and kind are one family on the endpoint."""
    COUNTER, GAUGE, HISTOGRAM = 0, 1, 2

    def __init__(self, name, description, kind):
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException(
                "MetricFamily kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM")
        if _metrics_call is None:
            raise TritonModelException(
                "custom metrics can be created in initialize(), execute() and finalize()")
        self._id = None
        identifier = _metrics_id()
        _metrics_call({"op": "metric_family_new", "id": identifier, "name": str(name),
                       "description": str(description), "kind": kind})
        self._id, self._kind = identifier, kind
        _metrics_families.add(identifier)

    def Metric(self, labels=None, buckets=None):
        return Metric(self, labels, buckets)

    def __del__(self):
        if getattr(self, "_id", None) in _metrics_families:
            _metrics_families.discard(self._id)
            _metrics_tell({"op": "metric_family_delete", "id": self._id})


# The kinds as module constants too (pb_utils.COUNTER in Triton's own custom_metrics example).
COUNTER, GAUGE, HISTOGRAM = MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM


class Metric:
    """One metric of a family (one set of labels): increment() for counters (never negative) and
    gauges, set() for gauges, observe() for histograms, value() for counters and gauges. It does
    not keep its family alive: once the family is deleted, every operation raises."""

    def __init__(self, family, labels=None, buckets=None):
        self._id = None
        if not isinstance(family, MetricFamily) or family._id is None:
            raise TritonModelException("a Metric needs a MetricFamily")
        if family._kind == MetricFamily.HISTOGRAM and buckets is None:
            raise TritonModelException("a histogram metric needs 'buckets' (ascending upper bounds)")
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Metric labels must be a dict of strings")
        self._family, self._kind = family._id, family._kind
        identifier = _metrics_id()
        _metrics_call({"op": "metric_new", "id": identifier, "family": family._id,
                       "labels": {str(k): str(v) for k, v in (labels or {}).items()},
                       "buckets": None if buckets is None else [float(b) for b in buckets]})
        self._id = identifier

    def _check(self, operation, kinds):
        if self._family not in _metrics_families:
            raise TritonModelException(
                "Invalid metric operation as the corresponding 'MetricFamily' has been deleted.")
        if self._kind not in kinds:
            names = {MetricFamily.COUNTER: "counter", MetricFamily.GAUGE: "gauge",
                     MetricFamily.HISTOGRAM: "histogram"}
            raise TritonModelException(f"{operation}() is not supported for a {names[self._kind]}")

    def increment(self, value):
        self._check("increment", (MetricFamily.COUNTER, MetricFamily.GAUGE))
        value = float(value)
        if self._kind == MetricFamily.COUNTER and not value >= 0:
            raise TritonModelException("a counter can only be incremented by a non-negative number")
        _metrics_tell({"op": "metric", "id": self._id, "what": "increment", "value": value})

    def set(self, value):
        self._check("set", (MetricFamily.GAUGE,))
        _metrics_tell({"op": "metric", "id": self._id, "what": "set", "value": float(value)})

    def observe(self, value):
        self._check("observe", (MetricFamily.HISTOGRAM,))
        _metrics_tell({"op": "metric", "id": self._id, "what": "observe", "value": float(value)})

    def value(self):
        self._check("value", (MetricFamily.COUNTER, MetricFamily.GAUGE))
        return _metrics_call({"op": "metric", "id": self._id, "what": "value"})["value"]

    def __del__(self):
        if getattr(self, "_id", None) is not None:
            _metrics_tell({"op": "metric_delete", "id": self._id})


class Logger:
    """pb_utils.Logger.log_info("...") and friends: lines in the server's log."""
    INFO, WARNING, ERROR, VERBOSE = 0, 1, 2, 3
    _send = None  # set by the stub

    MAX_MESSAGE = 1 << 20  # characters; a longer message is cut (the server's frames are bounded)

    @staticmethod
    def log(message, level=0):
        if Logger._send is not None:
            text = str(message)
            if len(text) > Logger.MAX_MESSAGE:
                text = (text[:Logger.MAX_MESSAGE]
                        + f"... ({len(text) - Logger.MAX_MESSAGE} more characters cut)")
            Logger._send(level, text)

    @staticmethod
    def log_info(message):
        Logger.log(message, Logger.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, Logger.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, Logger.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, Logger.VERBOSE)
