"""The real kube-apiserver under the companion tests.

``control_plane`` is one etcd + kube-apiserver + kube-controller-manager (upstream v1.37.2,
built by scripts/build-upstream.sh) per test process, started the first time a test asks for
it and stopped at the end of the run. ``kube_cluster`` hands a test that control plane wiped
clean: no test namespaces, Nodes, ResourceSlices, DeviceClasses or DeviceTaintRules left by an
earlier test, so every test sees only the objects it created.

``upstream_cluster`` is a second control plane, also shared by the whole test process, where
upstream's own components do what dra-solver's companions do elsewhere: kube-scheduler v1.37.2
(binding-condition timeout shortened to :data:`UPSTREAM_BINDING_TIMEOUT`) and
kube-controller-manager with its resourceclaim and device-taint-eviction controllers. Tests that
compare outcomes run the same objects on both (tests/controllers/test_parity.py).

Tests that need them use the ``kube_cluster`` and ``upstream_cluster`` fixtures (registered in
tests/conftest.py).
"""

from __future__ import annotations

import time
import urllib.error
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver.service.localcluster.cluster import create_node, node_object
from dra_solver.service.localcluster.controlplane import (
    KCM_CONTROLLERS,
    Binaries,
    ControlPlane,
    ControlPlaneError,
    binaries,
)

SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
RESOURCE = "/apis/resource.k8s.io/v1"
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1"
CLUSTER_SCOPED = (
    f"{RESOURCE}/resourceslices",
    f"{RESOURCE}/deviceclasses",
    f"{RESOURCE}/devicetaintrules",
    "/api/v1/nodes",
)


class KubeCluster:
    """A test's handle on the real control plane, with helpers for the objects tests need."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp

    @property
    def kubeconfig(self) -> str:
        return str(self.cp.kubeconfig)

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self.cp.request(method, path, body, **kw)

    def get(self, path: str) -> Any:
        return self.cp.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Any:
        return self.cp.request("POST", path, obj)

    def namespace(self, prefix: str = "t") -> str:
        """A fresh namespace with its default ServiceAccount in place (pods need it)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.cp.wait_for_service_account(name, "default")
        return name

    def node(self, name: str, **kw: Any) -> None:
        create_node(self.cp, node_object(name, **kw))

    def apply(self, manifest: str) -> None:
        self.cp.kubectl("apply", "-f", "-", input=manifest)

    def wipe(self) -> None:
        """Remove everything tests create, so the next test starts from an empty cluster."""
        namespaces = [n["metadata"]["name"] for n in self.get("/api/v1/namespaces")["items"]]
        for ns in namespaces:
            # Pods bound to nodes without a kubelet never finish a graceful delete: force it.
            self._delete(f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
            for claim in self.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims")["items"]:
                if claim["metadata"].get("finalizers"):
                    self._unfinalize(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{claim['metadata']['name']}")
            self._delete(f"{RESOURCE}/namespaces/{ns}/resourceclaims")
            self._delete(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates")
            # kcm's podgroup-protection-controller (not run here) would lift this finalizer.
            for group in self._list(f"{PODGROUPS}/namespaces/{ns}/podgroups"):
                if group["metadata"].get("finalizers"):
                    self._unfinalize(f"{PODGROUPS}/namespaces/{ns}/podgroups/{group['metadata']['name']}")
            self._delete(f"{PODGROUPS}/namespaces/{ns}/podgroups")
            if ns not in SYSTEM_NAMESPACES:
                self._delete(f"/api/v1/namespaces/{ns}")
        for path in CLUSTER_SCOPED:
            self._delete(path)
        self._wait_gone(namespaces)

    def _wait_gone(self, namespaces: list[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        pending = [ns for ns in namespaces if ns not in SYSTEM_NAMESPACES]
        while pending and time.monotonic() < deadline:
            live = {n["metadata"]["name"] for n in self.get("/api/v1/namespaces")["items"]}
            pending = [ns for ns in pending if ns in live]
            if pending:
                time.sleep(0.1)
        if pending:
            raise ControlPlaneError(f"namespaces still terminating after {timeout:.0f} s: {pending}")

    def _list(self, path: str) -> list[dict[str, Any]]:
        """Items of a collection; none when the API is not served."""
        try:
            items: list[dict[str, Any]] = self.get(path)["items"]
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise
            return []
        return items

    def _delete(self, path: str) -> None:
        try:
            self.cp.request("DELETE", path)
        except urllib.error.HTTPError as err:
            if err.code not in (404, 405, 409):
                raise

    def _unfinalize(self, path: str) -> None:
        try:
            self.cp.request("PATCH", path, {"metadata": {"finalizers": None}},
                            content_type="application/merge-patch+json")
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    try:
        bins = binaries()
    except ControlPlaneError as err:
        pytest.fail(f"upstream Kubernetes binaries are not available: {err}", pytrace=False)
    cp = ControlPlane(bins)
    try:
        cp.start()
    except ControlPlaneError as err:
        pytest.fail(f"the real control plane did not start: {err}", pytrace=False)
    yield cp
    cp.stop()


@pytest.fixture
def kube_cluster(control_plane: ControlPlane) -> Iterator[KubeCluster]:
    cluster = KubeCluster(control_plane)
    cluster.wipe()
    yield cluster
    cluster.wipe()


UPSTREAM_BINDING_TIMEOUT = 8.0
"""kube-scheduler's ``bindingTimeout`` on ``upstream_plane``: above its 5 s PreBind poll, so
that a condition set in time is seen before the wait ends."""

UPSTREAM_CONTROLLERS = (*KCM_CONTROLLERS, "resourceclaim-controller", "device-taint-eviction-controller")


def upstream_scheduler_config(kubeconfig: str, *, binding_timeout: float = UPSTREAM_BINDING_TIMEOUT) -> str:
    """kube-scheduler's defaults with a short binding timeout and a short backoff (tests)."""
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {kubeconfig}\n"
        "leaderElection:\n  leaderElect: false\n"
        "podInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\n"
        "profiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: DynamicResources\n    args:\n"
        "      apiVersion: kubescheduler.config.k8s.io/v1\n      kind: DynamicResourcesArgs\n"
        f"      bindingTimeout: {binding_timeout:g}s\n"
    )


def scheduler_binaries() -> Binaries:
    """The upstream binaries, kube-scheduler included; the test fails (never skips) without them."""
    try:
        found = binaries()
    except ControlPlaneError as err:
        pytest.fail(f"upstream Kubernetes binaries are not available: {err}", pytrace=False)
    if not found.path("kube-scheduler").is_file():
        pytest.fail(f"{found.path('kube-scheduler')} is missing: run scripts/build-upstream.sh", pytrace=False)
    return found


@pytest.fixture(scope="session")
def upstream_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane(scheduler_binaries(), controllers=UPSTREAM_CONTROLLERS)
    try:
        cp.start()
        cp.start_scheduler(config=upstream_scheduler_config(str(cp.scheduler_kubeconfig)))
    except ControlPlaneError as err:
        cp.stop()
        pytest.fail(f"the upstream control plane did not start: {err}", pytrace=False)
    yield cp
    cp.stop()


@pytest.fixture
def upstream_cluster(upstream_plane: ControlPlane) -> Iterator[KubeCluster]:
    """The upstream control plane wiped clean, as ``kube_cluster`` is."""
    cluster = KubeCluster(upstream_plane)
    cluster.wipe()
    yield cluster
    cluster.wipe()
