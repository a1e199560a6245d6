"""End-to-end fixtures: the real nereid binary on free ports, a temporary model repository (the
example models plus one identity model per datatype, generated with the `onnx` package), and the
real tritonclient."""
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from itertools import count

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import models  # noqa: E402

BINARY = os.environ.get("NEREID_BINARY", os.path.join(ROOT, "build", "nereid"))
_SERVERS = count()  # numbers the servers' log files

# Every process a test starts (servers, their Python stubs, what those fork, HAProxy, Prometheus)
# inherits this mark in its environment; at the end of the session none may be left running.
_MARK = f"NEREID_TEST_RUN={os.getpid()}-{time.time_ns()}"
os.environ["NEREID_TEST_RUN"] = _MARK.split("=", 1)[1]


def _marked_processes():
    """(pid, command line) of every live process (zombies excluded) carrying this run's mark."""
    # This process's own multiprocessing resource tracker (tritonclient's shared-memory helpers
    # start it) lives as long as pytest does: it is not a test's.
    from multiprocessing import resource_tracker
    own = {os.getpid(), getattr(resource_tracker._resource_tracker, "_pid", None)}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in own:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if _MARK.encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found.append((int(entry), f.read().replace(b"\0", b" ").decode(errors="replace")))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    """Fails the run, naming them, when processes the tests started outlive the session (a few
    seconds allowed for the last ones to finish exiting)."""
    yield
    deadline = time.monotonic() + 10
    left = _marked_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _marked_processes()
    assert not left, "processes started by the tests are still running: " + "; ".join(
        f"pid {pid}: {cmd[:200]}" for pid, cmd in left)


class Server:
    """One nereid process on ports it picks itself (port 0, read back from its log: no race with
    another process taking a port between a test choosing it and the server binding it); stops it
    (SIGTERM) and checks it exits cleanly."""

    def __init__(self, repository, *args, expect_ready=True, env=None, https_context=None,
                 prefix=(), host="127.0.0.1", client_shm=True, start_timeout=30):
        self.repository = repository
        self.log_path = os.path.join(repository, "..", f"server-{next(_SERVERS)}-{os.getpid()}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*prefix, BINARY, "serve", f"--model-repository={repository}", "--http-port=0",
             "--metrics-port=0", "--grpc-port=0", "--http-address=127.0.0.1",
             "--grpc-address=127.0.0.1",
             # Client shared memory is off by default (Triton 2.69's --allow-client-shm); the
             # suite's servers allow it unless a test asks for the default (client_shm=False).
             *(["--allow-client-shm=true"] if client_shm else []), *args],
            stdout=self.log, stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env})
        deadline = time.time() + start_timeout
        ports = {}
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nereid exited with {self.proc.returncode}: {self.read_log()}")
            for line in self.read_log().splitlines():
                for key, marker in (("http", "Started HTTPService at "),
                                    ("metrics", "Started Metrics Service at "),
                                    ("grpc", "Started GRPCInferenceService at ")):
                    if marker in line:
                        ports[key] = int(line.split(marker)[1].split()[0].rsplit(":", 1)[1])
            if "http" in ports:
                try:
                    scheme = "https" if https_context else "http"
                    urllib.request.urlopen(f"{scheme}://{host}:{ports['http']}/v2/health/live",
                                           timeout=1, context=https_context)
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        else:
            self.proc.kill()  # (not left running for the next test's leak check to find)
            self.proc.wait()
            raise RuntimeError("nereid did not come up: " + self.read_log())
        self.port = ports["http"]
        self.metrics_port = ports.get("metrics", 0)
        self.grpc_port = ports.get("grpc", 0)
        # 'host': where this process reaches the server (another network namespace's address).
        self.host = host
        self.url = f"localhost:{self.port}" if host == "127.0.0.1" else f"{host}:{self.port}"
        self.grpc_url = (f"localhost:{self.grpc_port}" if host == "127.0.0.1"
                         else f"{host}:{self.grpc_port}")

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        self.log.close()
        return self.proc.returncode

    def metrics(self):
        """The metrics endpoint's samples: {'name{labels}': value}."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                      timeout=10).read().decode()
        return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()
                                         if line and not line.startswith("#"))}

    def accepted(self, model, version=1):
        """Requests the model version has accepted so far: answered successfully or still pending
        (one scrape, so the two agree)."""
        m = self.metrics()
        labels = f'{{model="{model}",version="{version}"}}'
        return int(m.get(f"nv_inference_request_success{labels}", 0) +
                   m.get(f"nv_inference_pending_request_count{labels}", 0))


def http_status(url, method="GET", body=None, headers=None):
    """(status, body bytes) of one HTTP request, error statuses included."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# What `simple` answers for simple_inputs(): OUTPUT0 = INPUT0 + INPUT1.
SIMPLE_INPUT = list(range(16))
SIMPLE_SUM = [2 * i for i in SIMPLE_INPUT]


def simple_inputs(module):
    """INPUT0 and INPUT1 of `simple` for tritonclient's http or grpc module."""
    import numpy as np
    a = np.array([SIMPLE_INPUT], dtype=np.int32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = module.InferInput(name, [1, 16], "INT32")
        i.set_data_from_numpy(a)
        inputs.append(i)
    return inputs


def example_repository(repo, source="models"):
    """examples/<source> copied to 'repo' without the files it generates, then its models generated
    (examples/generate_models.py); returns 'repo' as a string."""
    repo = str(repo)
    shutil.copytree(os.path.join(ROOT, "examples", source), repo,
                    ignore=shutil.ignore_patterns("*.onnx", "item_labels.txt"))
    subprocess.check_call([sys.executable, os.path.join(ROOT, "examples", "generate_models.py"),
                           "--out", repo], stdout=subprocess.DEVNULL)
    return repo


@pytest.fixture(scope="session")
def repository(tmp_path_factory):
    repo = example_repository(tmp_path_factory.mktemp("repo") / "models")
    models.write_identity_models(repo)
    return repo


@pytest.fixture(scope="session")
def server(repository):
    s = Server(repository, "--http-max-input-size=4194304", "--http-thread-count=4")
    yield s
    assert s.stop() == 0, s.read_log()


@pytest.fixture()
def client(server):
    import tritonclient.http as httpclient
    c = httpclient.InferenceServerClient(server.url, concurrency=16)
    yield c
    c.close()
