"""`nereid config check` and `nereid config generate`: the real binary on real repositories."""
import glob
import os
import re
import shutil
import subprocess

from conftest import BINARY, ROOT


def run(*args):
    p = subprocess.run([BINARY, "config", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def add_model(repo, name, config, onnx_from):
    """A model directory with 'config' (None: no config.pbtxt) and a copy of an ONNX file."""
    d = os.path.join(repo, name)
    os.makedirs(os.path.join(d, "1"))
    shutil.copy(onnx_from, os.path.join(d, "1", "model.onnx"))
    if config is not None:
        with open(os.path.join(d, "config.pbtxt"), "w") as f:
            f.write(config)
    return d


def simple_onnx(repository):
    return os.path.join(repository, "simple", "1", "model.onnx")


IO = """input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


def test_example_repository_is_valid(repository):
    rc, out, err = run("check", repository)
    assert rc == 0, out + err
    assert "0 invalid" in out
    for name in ("simple", "recommend_model", "matmul_model"):
        assert re.search(r"^ok\s+%s " % name, out, re.M), out


def test_each_error_names_file_line_and_field(repository, tmp_path):
    repo = str(tmp_path)
    onnx = simple_onnx(repository)
    add_model(repo, "good", 'name: "good"\nmax_batch_size: 8\n' + IO, onnx)
    # The second input of a list-syntax block, line 12: its dims.
    add_model(repo, "zero_dim", 'name: "zero_dim"\nmax_batch_size: 8\n' + IO.replace(
        "dims: [ 16 ]\n  }\n]", "dims: [ 0 ]\n  }\n]"), onnx)
    add_model(repo, "bad_reshape", 'name: "bad_reshape"\nmax_batch_size: 8\n' + IO.replace(
        'name: "INPUT0"\n    data_type: TYPE_INT32\n    dims: [ 16 ]',
        'name: "INPUT0"\n    data_type: TYPE_INT32\n    dims: [ 16 ]\n    reshape { shape: [ 4, 5 ] }'), onnx)
    add_model(repo, "batch_io", 'name: "batch_io"\nmax_batch_size: 8\n' + IO +
              'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 } ]\n', onnx)
    add_model(repo, "two_errors", 'name: "two_errors"\nmax_batch_size: -1\n' + IO.replace(
        "TYPE_INT32\n    dims: [ 16 ]\n  },", "TYPE_INT32\n    dims: [ -2 ]\n  },", 1), onnx)
    add_model(repo, "wrong_dims", 'name: "wrong_dims"\nmax_batch_size: 8\n' + IO.replace(
        "{ name: \"OUTPUT1\" data_type: TYPE_INT32 dims: [ 16 ] }",
        "{ name: \"OUTPUT1\" data_type: TYPE_INT32 dims: [ 1 ] }"), onnx)

    rc, out, err = run("check", repo)
    assert rc == 1, out + err
    assert re.search(r"^ok\s+good ", out, re.M), out
    assert "zero_dim/config.pbtxt:12: field 'input[1].dims'" in out, out
    assert "bad_reshape/config.pbtxt:" in out and "field 'input[0].reshape'" in out, out
    assert "field 'batch_input[0].source_input'" in out and "expects 1 source input, got 0" in out
    assert "two_errors/config.pbtxt:2: field 'max_batch_size'" in out, out
    assert "two_errors/config.pbtxt:" in out and "field 'input[0].dims'" in out, out
    assert "output 'OUTPUT1' has dims [1]" in out and "dims should be [16]" in out, out
    assert "6 model(s) checked, 5 invalid" in out, out

    # One model's directory, and one model by name.
    assert run("check", os.path.join(repo, "good"))[0] == 0
    rc, out, _ = run("check", repo, "zero_dim")
    assert rc == 1 and "1 model(s) checked, 1 invalid" in out, out
    # Usage errors are exit status 2.
    assert run("check", "--model-repository=" + os.path.join(repo, "nope"))[0] == 2
    assert run("frobnicate")[0] == 2


def test_platforms_follow_what_the_backends_declare(repository, tmp_path):
    """The server has no platform table: a platform goes to the backend named before its first '_',
    which must declare it; a written backend and platform must pair; a lone file names its backend."""
    repo = str(tmp_path)
    onnx = simple_onnx(repository)
    add_model(repo, "by_platform", 'name: "by_platform"\nplatform: "onnxruntime_onnx"\n'
              "max_batch_size: 8\n" + IO, onnx)
    add_model(repo, "mismatch", 'name: "mismatch"\nmax_batch_size: 8\nbackend: "onnxruntime"\n'
              'platform: "pytorch_libtorch"\n' + IO, onnx)
    add_model(repo, "not_installed", 'name: "not_installed"\nplatform: "tensorrt_plan"\n', onnx)
    add_model(repo, "undeclared", 'name: "undeclared"\nplatform: "onnxruntime_tf"\n', onnx)
    add_model(repo, "lone_file", None, onnx)
    rc, out, err = run("check", repo)
    assert rc == 1, out + err
    assert re.search(r"^ok\s+by_platform ", out, re.M), out
    assert re.search(r"^ok\s+lone_file ", out, re.M), out
    assert ("mismatch/config.pbtxt:4: field 'platform': platform 'pytorch_libtorch' does not go "
            "with backend 'onnxruntime' (it serves onnxruntime_onnx)") in out, out
    assert "unknown platform 'tensorrt_plan': backend 'tensorrt' is not available" in out, out
    assert "unknown platform 'onnxruntime_tf': backend 'onnxruntime' serves onnxruntime_onnx" in out
    assert "5 model(s) checked, 3 invalid" in out, out


def test_strict_config_needs_everything_written(repository, tmp_path):
    repo = str(tmp_path)
    add_model(repo, "bare", None, simple_onnx(repository))
    assert run("check", repo)[0] == 0  # auto-complete fills the config from the graph
    rc, out, _ = run("check", "--strict-model-config=true", repo)
    assert rc == 1 and "auto-complete is off" in out, out


def test_generate_prints_a_config_that_checks(repository, tmp_path):
    repo = str(tmp_path)
    d = add_model(repo, "auto", None, simple_onnx(repository))
    rc, out, err = run("generate", d)
    assert rc == 0, err
    assert 'name: "auto"' in out and 'name: "INPUT0"' in out and "max_batch_size: 4" in out, out
    with open(os.path.join(d, "config.pbtxt"), "w") as f:
        f.write(out)
    rc, out, err = run("check", "--strict-model-config=true", repo)
    assert rc == 0, out + err
    # An invalid model: the errors on stderr, status 1.
    with open(os.path.join(d, "config.pbtxt"), "w") as f:
        f.write('name: "auto"\nmax_batch_size: -3\n')
    rc, out, err = run("generate", d)
    assert rc == 1 and out == "" and "max_batch_size" in err


def test_configs_in_the_docs_are_valid(repository, tmp_path):
    """Every complete config (a ```pbtxt block with a name) in README.md and docs/ checks clean
    against the example ONNX model it describes."""
    blocks = []
    for path in [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md")):
        with open(path) as f:
            blocks += re.findall(r"```pbtxt\n(.*?)```", f.read(), re.S)
    configs = [b for b in blocks if re.search(r'^name: "', b, re.M)]
    assert configs, "docs have no complete config examples"
    repo = str(tmp_path)
    for text in configs:
        name = re.search(r'^name: "([^"]+)"', text, re.M).group(1)
        add_model(repo, name, text, simple_onnx(repository))
    rc, out, err = run("check", repo)
    assert rc == 0, out + err
