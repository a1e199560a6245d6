"""How often the server copies tensor bytes, counted by the server itself (the
nereid_tensor_copy_bytes metric): on the binary HTTP path and the gRPC raw path every input byte is
copied at most once on its way in (only what arrived with the HTTP header; nothing that the socket
delivered in place or that gRPC left aligned in one slice) and output bytes not at all after the backend
wrote them, for single and batched requests, aligned or not. A compressed response, which must be
flattened, shows that the counter counts."""
import re
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import Server
from models import identity_name


@pytest.fixture(scope="module")
def counted(repository):
    s = Server(repository, "--http-max-input-size=16777216")
    yield s
    assert s.stop() == 0, s.read_log()


def copies(server):
    text = urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics").read().decode()
    out = {}
    for direction in ("input", "output"):
        m = re.search(r'^nereid_tensor_copy_bytes\{direction="%s"\} (\d+)$' % direction, text, re.M)
        out[direction] = int(m.group(1))
    return out


def delta(server, fn):
    before = copies(server)
    fn()
    after = copies(server)
    return {k: after[k] - before[k] for k in after}


def http_identity(client, a, **kwargs):
    i = httpclient.InferInput("INPUT0", list(a.shape), "FP32")
    i.set_data_from_numpy(a, binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    r = client.infer(identity_name("FP32"), [i], outputs=[out], **kwargs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a)


def grpc_identity(client, a):
    i = grpcclient.InferInput("INPUT0", list(a.shape), "FP32")
    i.set_data_from_numpy(a)
    r = client.infer(identity_name("FP32"), [i])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a)


@pytest.mark.parametrize("elements", [16, 1 << 18])  # 64 B and 1 MiB of FP32
@pytest.mark.parametrize("request_id", ["", "odd"])  # JSON headers of different lengths: aligned or not
def test_http_binary_copies_each_input_byte_at_most_once_and_outputs_never(counted, elements, request_id):
    client = httpclient.InferenceServerClient(counted.url)
    a = np.random.rand(1, elements).astype(np.float32)
    d = delta(counted, lambda: http_identity(client, a, request_id=request_id))
    # Only what Beast had read along with the header (at most its 64 KiB buffer) was copied.
    assert d["input"] <= min(a.nbytes + 512, 64 << 10), d
    assert d["output"] == 0, d


@pytest.mark.parametrize("elements", [16, 1 << 18])
def test_grpc_raw_copies_each_input_byte_at_most_once_and_outputs_never(counted, elements):
    client = grpcclient.InferenceServerClient(counted.grpc_url)
    a = np.random.rand(1, elements).astype(np.float32)
    d = delta(counted, lambda: grpc_identity(client, a))
    # Read in place from gRPC's slices; copied once only where an input straddled two slices or
    # sat misaligned for its element type in the message.
    assert d["input"] <= a.nbytes, d
    assert d["output"] == 0, d


def test_batched_requests_copy_no_more(counted):
    """Concurrent requests batched by the dynamic batcher (recommend_model): per request, still at
    most its input bytes in and no output copies."""
    client = httpclient.InferenceServerClient(counted.url, concurrency=16)
    a = np.random.rand(1, 1024).astype(np.float32)

    def run():
        i = httpclient.InferInput("input__0", [1, 1024], "FP32")
        i.set_data_from_numpy(a, binary_data=True)
        out = httpclient.InferRequestedOutput("output__0", binary_data=True)
        pending = [client.async_infer("recommend_model", [i], outputs=[out]) for _ in range(64)]
        for p in pending:
            assert p.get_result().as_numpy("output__0").shape == (1, 1000)

    d = delta(counted, run)
    assert d["input"] <= 64 * (a.nbytes + 512), d
    assert d["output"] == 0, d


def test_compressed_response_is_counted(counted):
    client = httpclient.InferenceServerClient(counted.url)
    a = np.random.rand(1, 4096).astype(np.float32)
    d = delta(counted, lambda: http_identity(client, a, response_compression_algorithm="gzip"))
    assert d["output"] == a.nbytes, d  # flattened once for zlib
