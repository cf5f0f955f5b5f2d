"""The Helm chart (deploy/helm/dra-solver) renders, with the real helm, the same objects as the
kustomize manifests: deploy/base for the default values, deploy/components/cert-manager and
deploy/monitoring when those are turned on; its values change exactly what they name. The
server-side dry run of its output is in test_dry_run.py."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.deploy import realhelm, realkubectl
from tests.deploy.manifests import ROOT


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _same_objects(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[str]:
    mine, other = {_key(o): o for o in ours}, {_key(o): o for o in theirs}
    assert len(mine) == len(ours) and len(other) == len(theirs), "one object per kind/namespace/name"
    problems = [f"only in the chart: {k}" for k in sorted(set(mine) - set(other))]
    problems += [f"only in kustomize: {k}" for k in sorted(set(other) - set(mine))]
    for k in sorted(set(mine) & set(other)):
        if mine[k] != other[k]:
            problems.append(f"{k} differs:\nchart: {json.dumps(mine[k], sort_keys=True)}\n"
                            f"kustomize: {json.dumps(other[k], sort_keys=True)}")
    return problems


def test_default_values_render_the_kustomize_base() -> None:
    assert _same_objects(realhelm.objects(), realkubectl.objects("deploy/base")) == []


def test_cert_manager_values_render_the_component() -> None:
    chart = realhelm.objects("--set", "tls.certManager.enabled=true")
    assert _same_objects(chart, realkubectl.objects("deploy/components/cert-manager")) == []


def test_monitoring_values_render_deploy_monitoring() -> None:
    base = {_key(o) for o in realhelm.objects()}
    chart = [o for o in realhelm.objects("--set", "monitoring.enabled=true") if _key(o) not in base]
    assert _same_objects(chart, realkubectl.objects("deploy/monitoring")) == []


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _args(obj: dict[str, Any]) -> list[str]:
    args: list[str] = obj["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_values_change_what_they_name() -> None:
    objects = realhelm.objects(
        "--set", "image.repository=registry.example.com/dra-solver", "--set", "image.tag=9.9.9",
        "--set", "image.pullPolicy=Always", "--set", "solver.replicas=3", "--set", "controllers.replicas=1",
        "--set", "tls.secretName=my-tls", "--set", "policy=spread", "--set", "logFormat=json",
        "--set", "namespace.name=gpu-scheduling",
    )
    solver = _find(objects, "Deployment", "dra-solver")
    controllers = _find(objects, "Deployment", "dra-solver-controllers")
    plugin = _find(objects, "DaemonSet", "dra-solver-kubelet-plugin")
    for workload in (solver, controllers, plugin):
        container = workload["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == "registry.example.com/dra-solver:9.9.9"
        assert container["imagePullPolicy"] == "Always"
        assert "--log-format=json" in _args(workload)
    assert solver["spec"]["replicas"] == 3 and controllers["spec"]["replicas"] == 1
    assert "--policy=spread" in _args(controllers)
    assert "--solver=dra-solver.gpu-scheduling.svc:50051" in _args(controllers)
    secrets = {v["secret"]["secretName"] for w in (solver, controllers)
               for v in w["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    assert secrets == {"my-tls"}
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"gpu-scheduling"}
    assert _find(objects, "Namespace", "gpu-scheduling")
    binding = _find(objects, "ClusterRoleBinding", "dra-solver:solver")
    assert binding["subjects"][0]["namespace"] == "gpu-scheduling"


def test_solver_python_cpu_and_resources() -> None:
    # A replica with two CPUs of its own (Guaranteed, whole CPUs), its Python threads on one.
    objects = realhelm.objects(
        "--set", "solver.pythonCpu=auto", "--set-string", "solver.resources.requests.cpu=2", "--set-string", "solver.resources.limits.cpu=2",
        "--set", "solver.resources.requests.memory=1Gi", "--set", "solver.resources.limits.memory=1Gi",
    )
    solver = _find(objects, "Deployment", "dra-solver")
    assert "--python-cpu=auto" in _args(solver)
    assert solver["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    assert "--python-cpu=3" in _args(_find(realhelm.objects("--set", "solver.pythonCpu=3"), "Deployment", "dra-solver"))
    assert not [a for a in _args(_find(realhelm.objects(), "Deployment", "dra-solver")) if a.startswith("--python-cpu")]


def test_existing_namespace_and_custom_devices() -> None:
    objects = realhelm.objects("--set", "namespace.create=false", "--set-string", "kubeletPlugin.devices=gpus: {count: 2}\n")
    assert not [o for o in objects if o["kind"] == "Namespace"]
    config = _find(objects, "ConfigMap", "dra-solver-simulated-devices")
    assert config["data"]["devices.yaml"] == "gpus: {count: 2}\n"


def test_bad_values_are_refused() -> None:
    with pytest.raises(AssertionError, match="logFormat: Unsupported value"):
        realhelm.render("--set", "logFormat=xml")
    with pytest.raises(AssertionError, match=r'solver\.pythonCpu: Unsupported value: "fast"'):
        realhelm.render("--set", "solver.pythonCpu=fast")


def test_the_chart_copies_match_their_sources() -> None:
    """The chart cannot read files outside itself: its copies of deploy/monitoring stay equal
    (a drift would also show in the rendering tests above; this names the file)."""
    copies = realhelm.CHART / "files" / "monitoring"
    for copy in sorted(copies.iterdir()):
        assert copy.read_text() == (ROOT / "deploy" / "monitoring" / copy.name).read_text(), copy.name


def test_helm_lint() -> None:
    done = subprocess.run([realhelm.helm(), "lint", "--strict", str(realhelm.CHART)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_helm_is_the_pinned_release() -> None:
    """The helm the tests render with reports the version tools/helm/go.mod pins (the build
    stamps it, as helm's own release builds do; the source alone says only vX.Y)."""
    pinned = next(line.split()[1] for line in (ROOT / "tools" / "helm" / "go.mod").read_text().splitlines()
                  if line.split()[:1] == ["helm.sh/helm/v4"])
    done = subprocess.run([realhelm.helm(), "version", "--template", "{{.Version}}"], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == pinned
