"""RBAC as shipped, on the real API server: each component under its own ServiceAccount.

deploy/overlays/production is rendered with upstream's ``kubectl kustomize``; its Namespace,
ServiceAccounts, Roles, ClusterRoles, bindings and admission policies are applied to a real
kube-apiserver (with an audit log), and the solver service, the controllers and a kubelet
plugin run under their own ServiceAccount's token, with the flags their Deployment and
DaemonSet give them. A workload goes through everything they do in a cluster: a pod with a
claim template is scheduled by dra-solver (claim created, allocated, reserved, pod bound), the
plugin prepares and unprepares the claim as the kubelet asks (reporting its NIC in the claim's
status), the device turns unhealthy so the plugin taints it and the eviction controller evicts
the pod, the claim is deallocated and deleted once the pod is gone, and a DeviceTaintRule gets
its status.

A verb missing from deploy/ fails the workload, and the audit log names the refused request.
A verb granted but never used fails too, unless ``ALLOWED_UNUSED`` says why it is needed anyway
(documented in docs/deploying.md, "RBAC").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.service.localcluster.cluster import create_node, node_object
from dra_solver.service.localcluster.controlplane import ControlPlane, ControlPlaneError, binaries
from tests.deploy import rbac, realkubectl
from tests.deploy.apicalls import ApiCall
from tests.deploy.manifests import OVERLAYS, ROOT
from tests.kubeletplugin.helpers import Kubelet

OVERLAY = "deploy/overlays/production"
NS = rbac.NAMESPACE
NODE = "node-1"
WORKLOAD_NS = "rbac-workload"
RES = "/apis/resource.k8s.io/v1"
APPLIED_KINDS = rbac.RBAC_KINDS | {"Namespace", "DeviceClass", "ConfigMap",
                                   "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
TIMEOUT = 60.0

ALLOWED_UNUSED: dict[str, dict[ApiCall, str]] = {
    "controllers": {
        ApiCall("resource.k8s.io", "resourceclaims/binding", "update"):
            "not a request: checked by the API server inside every status update that changes "
            "allocation or reservedFor (the workload fails without it)",
        ApiCall("resource.k8s.io", "resourceclaims", "get"):
            "re-reads a claim after a write conflict and while rolling back a failed scheduling "
            "attempt: error paths a healthy run does not take",
        ApiCall("scheduling.k8s.io", "podgroups", "get"):
            "asks whether a PodGroup a claim is reserved for still exists only when the watch "
            "has not shown it yet and its deletion was not seen (a start-up race)",
    },
    "solver": {},
    "kubelet-plugin": {
        ApiCall("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"):
            "not a request: checked by the API server inside the status patch that reports the "
            "prepared NIC in status.devices (the workload fails without it)",
    },
}
"""Grants the workload does not exercise, with the reason each is needed all the same."""


# -- the processes ----------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                          start_new_session=True)
        return self

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, needle: str, timeout: float = TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.text().splitlines():
                if needle in line:
                    return line
            assert self.popen is not None
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}):\n{self.tail()}")
            time.sleep(0.1)
        raise AssertionError(f"{self.name} printed no {needle!r} in {timeout:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)


def dra_solver(*args: str) -> list[str]:
    return [sys.executable, "-m", "dra_solver.cli", *args]


def container_args(objects: list[dict[str, Any]], kind: str, name: str, env: dict[str, str]) -> list[str]:
    """The dra-solver container's args in the rendered workload, $(VAR)s filled in."""
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    containers = obj["spec"]["template"]["spec"]["containers"]
    args: list[str] = next(c for c in containers if c.get("args"))["args"]
    out = []
    for arg in args:
        for var, value in env.items():
            arg = arg.replace(f"$({var})", value)
        out.append(arg)
    return out


def without(args: list[str], *flags: str) -> list[str]:
    """``args`` less the named flags (``--flag=value`` or ``--flag``)."""
    return [a for a in args if a.split("=", 1)[0] not in flags]


# -- the cluster --------------------------------------------------------------------------------


def wait(what: str, check: Callable[[], Any], timeout: float = TIMEOUT, *, procs: Sequence[Proc] = ()) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    logs = "\n".join(f"--- {p.name}:\n{p.tail()}" for p in procs)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")


def get(cp: ControlPlane, path: str) -> Any:
    try:
        return cp.request("GET", path)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


@pytest.fixture(scope="module")
def audited_cp() -> Iterator[ControlPlane]:
    try:
        cp = ControlPlane(binaries(), audit_log=True)
        cp.start()
    except ControlPlaneError as err:
        pytest.fail(f"the real control plane did not start: {err}", pytrace=False)
    yield cp
    cp.stop()


@dataclass
class Run:
    """What the workload left behind: the audit log and the manifests it ran under."""

    events: list[dict[str, Any]]
    objects: list[dict[str, Any]]
    kubeconfigs: dict[str, Path]


@pytest.fixture(scope="module")
def workload(audited_cp: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Run]:
    cp = audited_cp
    objects = realkubectl.objects(OVERLAY)
    applied = [o for o in objects if o["kind"] in APPLIED_KINDS]
    cp.kubectl("apply", "--server-side", "-f", "-", input=realkubectl.to_yaml(applied))
    create_node(cp, node_object(NODE))

    # The plugin's token is bound to a pod on its node, as the kubelet's projected tokens are:
    # the production overlay's admission policy reads the node name from it.
    plugin_pod = cp.request("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "dra-solver-kubelet-plugin-rbac-test", "namespace": NS},
        "spec": {"nodeName": NODE, "serviceAccountName": "dra-solver-kubelet-plugin",
                 "containers": [{"name": "plugin", "image": "dra-solver:dev"}]},
    })
    kubeconfigs = {
        c.name: cp.service_account_kubeconfig(
            NS, c.service_account, bound_pod=plugin_pod if c.name == "kubelet-plugin" else None)
        for c in rbac.COMPONENTS
    }
    # Short enough for the unix socket paths the plugin creates.
    work = Path(tempfile.mkdtemp(prefix="rbac-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    devices_cm = next(o for o in objects if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"] == "dra-solver-simulated-devices")
    devices = yaml.safe_load(devices_cm["data"]["devices.yaml"])
    health_file = work / "health.yaml"
    health_file.write_text("{}\n")
    devices["health"] = {**devices.get("health", {}), "file": str(health_file), "pollSeconds": 0.2}
    (work / "devices.yaml").write_text(yaml.safe_dump(devices))

    procs: list[Proc] = []
    try:
        solver = Proc("solver", dra_solver("serve", f"--kubeconfig={kubeconfigs['solver']}",
                                           "--port=0", "--metrics-port=0"), work / "solver.log").start()
        procs.append(solver)
        grpc_addr = solver.wait_for("grpc=").split()[0].split("=", 1)[1]

        plugin_args = container_args(objects, "DaemonSet", "dra-solver-kubelet-plugin", {"NODE_NAME": NODE})
        plugin_dir = work / "plugin"
        plugin = Proc("kubelet-plugin", dra_solver(
            *without(plugin_args, "--config", "--plugin-dir", "--registry-dir", "--cdi-dir", "--checkpoint-dir"),
            f"--config={work / 'devices.yaml'}", f"--plugin-dir={plugin_dir}",
            f"--registry-dir={work / 'registry'}", f"--cdi-dir={work / 'cdi'}",
        ), work / "kubelet-plugin.log", env={"KUBECONFIG": str(kubeconfigs["kubelet-plugin"])})
        procs.append(plugin.start())

        ctl_args = container_args(objects, "Deployment", "dra-solver-controllers",
                                  {"POD_NAMESPACE": NS, "POD_NAME": "controllers-rbac-test"})
        controllers = Proc("controllers", dra_solver(
            *without(ctl_args, "--in-cluster", "--kubeconfig", "--solver", "--solver-ca", "--solver-cert",
                     "--solver-key", "--solver-server-name", "--metrics-port", "--metrics-address"),
            f"--kubeconfig={kubeconfigs['controllers']}", f"--solver={grpc_addr}", "--metrics-port=0",
        ), work / "controllers.log").start()
        procs.append(controllers)
        controllers.wait_for("metrics=")
        wait("the plugin's ResourceSlices", lambda: [
            s for s in cp.request("GET", f"{RES}/resourceslices")["items"] if s["spec"].get("nodeName") == NODE
        ], procs=procs)

        _drive(cp, plugin_dir, health_file, procs)

        # The operator shrinks the node's devices and restarts the plugin (what the ConfigMap's
        # comment says to do): the slices no longer needed are deleted.
        def node_slices() -> list[Any]:
            return [s for s in cp.request("GET", f"{RES}/resourceslices")["items"] if s["spec"].get("nodeName") == NODE]

        before = len(node_slices())
        plugin.stop()
        (work / "devices.yaml").write_text(yaml.safe_dump({"gpus": {"count": 1}}))
        procs.append(Proc(plugin.name, plugin.args, plugin.log, plugin.env).start())
        wait("the plugin's extra ResourceSlices deleted", lambda: len(node_slices()) == 1, procs=procs)
        assert before > 1
        # Leader election renews its Lease every retry period: wait for a renewal.
        controllers_user = next(c.username for c in rbac.COMPONENTS if c.name == "controllers")
        wait("the controllers' Lease renewed", lambda: ApiCall("coordination.k8s.io", "leases", "update")
             in rbac.used(cp.audit_events(), controllers_user), procs=procs)
    finally:
        for proc in reversed(procs):
            proc.stop()
    yield Run(cp.audit_events(), objects, kubeconfigs)


def _drive(cp: ControlPlane, plugin_dir: Path, health_file: Path, procs: list[Proc]) -> None:
    cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": WORKLOAD_NS}})
    cp.wait_for_service_account(WORKLOAD_NS, "default")
    cp.request("POST", f"{RES}/namespaces/{WORKLOAD_NS}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": WORKLOAD_NS},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.sim.dra-solver.dev"}},
            # A NIC too: the plugin reports it in the claim's status.devices.
            {"name": "nic", "exactly": {"deviceClassName": "nic.sim.dra-solver.dev"}}]}}},
    })
    pod_path, claim_path, claim = _scheduled_pod(cp, "trainer", procs)

    # The kubelet's part: prepare (the plugin reads the claim from the API), then unprepare.
    kubelet = Kubelet(plugin_dir / "dra.sock", Path("/nonexistent"))
    try:
        uid = claim["metadata"]["uid"]
        prepared = kubelet.prepare(claim).claims[uid]
        assert not prepared.error and prepared.devices, prepared
        wait("the prepared NIC in the claim's status.devices", lambda: [
            d for d in (get(cp, claim_path) or {}).get("status", {}).get("devices") or [] if d.get("networkData")], procs=procs)
        unprepared = kubelet.unprepare(claim).claims[uid]
        assert not unprepared.error, unprepared
    finally:
        kubelet.close()

    # The device fails: the plugin taints it NoExecute and the eviction controller evicts.
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    health_file.write_text(yaml.safe_dump({device: {"health": "Unhealthy", "severity": "critical",
                                                    "message": "simulated by the RBAC test"}}))
    wait("the pod evicted (deletionTimestamp set)", lambda: (
        (p := get(cp, pod_path)) is None or p["metadata"].get("deletionTimestamp")), procs=procs)
    # No kubelet runs to finish the graceful deletion: do its part.
    with contextlib.suppress(urllib.error.HTTPError):
        cp.request("DELETE", f"{pod_path}?gracePeriodSeconds=0")
    wait("the generated claim deleted", lambda: get(cp, claim_path) is None, procs=procs)

    # A pod that runs to completion: once the kubelet reports it Succeeded, the claim
    # controller deallocates its claim and deletes it (the pod itself stays).
    job_path, job_claim_path, _ = _scheduled_pod(cp, "job", procs)
    cp.request("PATCH", f"{job_path}/status", {"status": {"phase": "Succeeded"}},
               content_type="application/merge-patch+json")
    wait("the completed pod's claim deleted", lambda: get(cp, job_claim_path) is None, procs=procs)
    assert get(cp, job_path) is not None

    # A gang of one with a PodGroup claim: ScheduleGroup, the claim reserved for the PodGroup,
    # the pod bound, and the PodGroup's PodGroupInitiallyScheduled condition.
    cp.request("POST", f"{RES}/namespaces/{WORKLOAD_NS}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gang-nic", "namespace": WORKLOAD_NS},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "nic.sim.dra-solver.dev"}}]}},
    })
    groups = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{WORKLOAD_NS}/podgroups"
    cp.request("POST", groups, {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "gang", "namespace": WORKLOAD_NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}, "resourceClaims": [{"name": "nic", "resourceClaimName": "gang-nic"}]},
    })
    cp.request("POST", f"/api/v1/namespaces/{WORKLOAD_NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gang-0", "namespace": WORKLOAD_NS},
        "spec": {"schedulerName": "dra-solver", "restartPolicy": "Never", "schedulingGroup": {"podGroupName": "gang"},
                 "resourceClaims": [{"name": "nic", "resourceClaimName": "gang-nic"}],
                 "containers": [{"name": "main", "image": "busybox:1.36", "resources": {"claims": [{"name": "nic"}]}}]},
    })
    wait("the gang's pod bound", lambda: (get(cp, f"/api/v1/namespaces/{WORKLOAD_NS}/pods/gang-0") or {}).get("spec", {}).get("nodeName"),
         procs=procs)
    reserved = (get(cp, f"{RES}/namespaces/{WORKLOAD_NS}/resourceclaims/gang-nic") or {}).get("status", {}).get("reservedFor")
    assert [r.get("resource") for r in reserved or []] == ["podgroups"], reserved
    wait("the PodGroup's condition", lambda: (get(cp, f"{groups}/gang") or {}).get("status", {}).get("conditions"), procs=procs)

    # An admin's dry run of a DeviceTaintRule: the eviction controller reports in its status.
    cp.request("POST", f"{RES}/devicetaintrules", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "rbac-dry-run"},
        "spec": {"deviceSelector": {"driver": "gpu.sim.dra-solver.dev", "pool": NODE},
                 "taint": {"key": "example.com/maintenance", "effect": "None"}},
    })
    wait("the DeviceTaintRule's status", lambda: (get(cp, f"{RES}/devicetaintrules/rbac-dry-run") or {})
         .get("status", {}).get("conditions"), procs=procs)


def _scheduled_pod(cp: ControlPlane, name: str, procs: Sequence[Proc]) -> tuple[str, str, dict[str, Any]]:
    """Create a pod with a template claim; wait until dra-solver bound it and reserved its claim."""
    cp.request("POST", f"/api/v1/namespaces/{WORKLOAD_NS}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": WORKLOAD_NS},
        "spec": {"schedulerName": "dra-solver", "restartPolicy": "Never",
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                 "containers": [{"name": "main", "image": "busybox:1.36",
                                 "resources": {"claims": [{"name": "gpu"}]}}]},
    })
    pod_path = f"/api/v1/namespaces/{WORKLOAD_NS}/pods/{name}"
    pod = wait(f"pod {name} bound with its claim created", lambda: (
        p if (p := get(cp, pod_path)) and p["spec"].get("nodeName") and p.get("status", {}).get("resourceClaimStatuses")
        else None), procs=procs)
    assert pod["spec"]["nodeName"] == NODE
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim_path = f"{RES}/namespaces/{WORKLOAD_NS}/resourceclaims/{claim_name}"
    claim = wait(f"pod {name}'s claim allocated and reserved", lambda: (
        c if (c := get(cp, claim_path)) and c.get("status", {}).get("allocation")
        and c["status"].get("reservedFor") else None), procs=procs)
    return pod_path, claim_path, claim


@pytest.mark.parametrize("component", rbac.COMPONENTS, ids=lambda c: c.name)
def test_no_request_is_refused(workload: Run, component: rbac.Component) -> None:
    refused = rbac.refused(workload.events, component.username)
    assert not refused, f"{component.name}: deploy/ lacks " + "; ".join(
        f"{call} (e.g. {uri})" for call, uri in sorted(refused.items()))


@pytest.mark.parametrize("component", rbac.COMPONENTS, ids=lambda c: c.name)
def test_every_grant_is_used(workload: Run, component: rbac.Component) -> None:
    have = rbac.granted(workload.objects, component.service_account)
    used = rbac.used(workload.events, component.username)
    allowed = ALLOWED_UNUSED[component.name]
    unused = sorted(set(have) - set(used) - set(allowed))
    assert not unused, f"{component.name}: deploy/ grants what it never used: " + "; ".join(
        f"{c} (by {have[c]})" for c in unused)
    stale = sorted(c for c in allowed if c not in have or c in used)
    assert not stale, f"{component.name}: ALLOWED_UNUSED lists what is used or not granted: {stale}"


def test_the_plugin_may_write_only_its_own_nodes_slices(audited_cp: ControlPlane, workload: Run) -> None:
    # The production overlay's admission policy: the same token may not publish for another node.
    cp = audited_cp
    kubeconfig = workload.kubeconfigs["kubelet-plugin"]
    other = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": "node-2-foreign"},
             "spec": {"driver": "gpu.sim.dra-solver.dev", "nodeName": "node-2",
                      "pool": {"name": "node-2", "generation": 1, "resourceSliceCount": 1}, "devices": []}}
    done = cp.kubectl("create", "-f", "-", input=yaml.safe_dump(other), kubeconfig=kubeconfig, check=False)
    assert done.returncode != 0
    assert "may not write ResourceSlices of node node-2" in done.stderr, done.stderr


def test_every_overlay_ships_the_same_rbac() -> None:
    # The real run above uses production; the others must grant exactly the same.
    def rbac_of(directory: str) -> list[Any]:
        return sorted(yaml.safe_dump(o) for o in realkubectl.objects(directory) if o["kind"] in rbac.RBAC_KINDS)

    reference = rbac_of(OVERLAY)
    for name in OVERLAYS:
        assert rbac_of(f"deploy/overlays/{name}") == reference, f"{name}: RBAC differs from production"
