"""Runs Triton's own model-configuration QA cases through `nereid config check`, from a checkout of
triton-inference-server/server outside this tree (nothing of it is copied here):

    git clone --depth 1 https://github.com/triton-inference-server/server /tmp/triton-server
    .venv/bin/python scripts/triton_qa_configs.py /tmp/triton-server

Invalid cases (qa/L0_model_config/noautofill_platform, model_metrics/invalid_config, special_cases,
and the ONNX auto-complete failures, each with small ONNX models written here like those Triton's
QA generates) must be refused; every other config.pbtxt under qa/ and docs/ (valid for Triton) must
raise no validation error ("field '...'" messages) other than what Nereid cannot serve yet
(KIND_GPU, decoupled, sequence controls/state, batch inputs/outputs). Prints a summary; exit 1 on a
mismatch."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("NEREID_BINARY", os.path.join(ROOT, "build", "nereid"))
NOT_YET = ("not supported yet", "not available in this build")


def add_sub_model(path, batch):
    """INT32 INPUT0/INPUT1 [-1?,16] -> INT8 OUTPUT0 = sum, OUTPUT1 = difference."""
    dims = (["batch"] if batch else []) + [16]
    nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["s"]),
             helper.make_node("Sub", ["INPUT0", "INPUT1"], ["d"]),
             helper.make_node("Cast", ["s"], ["OUTPUT0"], to=TensorProto.INT8),
             helper.make_node("Cast", ["d"], ["OUTPUT1"], to=TensorProto.INT8)]
    graph = helper.make_graph(
        nodes, "add_sub", [helper.make_tensor_value_info(n, TensorProto.INT32, dims) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, TensorProto.INT8, dims) for n in ("OUTPUT0", "OUTPUT1")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def check(repo, *flags):
    p = subprocess.run([BINARY, "config", "check", *flags, repo], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def stage(tmp, name, config_text, model=None):
    repo = os.path.join(tmp, "repo")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(os.path.join(repo, name))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config_text)
    if model:
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(model, os.path.join(repo, name, "1", "model.onnx"))
    return repo


def main():
    triton = sys.argv[1]
    qa = os.path.join(triton, "qa", "L0_model_config")
    tmp = tempfile.mkdtemp()
    batch_model, nobatch_model = os.path.join(tmp, "b.onnx"), os.path.join(tmp, "n.onnx")
    add_sub_model(batch_model, True)
    add_sub_model(nobatch_model, False)
    mismatches = []
    refused = 0
    invalid = []
    for d in sorted(os.listdir(os.path.join(qa, "noautofill_platform"))):
        with open(os.path.join(qa, "noautofill_platform", d, "config.pbtxt")) as f:
            text = re.sub(r"^platform:.*$", "", f.read(), flags=re.M) + '\nplatform: "onnxruntime_onnx"\n'
        invalid.append((f"noautofill_platform/{d}", d, text, None, ["--strict-model-config=true"]))
    for sub in ("model_metrics/invalid_config", "special_cases"):
        for d in sorted(os.listdir(os.path.join(qa, sub))):
            path = os.path.join(qa, sub, d, "config.pbtxt")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                text = re.sub(r'^name:.*$', f'name: "{d}"', f.read(), flags=re.M)
            invalid.append((f"{sub}/{d}", d, text, batch_model, []))
    onnx_dir = os.path.join(qa, "autofill_noplatform", "onnx")
    for d in sorted(os.listdir(onnx_dir)):
        with open(os.path.join(onnx_dir, d, "config.pbtxt")) as f:
            text = f.read()
        invalid.append((f"autofill_noplatform/onnx/{d}", d, text,
                        nobatch_model if d == "bad_max_batch_size" else batch_model, []))
    for label, name, text, model, flags in invalid:
        rc, out = check(stage(tmp, name, text, model), *flags)
        if rc == 1:
            refused += 1
            first = next((l.strip() for l in out.splitlines() if l.startswith("  ")), "")
            print(f"refused  {label}: {first[:200]}")
        else:
            mismatches.append(f"accepted invalid {label}")
            print(f"ACCEPTED {label}")

    valid = false_rejections = 0
    for base, _, files in os.walk(triton):
        if "config.pbtxt" not in files or not re.search(r"/(qa|docs)/", base + "/"):
            continue
        if re.search(r"noautofill_platform|autofill_noplatform/|invalid_config|special_cases", base):
            continue
        with open(os.path.join(base, "config.pbtxt"), errors="replace") as f:
            text = f.read()
        m = re.search(r'^name:\s*"([^"]+)"', text, re.M)
        name = m.group(1) if m else os.path.basename(base)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            continue
        _, out = check(stage(tmp, name, text))
        valid += 1
        errors = [l.strip() for l in out.splitlines() if "field '" in l and not any(n in l for n in NOT_YET)]
        if errors:
            false_rejections += 1
            mismatches.append(f"validation error on a valid config {os.path.relpath(base, triton)}: {errors[0]}")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\ninvalid cases refused: {refused}/{len(invalid)}")
    print(f"valid configs without a validation error: {valid - false_rejections}/{valid}")
    for m in mismatches:
        print("MISMATCH", m)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
