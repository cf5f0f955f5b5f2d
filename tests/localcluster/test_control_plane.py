"""The control plane the suite, ``kube-up`` and ``local-cluster`` start is the one issue 12 asks for.

It serves resource.k8s.io/v1 with DeviceTaintRule and the scheduling.k8s.io PodGroup API with
its feature gates on (a gated-off field is dropped silently by the API server, so the tests send
gated fields and look for them in the answer), and every binary reports the version pinned in
tools/upstream-versions.env. Objects are created with ``dryRun=All``: nothing is stored, nothing
needs cleaning up.
"""

from __future__ import annotations

import json
import subprocess

from dra_solver.service.localcluster.controlplane import ControlPlane
from tests.localcluster.test_pins import PINS_FILE, read_pins

DRY_RUN = "?dryRun=All"


def resources(cp: ControlPlane, group_version: str) -> set[str]:
    return {r["name"] for r in cp.request("GET", f"/apis/{group_version}")["resources"]}


def test_dra_apis_are_served_with_device_taint_rules(control_plane: ControlPlane) -> None:
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices",
            "devicetaintrules", "resourceclaims/status"} <= resources(control_plane, "resource.k8s.io/v1")
    rule = control_plane.request("POST", f"/apis/resource.k8s.io/v1/devicetaintrules{DRY_RUN}", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "served"},
        "spec": {"deviceSelector": {"driver": "gpu.example.com", "pool": "node-1"},
                 "taint": {"key": "example.com/broken", "value": "yes", "effect": "NoExecute"}},
    })
    assert rule["spec"]["taint"]["effect"] == "NoExecute"
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.example.com", "pool": "node-1"}


def test_pod_group_api_is_served_with_its_gates(control_plane: ControlPlane) -> None:
    assert {"podgroups", "workloads"} <= resources(control_plane, "scheduling.k8s.io/v1beta1")
    group = control_plane.request("POST", f"/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups{DRY_RUN}", {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "trainers"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                 # DRAWorkloadResourceClaims: dropped when the gate is off.
                 "resourceClaims": [{"name": "gpus", "resourceClaimName": "shared-gpus"}]},
    })
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert group["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimName": "shared-gpus"}]
    # GenericWorkload: a pod names its group (dropped when the gate is off).
    pod = control_plane.request("POST", f"/api/v1/namespaces/default/pods{DRY_RUN}", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0"},
        "spec": {"schedulingGroup": {"podGroupName": "trainers"},
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    })
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "trainers"}


def test_binaries_report_their_pinned_versions(control_plane: ControlPlane) -> None:
    """scripts/build-upstream.sh stamps the pinned version in, as a release build does (without
    it a module build reports v0.0.0-master+$Format:%H$)."""
    pins = read_pins(PINS_FILE.read_text())
    kubernetes = pins["KUBERNETES_VERSION"]
    major, minor = kubernetes.removeprefix("v").split(".")[:2]
    server = control_plane.request("GET", "/version")
    assert (server["gitVersion"], server["major"], server["minor"]) == (kubernetes, major, minor)
    client = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert client["clientVersion"]["gitVersion"] == kubernetes
    assert client["serverVersion"]["gitVersion"] == kubernetes
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        out = subprocess.run([str(control_plane.bins.path(name)), "--version"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
        assert out.strip() == f"Kubernetes {kubernetes}", name
    etcd = subprocess.run([str(control_plane.bins.path("etcd")), "--version"], capture_output=True,
                          text=True, timeout=30, check=True).stdout
    assert f"etcd Version: {pins['ETCD_VERSION'].removeprefix('v')}\n" in etcd
