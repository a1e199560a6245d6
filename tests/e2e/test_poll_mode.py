"""Triton's poll mode on the real binary (--model-control-mode=poll --repository-poll-secs=1): a
model directory that appears is loaded, one that changes is reloaded (a broken change keeps the
old model serving), one that goes is unloaded; requests sent across a reload are all answered;
the load/unload API refuses with Triton's message."""
import os
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import BINARY, Server


def add_model(repository, repo, name):
    shutil.copytree(os.path.join(repository, "simple"), os.path.join(repo, name))
    path = os.path.join(repo, name, "config.pbtxt")
    text = open(path).read().replace('name: "simple"', f'name: "{name}"')
    open(path, "w").write(text)
    return path


def infer(client, name):
    a = np.full((1, 16), 3, dtype=np.int32)
    inputs = []
    for n in ("INPUT0", "INPUT1"):
        t = httpclient.InferInput(n, [1, 16], "INT32")
        t.set_data_from_numpy(a)
        inputs.append(t)
    return client.infer(name, inputs).as_numpy("OUTPUT0")


def wait_until(predicate, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_poll_mode_follows_the_repository(repository, tmp_path):
    repo = str(tmp_path / "models")
    os.makedirs(repo)
    add_model(repository, repo, "first")
    s = Server(repo, "--model-control-mode=poll", "--repository-poll-secs=1")
    try:
        c = httpclient.InferenceServerClient(s.url)
        assert c.is_model_ready("first")
        # Appears: loaded.
        config = add_model(repository, repo, "second")
        assert wait_until(lambda: c.is_model_ready("second")), s.read_log()
        assert (infer(c, "second") == 6).all()
        # Changes (while requests flow): reloaded, and every request sent meanwhile is answered.
        errors, answered, stop = [], [0], threading.Event()

        def load():
            client = httpclient.InferenceServerClient(s.url)
            while not stop.is_set():
                try:
                    assert (infer(client, "second") == 6).all()
                    answered[0] += 1
                except Exception as e:  # noqa: BLE001 - every failure is a finding
                    errors.append(repr(e))

        t = threading.Thread(target=load)
        t.start()
        time.sleep(0.5)
        with open(config, "a") as f:
            f.write("\nmodel_warmup [ ]\nparameters { key: \"poll_test\" value { string_value: \"2\" } }\n")
        assert wait_until(lambda: "poll_test" in c.get_model_config("second").get("parameters", {}))
        time.sleep(0.5)
        stop.set()
        t.join()
        assert not errors and answered[0] > 0, (errors[:3], answered)
        # A broken change: the model keeps serving what it had.
        with open(config, "a") as f:
            f.write("\nthis is not a config\n")
        assert wait_until(lambda: "repository poll: load failed for model 'second': model 'second': "
                          "failed to parse" in s.read_log()), s.read_log()
        assert c.is_model_ready("second") and (infer(c, "second") == 6).all()
        # Goes: unloaded.
        shutil.rmtree(os.path.join(repo, "second"))
        assert wait_until(lambda: not c.is_model_ready("second")), s.read_log()
        with pytest.raises(InferenceServerException):
            infer(c, "second")
        assert (infer(c, "first") == 6).all()
        # The control API is the poller's in this mode.
        with pytest.raises(InferenceServerException,
                           match="explicit model load / unload is not allowed if polling is enabled"):
            c.load_model("first")
        with pytest.raises(InferenceServerException, match="polling is enabled"):
            c.unload_model("first")
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("mode", ["poll", "none"])
def test_load_model_needs_explicit_mode(repository, mode):
    p = subprocess.run([BINARY, "serve", f"--model-repository={repository}", "--http-port=0",
                        "--grpc-port=0", "--metrics-port=0", f"--model-control-mode={mode}",
                        "--load-model=simple"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert ("Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
            in p.stdout + p.stderr)
