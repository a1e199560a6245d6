"""Tracing (docs/tracing.md) through the real binary: Triton's trace-setting API over HTTP and gRPC
(the semantics of Triton's qa/L0_trace/trace_endpoint_test.py), Triton's trace file (rate, count,
log_frequency, timestamps in order, ensemble steps as children) and OpenTelemetry export to a real
OTLP/HTTP receiver that decodes what arrives with the opentelemetry-proto package: the caller's
trace id and span over HTTP and gRPC, request / model / queue / compute spans, ensemble steps."""
import http.server
import json
import os
import secrets
import shutil
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import SIMPLE_SUM, Server, http_status, simple_inputs
from test_ensemble import inputs, make_repository

START = ["--trace-config", "triton,file={file}", "--trace-config", "level=TIMESTAMPS",
         "--trace-config", "rate=1"]
INITIAL = {"trace_file": "{file}", "trace_level": ["TIMESTAMPS"], "trace_rate": "1",
           "trace_count": "-1", "log_frequency": "0", "trace_mode": "triton"}
MODEL_ORDER = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
               "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]


def args(file, *extra):
    return [a.format(file=file) for a in START] + list(extra)


def initial(file):
    return {k: (v.format(file=file) if isinstance(v, str) else v) for k, v in INITIAL.items()}


@pytest.fixture()
def traced(repository, tmp_path):
    file = str(tmp_path / "trace.json")
    s = Server(repository, *args(file))
    yield s, file
    assert s.stop() == 0, s.read_log()


def infer_both(server, n):
    h = httpclient.InferenceServerClient(server.url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    for i in range(n):
        h.infer("simple", simple_inputs(httpclient), request_id=f"h{i}")
        g.infer("simple", simple_inputs(grpcclient), request_id=f"g{i}")


def read_traces(path):
    """Triton's trace file: a list of objects, those of one trace sharing an id. Returns
    {id: {"model_name":..., "parent_id":..., "timestamps": {name: ns}}}."""
    with open(path) as f:
        entries = json.load(f)
    traces = {}
    for e in entries:
        t = traces.setdefault(e["id"], {"timestamps": {}})
        for k, v in e.items():
            if k == "timestamps":
                for ts in v:
                    assert ts["name"] not in t["timestamps"], e
                    t["timestamps"][ts["name"]] = ts["ns"]
            elif k != "id":
                t[k] = v
    return traces


def test_settings_api_follows_tritons_rules(traced):
    server, file = traced
    h = httpclient.InferenceServerClient(server.url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    assert h.get_trace_settings() == initial(file)
    assert h.get_trace_settings(model_name="simple") == initial(file)
    grpc_settings = {k: v.value for k, v in g.get_trace_settings(model_name="simple").settings.items()}
    assert grpc_settings == {k: v if isinstance(v, list) else [v] for k, v in initial(file).items()}
    with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
        h.get_trace_settings(model_name="nope")
    with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
        g.get_trace_settings(model_name="nope")
    with pytest.raises(InferenceServerException,
                       match="trace file location can not be updated through network protocol"):
        h.update_trace_settings(model_name="simple", settings={"trace_file": "elsewhere.json"})
    # A model's own values stay; the others follow the global setting as it changes.
    h.update_trace_settings(model_name="simple", settings={"trace_rate": "12", "log_frequency": "34"})
    h.update_trace_settings(settings={"trace_rate": "56", "trace_count": "78", "trace_level": ["OFF"]})
    model = h.get_trace_settings(model_name="simple")
    assert (model["trace_level"], model["trace_rate"], model["trace_count"],
            model["log_frequency"]) == (["OFF"], "12", "78", "34")
    # null: back to the start-up value (global) or to the global one (model).
    assert h.update_trace_settings(settings={"trace_rate": None, "trace_count": None})["trace_rate"] == "1"
    cleared = g.update_trace_settings(model_name="simple",
                                      settings={"trace_rate": None, "trace_level": None})
    assert cleared.settings["trace_rate"].value == ["1"]
    assert cleared.settings["trace_level"].value == ["OFF"]
    assert cleared.settings["log_frequency"].value == ["34"]
    # Bad values, in Triton's words; nothing changes.
    for bad, message in (({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
                         ({"trace_rate": "99999999999"}, "value is out of range"),
                         ({"trace_count": "-2"}, "Expecting value >= -1"),
                         ({"trace_level": ["OFF", "TIMESTAMPS"]},
                          "Expect only one trace level 'OFF' is specified"),
                         ({"trace_level": ["LOUD"]}, "unknown trace level 'LOUD'")):
        with pytest.raises(InferenceServerException, match=message):
            h.update_trace_settings(settings=bad)
    assert h.get_trace_settings()["trace_level"] == ["OFF"]
    status, body = http_status(f"http://{server.url}/v2/trace/setting", "POST", b'{"trace_rate": 5}')
    assert status == 400 and b"must be a string" in body
    # trace_level is a list (a bare string turned tracing on before), the others single strings.
    for body in (b'{"trace_level": "TIMESTAMPS"}', b'{"trace_rate": ["5"]}'):
        status, reply = http_status(f"http://{server.url}/v2/trace/setting", "POST", body)
        assert status == 400 and b"error" in reply, (body, reply)
    assert h.get_trace_settings()["trace_level"] == ["OFF"]
    status, _ = http_status(f"http://{server.url}/v2/trace/setting", "POST", b"{not json")
    assert status == 400
    assert "trace" in h.get_server_metadata()["extensions"]


def test_trace_file_holds_every_sampled_request_in_order(repository, tmp_path):
    file = str(tmp_path / "trace.json")
    server = Server(repository, *args(file).__iter__(), "--trace-config", "rate=3")
    try:
        infer_both(server, 6)  # 12 requests, every third traced
        # A model of its own: 'simple' traces every request, in groups of 2 per file.
        h = httpclient.InferenceServerClient(server.url)
        h.update_trace_settings(model_name="simple", settings={"trace_rate": "1", "log_frequency": "2"})
        infer_both(server, 2)
        h.update_trace_settings(model_name="simple", settings={"log_frequency": None, "trace_rate": None})
    finally:
        assert server.stop() == 0, server.read_log()
    # The first 4 traces (rate 3) went to the file; the model's 4 to file.0 and file.1.
    traces = read_traces(file)
    assert len(traces) == 4, traces
    indexed = [read_traces(f"{file}.{i}") for i in range(2)]
    assert [len(t) for t in indexed] == [2, 2]
    assert not os.path.exists(f"{file}.2")
    for t in list(traces.values()) + [t for group in indexed for t in group.values()]:
        assert t["model_name"] == "simple" and t["model_version"] == 1
        assert "parent_id" not in t
        ts = t["timestamps"]
        front = "HTTP" if "HTTP_RECV_START" in ts else "GRPC"
        order = ([f"{front}_RECV_START", f"{front}_RECV_END"] if front == "HTTP"
                 else ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"])
        order += MODEL_ORDER[1:] + [f"{front}_SEND_START", f"{front}_SEND_END"]
        assert set(order) | {"REQUEST_START"} == set(ts), ts
        assert [ts[n] for n in order] == sorted(ts[n] for n in order), ts
        assert ts["REQUEST_START"] <= ts["QUEUE_START"]
        assert t["request_id"][0] == front[0].lower()
    ids = sorted(traces)
    assert [traces[i]["request_id"] for i in ids] == ["h1", "g2", "h4", "g5"]  # requests 3, 6, 9, 12


def test_trace_count_stops_tracing_and_reads_back_zero(repository, tmp_path):
    file = str(tmp_path / "trace.json")
    server = Server(repository, *args(file))
    try:
        h = httpclient.InferenceServerClient(server.url)
        assert h.update_trace_settings(settings={"trace_count": "5"})["trace_count"] == "5"
        infer_both(server, 5)
        assert h.get_trace_settings(model_name="simple")["trace_count"] == "0"
        # count reached: the 5 traces were written to file.0 at once
        deadline = time.time() + 5
        while not os.path.exists(f"{file}.0") and time.time() < deadline:
            time.sleep(0.05)
        assert len(read_traces(f"{file}.0")) == 5
    finally:
        assert server.stop() == 0, server.read_log()
    assert not os.path.exists(file)  # nothing else was traced


def test_ensemble_steps_are_children_of_the_ensembles_trace(repository, tmp_path):
    file = str(tmp_path / "trace.json")
    repo = make_repository(str(tmp_path), repository)
    server = Server(repo, *args(file), "--trace-config", "level=TENSORS")
    try:
        c = httpclient.InferenceServerClient(server.url)
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        c.infer("nested", inputs(httpclient, a, a, names=("X", "Y")), request_id="n1")
    finally:
        assert server.stop() == 0, server.read_log()
    traces = read_traces(file)
    by_model = {}
    for i, t in traces.items():
        by_model.setdefault(t["model_name"], []).append((i, t))
    (nested_id, nested), = by_model["nested"]
    (ens_id, ens), = by_model["ens"]
    assert "parent_id" not in nested and ens["parent_id"] == nested_id
    # nested runs ens and one simple; ens runs simple twice (its third step feeds DOUBLE_A, which
    # nested does not read: pruned, so not traced)
    parents = sorted(t["parent_id"] for _, t in by_model["simple"])
    assert parents == sorted([nested_id] + [ens_id] * 2)
    assert "HTTP_RECV_START" in nested["timestamps"] and "HTTP_RECV_START" not in ens["timestamps"]
    # TENSORS: every step records what it was given and what it gave, under its own id.
    with open(file) as f:
        tensors = [e for e in json.load(f) if "activity" in e]
    simple_ids = {i for i, _ in by_model["simple"]}
    for i in simple_ids:
        got = {(e["activity"], e["tensor"]["name"]) for e in tensors if e["id"] == i}
        assert {("TENSOR_QUEUE_INPUT", "INPUT0"), ("TENSOR_QUEUE_INPUT", "INPUT1")} <= got, got
        # only the outputs the ensemble reads are asked of a step
        assert any(a == "TENSOR_BACKEND_OUTPUT" for a, _ in got), got
    for _, t in by_model["simple"]:
        assert t["timestamps"]["COMPUTE_START"] <= t["timestamps"]["COMPUTE_END"]
        assert nested["timestamps"]["REQUEST_START"] <= t["timestamps"]["REQUEST_START"]
        assert t["timestamps"]["REQUEST_END"] <= nested["timestamps"]["REQUEST_END"]


class Receiver:
    """An OTLP/HTTP receiver: decodes each POSTed ExportTraceServiceRequest (protobuf)."""

    def __init__(self, status=200):
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        self.requests, self.spans, self.lock = [], [], threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                message = trace_service_pb2.ExportTraceServiceRequest()
                message.ParseFromString(body)
                with receiver.lock:
                    receiver.requests.append((self.path, self.headers["Content-Type"], message))
                    for rs in message.resource_spans:
                        for ss in rs.scope_spans:
                            receiver.spans.extend(ss.spans)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait(self, n, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if len(self.spans) >= n:
                    return list(self.spans)
            time.sleep(0.05)
        with self.lock:
            return list(self.spans)

    def close(self):
        self.httpd.shutdown()


def otel_args(port, *extra):
    return ["--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", f"opentelemetry,url=http://127.0.0.1:{port}/v1/traces",
            "--trace-config", "opentelemetry,bsp_schedule_delay=100",
            "--trace-config", "opentelemetry,resource=service.name=nereid-test", *extra]


def attributes(span):
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def test_spans_reach_an_otlp_receiver_with_the_callers_trace(repository, tmp_path):
    receiver = Receiver()
    repo = make_repository(str(tmp_path), repository)
    # rate=0: only requests that carry a trace context are traced.
    server = Server(repo, *otel_args(receiver.port, "--trace-config", "rate=0"))
    try:
        h = httpclient.InferenceServerClient(server.url)
        g = grpcclient.InferenceServerClient(server.grpc_url)
        h.infer("simple", simple_inputs(httpclient))  # no context: not traced
        calls = {}
        for proto in ("http", "grpc"):
            trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
            header = {"traceparent": f"00-{trace_id}-{span_id}-01"}
            if proto == "http":
                h.infer("simple", simple_inputs(httpclient), request_id="rq-http", headers=header)
            else:
                g.infer("simple", simple_inputs(grpcclient), request_id="rq-grpc", headers=header)
            calls[proto] = (trace_id, span_id)
        # A malformed context is ignored (not traced at rate 0), never an error.
        h.infer("simple", simple_inputs(httpclient), headers={"traceparent": "00-zz-1-01"})
        # An ensemble: its steps' model spans under the ensemble's.
        ens_trace, ens_span = secrets.token_hex(16), secrets.token_hex(8)
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        h.infer("ens", inputs(httpclient, a, a), headers={"traceparent": f"00-{ens_trace}-{ens_span}-01"})
        # 2 x (request, model, queue, compute) + ensemble (request, model) + 3 x (model, queue, compute)
        spans = receiver.wait(4 * 2 + 2 + 3 * 3)
    finally:
        assert server.stop() == 0, server.read_log()
        receiver.close()
    path, content_type, message = receiver.requests[0]
    assert path == "/v1/traces" and content_type == "application/x-protobuf"
    resource = {kv.key: kv.value.string_value for kv in message.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "nereid-test"
    assert len(spans) == 4 * 2 + 2 + 3 * 3, [s.name for s in spans]
    by_trace = {}
    for s in spans:
        by_trace.setdefault(s.trace_id.hex(), []).append(s)
    assert set(by_trace) == {calls["http"][0], calls["grpc"][0], ens_trace}
    for proto, (trace_id, span_id) in calls.items():
        mine = {s.name: s for s in by_trace[trace_id]}
        assert set(mine) == {"InferRequest", "simple", "queue", "compute"}
        root, model = mine["InferRequest"], mine["simple"]
        assert root.parent_span_id.hex() == span_id and root.kind == 2  # SERVER
        assert model.parent_span_id == root.span_id
        assert mine["queue"].parent_span_id == model.span_id
        assert mine["compute"].parent_span_id == model.span_id
        assert root.start_time_unix_nano <= model.start_time_unix_nano
        assert model.start_time_unix_nano <= mine["compute"].start_time_unix_nano
        assert mine["compute"].end_time_unix_nano <= model.end_time_unix_nano <= root.end_time_unix_nano
        assert abs(root.start_time_unix_nano / 1e9 - time.time()) < 60
        prefix = "HTTP" if proto == "http" else "GRPC"
        assert {e.name for e in root.events} >= {f"{prefix}_SEND_START", f"{prefix}_SEND_END"}
        assert {e.name for e in mine["compute"].events} >= {"COMPUTE_START", "COMPUTE_END"}
        attrs = attributes(model)
        assert attrs["model_name"] == "simple" and attrs["model_version"] == 2  # newest
        assert attrs["request_id"] == f"rq-{proto}"
    ens = by_trace[ens_trace]
    ens_model = next(s for s in ens if s.name == "ens")
    steps = [s for s in ens if s.name == "simple"]
    assert len(steps) == 3
    assert all(s.parent_span_id == ens_model.span_id for s in steps)
    assert all(attributes(s)["parent_id"] == attributes(ens_model)["trace_id"] for s in steps)
    # each step names the version it ran on (2, 1 and the newest, 2), not the config's -1
    assert sorted(attributes(s)["model_version"] for s in steps) == [1, 2, 2]


@pytest.mark.parametrize("kind", ["refused", "black hole"])
def test_an_unreachable_receiver_costs_no_request(repository, kind):
    """Nothing listening, or a receiver that accepts and never answers: every request is answered
    and the server still stops promptly (the exporter waits a bounded time, then drops)."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    port = hole.getsockname()[1]
    if kind == "black hole":
        hole.listen(64)  # connections complete in the backlog; nothing is ever read or answered
    else:
        hole.close()
    server = Server(repository, *otel_args(port, "--trace-config", "rate=1"))
    try:
        h = httpclient.InferenceServerClient(server.url)
        for _ in range(20):
            h.infer("simple", simple_inputs(httpclient))
        assert h.is_server_ready()
    finally:
        started = time.time()
        assert server.stop() == 0, server.read_log()
        hole.close()
    assert time.time() - started < 10
    if kind == "refused":
        assert "exporting" in open(server.log_path).read()


def test_a_silent_receiver_with_many_batches_queued_cannot_hold_the_exit(repository):
    """800 spans in batches of 16 queued for a receiver that accepts and never answers (each batch
    used to cost 5 s, and a stop re-read between batches never came): the server still exits
    within its exit timeout, having waited at most 2 s for the receiver."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    port = hole.getsockname()[1]
    server = Server(repository, *otel_args(port, "--trace-config", "rate=1", "--trace-config",
                                           "opentelemetry,bsp_max_queue_size=8192",
                                           "--trace-config",
                                           "opentelemetry,bsp_max_export_batch_size=16"),
                    "--exit-timeout-secs=3")
    try:
        h = httpclient.InferenceServerClient(server.url)
        for _ in range(200):
            h.infer("simple", simple_inputs(httpclient))
    finally:
        started = time.monotonic()
        assert server.stop() == 0, server.read_log()
        took = time.monotonic() - started
        hole.close()
    # Under ASan the exit also pays LeakSanitizer's scan of the heap.
    bound = 8 if os.environ.get("NEREID_SANITIZED") == "1" else 3.5
    assert took < bound, f"the exit took {took:.1f} s"
    assert "not exported by the exit deadline; dropped" in open(server.log_path).read()


@pytest.mark.parametrize("bad, message", [
    ("mode=loud", "mode must be triton or opentelemetry"),
    ("level=LOUD", "unknown trace level"),
    ("rate=-1", "Unable to parse 'rate'"),
    ("triton,colour=blue", "unknown setting"),
    ("opentelemetry,url=https://collector:4318/v1/traces", "must be http://"),
])
def test_bad_trace_config_stops_the_server_with_the_reason(repository, bad, message):
    with pytest.raises(RuntimeError, match=message):
        extra = ["--trace-config", "mode=opentelemetry"] if "url" in bad else []
        Server(repository, *extra, "--trace-config", bad)


def test_tensors_level_writes_inputs_and_outputs(repository, tmp_path):
    file = str(tmp_path / "tensors.json")
    server = Server(repository, *args(file), "--trace-config", "level=TENSORS")
    try:
        h = httpclient.InferenceServerClient(server.url)
        assert h.get_trace_settings()["trace_level"] == ["TIMESTAMPS", "TENSORS"]
        h.infer("simple", simple_inputs(httpclient))
    finally:
        assert server.stop() == 0, server.read_log()
    with open(file) as f:
        entries = json.load(f)
    tensors = {(e["activity"], e["tensor"]["name"]): e["tensor"] for e in entries if "activity" in e}
    assert set(tensors) == {("TENSOR_QUEUE_INPUT", "INPUT0"), ("TENSOR_QUEUE_INPUT", "INPUT1"),
                            ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"), ("TENSOR_BACKEND_OUTPUT", "OUTPUT1")}
    out = tensors[("TENSOR_BACKEND_OUTPUT", "OUTPUT0")]
    assert out["dtype"] == "INT32" and out["shape"] == "1,16"
    got = np.array([int(v) for v in out["data"].split(",")]).reshape(1, 16)
    assert (got == SIMPLE_SUM).all()


def test_deprecated_flags_still_work(repository, tmp_path):
    file = str(tmp_path / "old.json")
    server = Server(repository, f"--trace-file={file}", "--trace-level=TIMESTAMPS",
                    "--trace-rate=1", "--trace-log-frequency=1")
    try:
        h = httpclient.InferenceServerClient(server.url)
        assert h.get_trace_settings()["trace_file"] == file
        h.infer("simple", simple_inputs(httpclient))
    finally:
        assert server.stop() == 0, server.read_log()
    assert len(read_traces(f"{file}.0")) == 1
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_trace_file_with_log_frequency_0_is_written_as_it_fills(repository, tmp_path):
    """TENSORS at rate 1 with log_frequency 0 (Triton keeps every trace in memory until exit): past
    4 MiB of traces they go to the file while the server runs, so memory stays bounded, and the
    file is one JSON array holding every trace once the server stops."""
    file = tmp_path / "big.json"
    server = Server(repository, *args(str(file)), "--trace-config", "level=TENSORS")
    try:
        h = httpclient.InferenceServerClient(server.url)
        x = np.arange(16384, dtype=np.float32).reshape(1, 16384)  # ~150 KB of trace each
        i = httpclient.InferInput("INPUT0", [1, 16384], "FP32")
        i.set_data_from_numpy(x)
        for _ in range(60):
            h.infer("identity_fp32", [i])
        deadline = time.monotonic() + 5
        while (not file.exists() or file.stat().st_size < 4 << 20) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert file.exists() and file.stat().st_size >= 4 << 20, "nothing written while serving"
    finally:
        assert server.stop() == 0, server.read_log()
    traces = read_traces(str(file))
    assert len([t for t in traces.values() if t.get("model_name") == "identity_fp32"]) == 60
