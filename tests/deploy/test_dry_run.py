"""Every manifest in deploy/ passes ``kubectl apply --dry-run=server`` on the real API server.

Each kustomization (both overlays, deploy/base, deploy/examples, deploy/monitoring, and each
component in deploy/components on top of deploy/base) is rendered with upstream's
``kubectl kustomize`` and sent to kube-apiserver v1.37.2 as a server-side dry run with strict
field validation: defaulting, validation, admission (ValidatingAdmissionPolicy CEL included)
and unknown or duplicate fields are the server's verdict, not ours. The Helm chart's output
(deploy/helm/dra-solver, rendered by the real helm) goes through the same dry run.
deploy/monitoring needs prometheus-operator's CRDs and the cert-manager component
cert-manager's: tests/deploy/operator_crds.py generates CRDs of our own for them (what they
check and do not check is said there).
"""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver.service.localcluster.controlplane import ControlPlane
from tests.deploy import operator_crds, realhelm, realkubectl
from tests.deploy.manifests import KUSTOMIZATIONS
from tests.realkube import KubeCluster

TARGETS = KUSTOMIZATIONS  # components render as deploy/base plus the component
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def dry_run(cluster: KubeCluster, objects: list[dict[str, Any]]) -> str:
    done = cluster.cp.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                              input=realkubectl.to_yaml(objects), check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _install_crds(cluster: KubeCluster) -> list[str]:
    names = []
    for crd in operator_crds.crds():
        cluster.create(CRD_PATH, crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + 60
    for name in names:
        while not any(c["type"] == "Established" and c["status"] == "True"
                      for c in cluster.get(f"{CRD_PATH}/{name}").get("status", {}).get("conditions", [])):
            assert time.monotonic() < deadline, f"{name} not established"
            time.sleep(0.1)
    return names


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[KubeCluster]:
    """The shared control plane, wiped, with the operator CRDs and every namespace deploy/ uses.

    The Namespace objects are dry-run first, while they do not exist (the create path), then
    created, since the server refuses objects in a namespace that does not exist. One set-up
    for all directories: deleting namespaces takes seconds each.
    """
    cluster = KubeCluster(control_plane)
    cluster.wipe()
    crds = _install_crds(cluster)
    try:
        everything = [o for d in TARGETS for o in realkubectl.objects(d)]
        namespaces = {o["metadata"]["name"]: o for o in everything if o["kind"] == "Namespace"}
        dry_run(cluster, list(namespaces.values()))
        wanted = set(namespaces) | {o["metadata"]["namespace"] for o in everything if "namespace" in o["metadata"]}
        for ns in sorted(wanted - {"default"}):
            cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        yield cluster
    finally:
        for name in crds:
            try:
                cluster.request("DELETE", f"{CRD_PATH}/{name}")
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise
        cluster.wipe()


@pytest.mark.parametrize("directory", TARGETS)
def test_server_accepts_every_object(directory: str, cluster: KubeCluster) -> None:
    objects = realkubectl.objects(directory)
    assert objects
    out = dry_run(cluster, objects)
    # One line per object, each "(server dry run)": nothing skipped, nothing applied for real.
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(objects), out
    assert all(line.endswith("(server dry run)") for line in lines), out


HELM_VALUES = {
    "defaults": (),
    "everything-on": ("--set", "monitoring.enabled=true", "--set", "tls.certManager.enabled=true",
                      "--set", "logFormat=json", "--set", "policy=spread", "--set", "solver.replicas=3"),
}


@pytest.mark.parametrize("values", sorted(HELM_VALUES))
def test_server_accepts_the_helm_chart(values: str, cluster: KubeCluster) -> None:
    """deploy/helm/dra-solver as the real helm renders it (tests/deploy/test_helm.py)."""
    objects = realhelm.objects(*HELM_VALUES[values])
    out = dry_run(cluster, objects)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(objects), out
    assert all(line.endswith("(server dry run)") for line in lines), out


def test_dry_run_catches_what_the_server_refuses(cluster: KubeCluster) -> None:
    # The check can fail: an unknown field and an invalid value are refused by the server.
    bad = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x", "namespace": "default"},
           "automountServiceAccountTokn": True}
    done = cluster.cp.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                                   input=realkubectl.to_yaml([bad]), check=False)
    assert done.returncode != 0
    assert 'unknown field "automountServiceAccountTokn"' in done.stderr
    invalid = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "Bad_Name"}}
    done = cluster.cp.kubectl("apply", "--dry-run=server", "-f", "-",
                                   input=realkubectl.to_yaml([invalid]), check=False)
    assert done.returncode != 0
    assert "metadata.name: Invalid value" in done.stderr
