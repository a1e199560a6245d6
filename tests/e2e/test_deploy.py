"""What Kubernetes, KServe and ModelMesh rely on (docs/server.md, issue 25): the tritonserver flags
their runtimes pass, the repository API's semantics in explicit mode, and the graceful drain on
SIGTERM — readiness false first (HTTP, gRPC ServerReady and grpc.health.v1) while every request is
still served, then the shutdown — with idle gRPC streams closed instead of holding the exit."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import BINARY, SIMPLE_SUM, Server, http_status, simple_inputs


def grpc_health(port):
    """grpc.health.v1.Health/Check for the whole server: 1 SERVING, 2 NOT_SERVING (raw protobuf:
    field 1, varint)."""
    import grpc
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda b: b, response_deserializer=lambda b: b)
        reply = check(b"", timeout=5)
    assert reply[:1] == b"\x08", reply
    return reply[1]


@pytest.fixture()
def simple_repo(tmp_path, repository):
    repo = tmp_path / "models"
    repo.mkdir()
    shutil.copytree(os.path.join(repository, "simple"), repo / "simple")
    return repo


def test_flags_kserve_and_modelmesh_pass_and_repository_semantics(simple_repo, repository):
    # ModelMesh's Triton adapter and KServe's runtime start tritonserver with these.
    s = Server(str(simple_repo), "--model-control-mode=explicit", "--strict-model-config=false",
               "--strict-readiness=false", "--allow-sagemaker=false", "--allow-vertex-ai=false",
               "--allow-grpc=true", "--allow-http=true", "--model-load-thread-count=4",
               "--grpc-keepalive-time=7200000", "--grpc-keepalive-permit-without-calls=1",
               "--grpc-http2-max-pings-without-data=0", "--log-verbose=0")
    try:
        base = f"http://127.0.0.1:{s.port}/v2"
        # Unloading a model that was never loaded (or does not exist) answers OK.
        assert http_status(f"{base}/repository/models/never_there/unload", "POST")[0] == 200
        # A model directory that appears after the start loads through the API.
        shutil.copytree(os.path.join(repository, "simple"), simple_repo / "late")
        cfg = simple_repo / "late" / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('name: "simple"', 'name: "late"'))
        assert http_status(f"{base}/repository/models/late/load", "POST")[0] == 200
        code, body = http_status(f"{base}/repository/index", "POST", b'{"ready": true}')
        assert code == 200 and b'"name":"late"' in body and b'"name":"simple"' not in body, body
        code, body = http_status(f"{base}/repository/index", "POST", b"{}")
        assert b'"name":"simple"' in body and b'"name":"late"' in body, body
        assert http_status(f"{base}/models/late/ready")[0] == 200
        assert http_status(f"{base}/health/ready")[0] == 200  # --strict-readiness=false
    finally:
        assert s.stop() == 0, s.read_log()
    # The protocols Nereid does not serve are refused when asked for, with the reason.
    for flag in ("--allow-sagemaker=true", "--allow-vertex-ai"):
        out = subprocess.run([BINARY, "serve", f"--model-repository={simple_repo}", flag],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2
        assert "serves the KServe v2 protocol over HTTP and gRPC only" in out.stderr, out.stderr


def test_a_failed_reload_keeps_the_server_ready(simple_repo):
    """model_analyzer loads each configuration it tries through the load API; one that cannot load
    leaves the previous version serving and the server ready (Triton's update rule). A model that
    never loaded makes a strictly ready server unready."""
    import tritonclient.http as httpclient
    s = Server(str(simple_repo), "--model-control-mode=explicit", "--load-model=simple")
    try:
        c = httpclient.InferenceServerClient(s.url)
        config = c.get_model_config("simple")
        config["max_batch_size"] = -3  # refused at load
        with pytest.raises(Exception, match="max_batch_size"):
            c.load_model("simple", config=json.dumps(config))
        assert c.is_server_ready() and c.is_model_ready("simple")
        assert (c.infer("simple", simple_inputs(httpclient)).as_numpy("OUTPUT0") == SIMPLE_SUM).all()
        # A model that never loaded: not ready (strict readiness), then ready again once unloaded.
        shutil.copytree(simple_repo / "simple", simple_repo / "broken")
        (simple_repo / "broken" / "config.pbtxt").write_text('name: "broken"\nbackend: "nope"\n')
        with pytest.raises(Exception):
            c.load_model("broken")
        assert not c.is_server_ready()
        c.unload_model("broken")
        assert c.is_server_ready()
    finally:
        assert s.stop() == 0, s.read_log()


def test_drain_grace_turns_readiness_off_and_keeps_serving(simple_repo):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    s = Server(str(simple_repo), "--drain-grace-secs=3", "--exit-timeout-secs=10")
    base = f"http://127.0.0.1:{s.port}/v2"
    assert http_status(f"{base}/health/ready")[0] == 200
    assert grpc_health(s.grpc_port) == 1
    results, stop = [], threading.Event()

    def load():  # one client keeps inferring through the grace, on one keep-alive connection
        c = httpclient.InferenceServerClient(s.url)
        inputs, want = simple_inputs(httpclient), np.array([SIMPLE_SUM])
        while not stop.is_set():
            t = time.time()
            try:
                got = c.infer("simple", inputs).as_numpy("OUTPUT0")
                results.append((t, bool((got == want).all())))
            except Exception as e:  # noqa: BLE001 - every outcome is recorded and checked
                results.append((t, repr(e)))
            time.sleep(0.01)
        c.close()

    worker = threading.Thread(target=load)
    worker.start()
    time.sleep(0.5)
    sigterm = time.time()
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    try:
        # Not ready on every probe, still live, and still answering requests of every kind.
        assert http_status(f"{base}/health/ready")[0] == 400
        assert http_status(f"{base}/health/live")[0] == 200
        assert grpc_health(s.grpc_port) == 2
        g = grpcclient.InferenceServerClient(s.grpc_url)
        assert not g.is_server_ready()
        inputs, want = simple_inputs(grpcclient), np.array([SIMPLE_SUM])
        assert (g.infer("simple", inputs).as_numpy("OUTPUT0") == want).all()
        g.close()
        time.sleep(1.5)
    finally:
        stop.set()
        worker.join()
    assert s.proc.wait(timeout=20) == 0, s.read_log()
    exited = time.time()
    assert exited - sigterm >= 3, "the server left before its drain grace"
    during = [ok for t, ok in results if sigterm <= t <= sigterm + 2.4]
    assert len(during) > 20 and all(ok is True for ok in during), during[:5]
    assert all(ok is True for t, ok in results if t < sigterm)
    log = s.read_log()
    assert "not ready; still serving for 3 s" in log and "all requests answered" in log, log
    s.log.close()


def test_idle_grpc_stream_does_not_hold_the_exit(simple_repo):
    import tritonclient.grpc as grpcclient
    s = Server(str(simple_repo), "--exit-timeout-secs=30")
    c = grpcclient.InferenceServerClient(s.grpc_url)
    answers = []
    c.start_stream(callback=lambda result, error: answers.append((result, error)))
    inputs, want = simple_inputs(grpcclient), np.array([SIMPLE_SUM])
    c.async_stream_infer("simple", inputs)
    deadline = time.time() + 10
    while not answers and time.time() < deadline:
        time.sleep(0.01)
    assert answers and answers[0][1] is None, answers
    assert (answers[0][0].as_numpy("OUTPUT0") == want).all()
    # The stream stays open and idle; the shutdown closes it rather than waiting 30 s for it.
    start = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=25) == 0, s.read_log()
    assert time.time() - start < 10, "an idle stream held the exit"
    c.stop_stream()
    c.close()
    assert "all requests answered" in s.read_log()
    s.log.close()


SLOW_CONFIG = '''
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''

# Y = X after X seconds.
SLOW_MODEL = '''
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            time.sleep(float(x[0]))
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return out
'''


def write_slow(repo, name, extra):
    os.makedirs(repo / name / "1")
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n' + SLOW_CONFIG + extra)
    (repo / name / "1" / "model.py").write_text(SLOW_MODEL)


def test_admission_limit_answers_429_and_resource_exhausted(simple_repo):
    import sys
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
    write_slow(simple_repo, "slow", 'parameters { key: "nereid.max_queued_requests" '
                                    'value { string_value: "3" } }\n')
    write_slow(simple_repo, "bad_limit", 'parameters { key: "nereid.max_queued_requests" '
                                         'value { string_value: "-1" } }\n')
    s = Server(str(simple_repo), "--exit-on-error=false", "--strict-readiness=false",
               env={"NEREID_PYTHON": sys.executable})
    try:
        base = f"http://127.0.0.1:{s.port}/v2"
        code, body = http_status(f"{base}/models/bad_limit/ready")
        assert code == 400
        log = s.read_log()
        assert "parameter 'nereid.max_queued_requests' must be a whole number" in log, log

        def x(module, seconds):
            i = module.InferInput("X", [1], "FP32")
            i.set_data_from_numpy(np.array([seconds], dtype=np.float32))
            return [i]

        c = httpclient.InferenceServerClient(s.url, concurrency=8)
        # Three slow requests fill the limit (one running, two waiting) ...
        held = [c.async_infer("slow", x(httpclient, 1.5)) for _ in range(3)]
        time.sleep(0.5)
        # ... the fourth is refused at once: 429 with Retry-After over HTTP,
        body = b'{"inputs":[{"name":"X","shape":[1],"datatype":"FP32","data":[0]}]}'
        req = urllib.request.Request(f"{base}/models/slow/infer", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 429
        assert refused.value.headers["Retry-After"] == "1"
        assert "at its limit of 3 outstanding requests" in refused.value.read().decode()
        # RESOURCE_EXHAUSTED over gRPC,
        g = grpcclient.InferenceServerClient(s.grpc_url)
        with pytest.raises(InferenceServerException) as e:
            g.infer("slow", x(grpcclient, 0))
        assert e.value.status() == "StatusCode.RESOURCE_EXHAUSTED", e.value.status()
        # while other models keep serving.
        inputs, want = simple_inputs(httpclient), np.array([SIMPLE_SUM])
        assert (c.infer("simple", inputs).as_numpy("OUTPUT0") == want).all()
        # Every admitted request is answered; then the places are free again.
        for h in held:
            assert h.get_result().as_numpy("Y")[0] == np.float32(1.5)
        assert g.infer("slow", x(grpcclient, 0)).as_numpy("Y")[0] == 0
        g.close()
        c.close()
        m = s.metrics()
        rejected = [v for k, v in m.items() if k.startswith("nv_inference_request_failure{")
                    and 'model="slow"' in k and 'reason="REJECTED"' in k]
        assert rejected == [2], rejected
        assert m['nv_inference_request_success{model="slow",version="1"}'] == 4
    finally:
        assert s.stop() == 0, s.read_log()
