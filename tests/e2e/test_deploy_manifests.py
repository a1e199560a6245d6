"""deploy/: the Kubernetes manifests validate against the Kubernetes API's schemas (the
`kubernetes-validate` package, offline, strict: unknown fields fail), the custom resources (KServe,
KEDA) carry what their controllers need, every container's arguments are accepted by the real
binary's option parser, and the pieces agree with each other (ports, probes, grace periods)."""
import copy
import glob
import os
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from conftest import BINARY, ROOT

FILES = sorted(glob.glob(os.path.join(ROOT, "deploy", "kubernetes", "*.yaml")) +
               glob.glob(os.path.join(ROOT, "deploy", "kserve", "*.yaml")))
DOCS = [(os.path.relpath(f, ROOT), d) for f in FILES for d in yaml.safe_load_all(open(f)) if d]
BUILT_IN = [(f, d) for f, d in DOCS if "." not in d["apiVersion"].split("/")[0]
            or d["apiVersion"].split("/")[0].endswith(".k8s.io")]
KUBERNETES = ["1.27.0", "1.30.0", kubernetes_validate.utils.latest_version()]


def of_kind(kind):
    return [d for _, d in DOCS if d["kind"] == kind]


def test_every_kind_is_known():
    kinds = sorted({d["kind"] for _, d in DOCS})
    assert kinds == sorted(["ServiceAccount", "PersistentVolumeClaim", "Service", "Deployment",
                            "PodDisruptionBudget", "HorizontalPodAutoscaler", "ScaledObject",
                            "ClusterServingRuntime", "InferenceService"]), kinds


@pytest.mark.parametrize("version", KUBERNETES)
def test_built_in_kinds_validate_strictly(version):
    assert len(BUILT_IN) == 6
    for name, doc in BUILT_IN:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name}: {doc['kind']}: {e.message} at {list(e.path)}")
    # The validation is real: a misspelt field and a wrong type both fail.
    deployment = of_kind("Deployment")[0]
    for break_it in (lambda d: d["spec"].update(replica=2),
                     lambda d: d["spec"]["template"]["spec"]["containers"][0].update(ports="8000")):
        bad = copy.deepcopy(deployment)
        break_it(bad)
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, version, strict=True)


def container_args():
    """Every container's arguments as the server would get them."""
    out = [("Deployment", c["args"]) for d in of_kind("Deployment")
           for c in d["spec"]["template"]["spec"]["containers"]]
    for runtime in of_kind("ClusterServingRuntime"):
        args = runtime["spec"]["containers"][0]["args"]
        out.append(("ClusterServingRuntime", args))
        for isvc in of_kind("InferenceService"):  # KServe appends the model's args
            out.append(("InferenceService", args + isvc["spec"]["predictor"]["model"].get("args", [])))
    return out


def test_the_binary_accepts_every_container_argument():
    for where, args in container_args():
        # The parser reads every argument before --help takes effect: an unknown one fails.
        out = subprocess.run([BINARY, *args, "--help"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"{where}: {args}: {out.stderr}"
        assert args[0] == "serve"


def flag(args, name):
    return next(int(a.split("=", 1)[1]) for a in args if a.startswith(f"--{name}="))


def test_deployment_pieces_agree():
    deployment = of_kind("Deployment")[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    # The kubelet's SIGKILL comes after the drain grace and the exit timeout.
    assert pod["terminationGracePeriodSeconds"] > flag(args, "drain-grace-secs") + flag(args, "exit-timeout-secs")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": flag(args, "http-port"), "grpc": flag(args, "grpc-port"),
                     "metrics": flag(args, "metrics-port")}
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ports
    # Non-root, nothing writable but scratch space, no capabilities, the models read-only.
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True
    assert "--model-repository=/models" in args
    service = of_kind("Service")[0]
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    hpa = of_kind("HorizontalPodAutoscaler")[0]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]


def test_custom_resources_carry_what_their_controllers_need():
    runtime = of_kind("ClusterServingRuntime")[0]
    spec = runtime["spec"]
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    assert {f["name"] for f in spec["supportedModelFormats"]} == {"triton", "onnx", "pytorch"}
    args = spec["containers"][0]["args"]
    assert spec["containers"][0]["name"] == "kserve-container"
    assert "--model-store=/mnt/models" in args  # where KServe's storage initializer puts models
    assert flag(args, "http-port") == 8080 and flag(args, "grpc-port") == 9000
    for isvc in of_kind("InferenceService"):
        assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
        assert isvc["spec"]["predictor"]["model"]["runtime"] == runtime["metadata"]["name"]
    scaled = of_kind("ScaledObject")[0]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == of_kind("Deployment")[0]["metadata"]["name"]
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
    query = trigger["metadata"]["query"]
    assert "nv_inference_queue_duration_us" in query and "nv_inference_request_success" in query


HELM = next((h for h in (os.path.join(ROOT, ".venv", "bin", "helm"), shutil.which("helm"))
             if h and os.path.exists(h)), None)
CHART = os.path.join(ROOT, "deploy", "helm", "nereid")


def helm(*args, check=True):
    assert HELM, "helm is missing: scripts/install-deps.sh installs it (helm-binary)"
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60, check=check)


def render(*sets):
    flags = [f for s in sets for f in ("--set", s)]
    return [d for d in yaml.safe_load_all(helm("template", "nereid", CHART, *flags).stdout) if d]


def test_the_chart_lints_and_refuses_a_bad_mode():
    assert helm("lint", CHART).returncode == 0
    bad = helm("template", "nereid", CHART, "--set", "autoscaling.mode=sometimes", check=False)
    assert bad.returncode != 0 and "autoscaling.mode must be hpa, keda or none" in bad.stderr


def test_the_plain_manifests_are_the_chart_rendered():
    # deploy/render.sh wrote them; the chart is the one source.
    for name, sets, only in (("nereid.yaml", (), ()),
                             ("keda-scaledobject.yaml", ("--set", "autoscaling.mode=keda"),
                              ("--show-only", "templates/autoscaling.yaml"))):
        fresh = helm("template", "nereid", CHART, *sets, *only).stdout
        text = open(os.path.join(ROOT, "deploy", "kubernetes", name)).read()
        body = "".join(line for line in text.splitlines(keepends=True) if not
                       (line.startswith("#") and text.index(line) < text.index("---")))
        assert body == fresh, f"deploy/kubernetes/{name} is stale: run deploy/render.sh"


@pytest.mark.parametrize("sets", [
    (),
    ("gpus=1", "preStopSleepSecs=5", "autoscaling.mode=keda", "extraArgs={--model-control-mode=explicit}"),
    ("models.existingClaim=shared-models", "autoscaling.mode=none", "drainGraceSecs=0"),
])
def test_every_rendering_validates(sets):
    docs = render(*sets)
    kinds = [d["kind"] for d in docs]
    for doc in docs:
        if "." not in doc["apiVersion"].split("/")[0]:
            kubernetes_validate.validate(doc, KUBERNETES[-1], strict=True)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    out = subprocess.run([BINARY, *args, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"{args}: {out.stderr}"
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    assert pod["terminationGracePeriodSeconds"] > (
        pre_stop + flag(args, "drain-grace-secs") + flag(args, "exit-timeout-secs"))
    if "gpus=1" in sets:
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert pre_stop == 5 and "ScaledObject" in kinds and "HorizontalPodAutoscaler" not in kinds
        assert "--model-control-mode=explicit" in args
    if "autoscaling.mode=none" in sets:
        assert "PersistentVolumeClaim" not in kinds
        assert not {"ScaledObject", "HorizontalPodAutoscaler"} & set(kinds)
        claim = next(v for v in pod["volumes"] if v["name"] == "models")["persistentVolumeClaim"]
        assert claim["claimName"] == "shared-models"
