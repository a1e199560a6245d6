"""Restricted API groups (--http-restricted-api, --grpc-restricted-protocol) and TLS (gRPC with
Triton's --grpc-use-ssl* flags, HTTPS with Nereid's --http-ssl-*), driven by the real tritonclient."""
import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import BINARY, Server, http_status

ADMIN = ["--http-restricted-api=model-repository,logging,statistics,model-config:admin-key=s3cret",
         "--grpc-restricted-protocol=model-repository,logging,statistics,model-config:admin-key=s3cret"]


def simple_inputs(module):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return a, inputs


@pytest.fixture(scope="module")
def restricted(repository):
    s = Server(repository, *ADMIN)
    yield s
    assert s.stop() == 0, s.read_log()


def test_http_restricted_groups_need_the_header(restricted):
    base = f"http://{restricted.url}"
    for method, path, body in [("POST", "/v2/repository/index", b"{}"), ("GET", "/v2/logging", None),
                               ("GET", "/v2/models/stats", None), ("GET", "/v2/models/simple/config", None)]:
        status, text = http_status(base + path, method, body)
        assert status == 403, (path, status, text)
        assert json.loads(text) == {"error": "This API is restricted, expecting header 'admin-key'"}
        status, _ = http_status(base + path, method, body, {"admin-key": "wrong"})
        assert status == 403, path
        status, text = http_status(base + path, method, body, {"Admin-Key": "s3cret"})
        assert status == 200, (path, status, text)
    # Open groups stay open.
    assert http_status(base + "/v2/health/ready")[0] == 200
    assert http_status(base + "/v2/models/simple")[0] == 200
    c = httpclient.InferenceServerClient(restricted.url)
    a, inputs = simple_inputs(httpclient)
    assert (c.infer("simple", inputs).as_numpy("OUTPUT0") == 2 * a).all()
    with pytest.raises(InferenceServerException, match="restricted"):
        c.get_model_repository_index()
    assert c.get_model_repository_index(headers={"admin-key": "s3cret"})
    c.close()


def test_grpc_restricted_protocols_need_the_header(restricted):
    c = grpcclient.InferenceServerClient(restricted.grpc_url)
    for call in (c.get_model_repository_index, c.get_log_settings,
                 lambda **kw: c.get_inference_statistics("simple", **kw),
                 lambda **kw: c.get_model_config("simple", **kw)):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'" in str(e.value)
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        call(headers={"triton-grpc-protocol-admin-key": "s3cret"})
    assert c.is_server_ready() and c.get_model_metadata("simple").name == "simple"
    a, inputs = simple_inputs(grpcclient)
    assert (c.infer("simple", inputs).as_numpy("OUTPUT0") == 2 * a).all()
    c.close()


def test_restricted_inference_covers_unary_and_streaming(repository):
    s = Server(repository, "--grpc-restricted-protocol=inference:k=v", "--http-restricted-api=inference:k=v")
    try:
        c = grpcclient.InferenceServerClient(s.grpc_url)
        a, inputs = simple_inputs(grpcclient)
        with pytest.raises(InferenceServerException, match="restricted"):
            c.infer("simple", inputs)
        assert (c.infer("simple", inputs, headers={"triton-grpc-protocol-k": "v"}).as_numpy("OUTPUT0") == 2 * a).all()
        results = []
        c.start_stream(callback=lambda result, error: results.append((result, error)))
        try:  # the stream is refused at once: its error may arrive before the request is queued
            c.async_stream_infer("simple", inputs)
        except InferenceServerException as e:
            assert "no longer in valid state" in str(e)
        c.stop_stream()
        assert len(results) == 1 and results[0][1] is not None and "restricted" in str(results[0][1])
        results.clear()
        c.start_stream(callback=lambda result, error: results.append((result, error)),
                       headers={"triton-grpc-protocol-k": "v"})
        c.async_stream_infer("simple", inputs)
        c.stop_stream()
        assert len(results) == 1 and results[0][1] is None
        hc = httpclient.InferenceServerClient(s.url)
        with pytest.raises(InferenceServerException, match="restricted"):
            hc.infer("simple", simple_inputs(httpclient)[1])
        assert hc.infer("simple", simple_inputs(httpclient)[1], headers={"k": "v"}).as_numpy("OUTPUT0") is not None
        hc.close()
        c.close()
    finally:
        assert s.stop() == 0, s.read_log()


@pytest.mark.parametrize("flag", [
    "--http-restricted-api=modelrepo:k=v",            # unknown group
    "--http-restricted-api=logging",                  # no key=value
    "--grpc-restricted-protocol=logging:=v",          # empty key
    "--grpc-restricted-protocol=logging:a=b",         # the same group twice (with the next flag)
])
def test_bad_restriction_flags_are_refused(repository, flag):
    extra = ["--grpc-restricted-protocol=logging,trace:c=d"] if flag.endswith("logging:a=b") else []
    p = subprocess.run([BINARY, "serve", f"--model-repository={repository}", flag, *extra],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert "error:" in p.stderr


# ---- TLS ----

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for localhost signed by it, and a client certificate."""
    d = str(tmp_path_factory.mktemp("certs"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=nereid-test-ca", cwd=d)
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={'localhost' if name == 'server' else 'client'}", cwd=d)
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return {k: os.path.join(d, k) for k in
            ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_grpc_ssl(repository, certs):
    s = Server(repository, "--grpc-use-ssl=true", f"--grpc-server-cert={certs['server.crt']}",
               f"--grpc-server-key={certs['server.key']}")
    try:
        c = grpcclient.InferenceServerClient(s.grpc_url, ssl=True, root_certificates=certs["ca.crt"])
        a, inputs = simple_inputs(grpcclient)
        assert c.is_server_live()
        assert (c.infer("simple", inputs).as_numpy("OUTPUT1") == 0).all()
        c.close()
        plain = grpcclient.InferenceServerClient(s.grpc_url)
        with pytest.raises(InferenceServerException):
            plain.is_server_live(client_timeout=5)
        plain.close()
    finally:
        assert s.stop() == 0, s.read_log()


def test_grpc_mutual_tls(repository, certs):
    s = Server(repository, "--grpc-use-ssl-mutual=true", f"--grpc-server-cert={certs['server.crt']}",
               f"--grpc-server-key={certs['server.key']}", f"--grpc-root-cert={certs['ca.crt']}")
    try:
        c = grpcclient.InferenceServerClient(s.grpc_url, ssl=True, root_certificates=certs["ca.crt"],
                                             private_key=certs["client.key"],
                                             certificate_chain=certs["client.crt"])
        a, inputs = simple_inputs(grpcclient)
        assert (c.infer("simple", inputs).as_numpy("OUTPUT0") == 2 * a).all()
        c.close()
        anonymous = grpcclient.InferenceServerClient(s.grpc_url, ssl=True, root_certificates=certs["ca.crt"])
        with pytest.raises(InferenceServerException):
            anonymous.is_server_live(client_timeout=5)
        anonymous.close()
    finally:
        assert s.stop() == 0, s.read_log()


def test_grpc_ssl_without_key_fails_to_start(repository, certs):
    p = subprocess.run([BINARY, "serve", f"--model-repository={repository}", "--grpc-use-ssl=true",
                        f"--grpc-server-cert={certs['server.crt']}", "--http-port=0", "--metrics-port=0",
                        "--grpc-port=0"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "--grpc-server-key" in p.stdout + p.stderr


def test_https_and_mutual_tls(repository, certs):
    context = ssl.create_default_context(cafile=certs["ca.crt"])
    context.load_cert_chain(certs["client.crt"], certs["client.key"])
    s = Server(repository, f"--http-ssl-cert={certs['server.crt']}", f"--http-ssl-key={certs['server.key']}",
               f"--http-ssl-root-cert={certs['ca.crt']}", https_context=context)
    try:
        c = httpclient.InferenceServerClient(
            s.url, ssl=True, ssl_options={"ca_certs": certs["ca.crt"], "certfile": certs["client.crt"],
                                          "keyfile": certs["client.key"]})
        a, inputs = simple_inputs(httpclient)
        assert (c.infer("simple", inputs).as_numpy("OUTPUT0") == 2 * a).all()
        c.close()
        # No client certificate: the handshake fails; plain HTTP on the TLS port gets nothing.
        anonymous = ssl.create_default_context(cafile=certs["ca.crt"])
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"https://{s.url}/v2/health/live", timeout=5, context=anonymous).read()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://{s.url}/v2/health/live", timeout=5).read()
        # The server still serves after both.
        assert urllib.request.urlopen(f"https://{s.url}/v2/health/live", timeout=5, context=context).status == 200
    finally:
        assert s.stop() == 0, s.read_log()
