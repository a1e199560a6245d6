"""End-to-end fixtures: the real nereid binary on free ports, a temporary model repository (the
example models plus one identity model per datatype, generated with the `onnx` package), and the
real tritonclient."""
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import generate_models  # noqa: E402
import models  # noqa: E402

BINARY = os.environ.get("NEREID_BINARY", os.path.join(ROOT, "build", "nereid"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One nereid process; stops it (SIGTERM) and checks it exits cleanly."""

    def __init__(self, repository, *args, expect_ready=True, env=None, https_context=None,
                 prefix=()):
        self.port = free_port()
        self.metrics_port = free_port()
        self.grpc_port = free_port()
        self.url = f"localhost:{self.port}"
        self.grpc_url = f"localhost:{self.grpc_port}"
        self.log_path = os.path.join(repository, f"..", f"server-{self.port}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*prefix, BINARY, "serve", f"--model-repository={repository}", f"--http-port={self.port}",
             f"--metrics-port={self.metrics_port}", f"--grpc-port={self.grpc_port}",
             "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", *args],
            stdout=self.log, stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env})
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nereid exited with {self.proc.returncode}: {self.read_log()}")
            try:
                scheme = "https" if https_context else "http"
                urllib.request.urlopen(f"{scheme}://{self.url}/v2/health/live", timeout=1,
                                       context=https_context)
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("nereid did not come up: " + self.read_log())

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

    def read_log(self):
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


@pytest.fixture(scope="session")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    repo = root / "models"
    shutil.copytree(os.path.join(ROOT, "examples", "models"), repo,
                    ignore=shutil.ignore_patterns("*.onnx", "item_labels.txt"))
    subprocess.check_call([sys.executable, os.path.join(ROOT, "examples", "generate_models.py"), "--out", str(repo)],
                          stdout=subprocess.DEVNULL)
    models.write_identity_models(str(repo))
    return str(repo)


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
