"""The response cache on the real binary (--cache-config local,size=...): a repeated request is
answered from the cache without reaching the model, counted as Triton counts it (statistics'
cache_hit/cache_miss, nv_cache_* series), over HTTP and gRPC; the flags' and configs' refusals."""
import os
import shutil
import subprocess
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import BINARY, Server


@pytest.fixture(scope="module")
def cache_repo(repository, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("cache") / "models")
    os.makedirs(repo)
    for name, extra in (("simple_cached", "response_cache { enable: true }\n"),
                        ("simple", ""),
                        ("decoupled_cached", "response_cache { enable: true }\n"
                                             "model_transaction_policy { decoupled: true }\n")):
        shutil.copytree(os.path.join(repository, "simple"), os.path.join(repo, name))
        path = os.path.join(repo, name, "config.pbtxt")
        text = open(path).read().replace('name: "simple"', f'name: "{name}"')
        open(path, "w").write(text + extra)
    return repo


def inputs(module, value, outputs=None):
    a = np.full((1, 16), value, dtype=np.int32)
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        t = module.InferInput(name, [1, 16], "INT32")
        t.set_data_from_numpy(a)
        tensors.append(t)
    requested = [module.InferRequestedOutput(o) for o in outputs] if outputs else None
    return tensors, requested


def stats(client, model):
    s = client.get_inference_statistics(model)["model_stats"][0]
    return (s["inference_count"], s["execution_count"], s["inference_stats"]["success"]["count"],
            s["inference_stats"]["cache_hit"]["count"], s["inference_stats"]["cache_miss"]["count"])


def metric_lines(server):
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_repeated_requests_are_answered_from_the_cache(cache_repo):
    s = Server(cache_repo, "--cache-config=local,size=1048576", "--exit-on-error=false")
    try:
        http = httpclient.InferenceServerClient(s.url)
        for _ in range(3):
            t, _ = inputs(httpclient, 5)
            r = http.infer("simple_cached", t)
            assert (r.as_numpy("OUTPUT0") == 10).all() and (r.as_numpy("OUTPUT1") == 0).all()
        # One execution; two hits (counted as successes, not as inferences), one miss.
        assert stats(http, "simple_cached") == (1, 1, 3, 2, 1)
        t, _ = inputs(httpclient, 6)
        assert (http.infer("simple_cached", t).as_numpy("OUTPUT0") == 12).all()
        assert stats(http, "simple_cached") == (2, 2, 4, 2, 2)
        # A request for a subset of the outputs is answered from the full entry.
        t, o = inputs(httpclient, 5, ["OUTPUT1"])
        r = http.infer("simple_cached", t, outputs=o)
        assert r.as_numpy("OUTPUT0") is None and (r.as_numpy("OUTPUT1") == 0).all()
        # gRPC shares the cache: the same inputs hit.
        grpc = grpcclient.InferenceServerClient(s.grpc_url)
        t, _ = inputs(grpcclient, 6)
        assert (grpc.infer("simple_cached", t).as_numpy("OUTPUT0") == 12).all()
        grpc.close()
        assert stats(http, "simple_cached") == (2, 2, 6, 4, 2)
        # A model that does not enable the cache is not cached.
        for _ in range(2):
            t, _ = inputs(httpclient, 5)
            http.infer("simple", t)
        assert stats(http, "simple") == (2, 2, 2, 0, 0)
        m = metric_lines(s)
        assert m['nv_cache_num_hits_per_model{model="simple_cached",version="1"}'] == "4"
        assert m['nv_cache_num_misses_per_model{model="simple_cached",version="1"}'] == "2"
        assert 'nv_cache_num_hits_per_model{model="simple",version="1"}' not in m
        index = {e["name"]: e for e in http.get_model_repository_index()}
        assert index["decoupled_cached"]["state"] == "UNAVAILABLE"
        assert ("Response Cache does not currently support model decoupled_cached with 'decoupled' "
                "transaction policy. Please disable the response cache." in index["decoupled_cached"]["reason"])
    finally:
        assert s.stop() == 0


def test_without_a_server_cache_the_model_setting_does_nothing(cache_repo):
    s = Server(cache_repo, "--exit-on-error=false")
    try:
        http = httpclient.InferenceServerClient(s.url)
        for _ in range(2):
            t, _ = inputs(httpclient, 5)
            http.infer("simple_cached", t)
        assert stats(http, "simple_cached") == (2, 2, 2, 0, 0)
        assert not any(k.startswith("nv_cache_") for k in metric_lines(s))
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("args, message", [
    (["--cache-config=local,size=8192", "--cache-config=redis,key=value"], "multiple cache configurations"),
    (["--response-cache-byte-size=12345", "--cache-config=local,size=67890"], "Incompatible flags"),
    (["--cache-config=local"], "option format is"),
    (["--cache-config=redis,host=localhost"], "cache implementation 'redis' is not available"),
])
def test_bad_cache_flags_stop_the_server_with_triton_s_message(cache_repo, args, message):
    p = subprocess.run([BINARY, "serve", f"--model-repository={cache_repo}", "--http-port=0",
                        "--grpc-port=0", "--metrics-port=0", *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert message in p.stdout + p.stderr


def test_a_reloaded_model_never_answers_from_what_the_old_one_stored(repository, tmp_path):
    # The same name, version and inputs, first on the identity backend (OUTPUT0 = INPUT0), then,
    # reloaded, on simple's ONNX graph (OUTPUT0 = INPUT0 + INPUT1).
    repo = str(tmp_path / "models")
    shutil.copytree(os.path.join(repository, "simple"), os.path.join(repo, "swapped"))
    path = os.path.join(repo, "swapped", "config.pbtxt")
    onnx_config = open(path).read().replace('name: "simple"', 'name: "swapped"')
    onnx_config += "response_cache { enable: true }\n"
    identity_config = onnx_config.replace('platform: "onnxruntime_onnx"', 'backend: "identity"')
    assert identity_config != onnx_config
    open(path, "w").write(identity_config)
    s = Server(repo, "--cache-config=local,size=1048576", "--model-control-mode=explicit",
               "--load-model=swapped")
    try:
        http = httpclient.InferenceServerClient(s.url)
        t, _ = inputs(httpclient, 5)
        assert (http.infer("swapped", t).as_numpy("OUTPUT0") == 5).all()  # identity: stored
        assert (http.infer("swapped", t).as_numpy("OUTPUT0") == 5).all()  # a hit
        open(path, "w").write(onnx_config)
        http.load_model("swapped")
        assert (http.infer("swapped", t).as_numpy("OUTPUT0") == 10).all()  # the new model's
        assert stats(http, "swapped")[3:] == (0, 1)  # the new load: no hit, one miss
    finally:
        assert s.stop() == 0
