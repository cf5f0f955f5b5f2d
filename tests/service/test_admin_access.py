"""Admin access is enforced by the service for claims callers send (issue 15).

Like kube-apiserver's check when a ResourceClaim is created: ``adminAccess: true`` needs the
``resource.kubernetes.io/admin-access: "true"`` label on the claim's namespace; a namespace the
service does not know is refused too (upstream: it cannot read the namespace). Namespaces come
from the inventory: Namespace objects in files, list+watch from Kubernetes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from dra_solver.service.inventory import FileSource, KubeSource, StaticSource, decode_namespace
from tests import builders as b
from tests.realkube import KubeCluster
from tests.service.conftest import Running, demo_objects

LABEL = "resource.kubernetes.io/admin-access"
FORBIDDEN = f"Forbidden: admin access to devices requires the `{LABEL}: true` label on the containing namespace"


def _namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


MONITOR = b.SOLVER_TEST.named("monitor").request("gpu", adminAccess=True)
"""A claim for admin access to a GPU (its namespace decides whether it may)."""


@pytest.fixture
def served(fresh: Callable[..., Running]) -> Running:
    namespaces = [decode_namespace(_namespace("ops", {LABEL: "true"})), decode_namespace(_namespace("team", {LABEL: "false"})),
                  decode_namespace(_namespace("test"))]
    return fresh(StaticSource([*demo_objects(), *namespaces], name="demo"))


def _error(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details() or ""


def test_admin_namespace_gets_admin_access(served: Running) -> None:
    a = served.client.allocate([MONITOR.named("monitor", ns="ops").obj()], "node-a")
    assert a.allocated
    assert served.client.schedule([MONITOR.named("monitor", ns="ops").obj()]).node


@pytest.mark.parametrize("namespace", ["team", "test"])
def test_other_namespaces_are_forbidden_like_the_api_server(served: Running, namespace: str) -> None:
    for call in (
        lambda: served.client.allocate([MONITOR.named("monitor", ns=namespace).obj()], "node-a"),
        lambda: served.client.schedule([MONITOR.named("monitor", ns=namespace).obj()]),
        lambda: served.client.explain([MONITOR.named("monitor", ns=namespace).obj()], "node-a"),
    ):
        code, message = _error(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert f"ResourceClaim {namespace}/monitor: spec.devices.requests[0].adminAccess: {FORBIDDEN}" in message


def test_an_unknown_namespace_is_refused(served: Running) -> None:
    code, message = _error(lambda: served.client.allocate([MONITOR.named("monitor", ns="ghost").obj()], "node-a"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert 'could not retrieve namespace to verify admin access: namespaces "ghost" not found' in message


def test_claims_without_admin_access_need_no_namespace(served: Running) -> None:
    assert served.client.allocate([b.SOLVER_TEST.named("plain", ns="ghost").request("gpu").obj()], "node-a").allocated


def test_reserving_an_admin_allocation_is_checked_too(served: Running) -> None:
    ok = served.client.allocate([MONITOR.named("monitor", ns="ops").obj()], "node-b")
    claim = served.client.with_allocations([MONITOR.named("monitor", ns="ops").obj()], ok)[0]
    claim["metadata"]["namespace"] = "team"
    code, message = _error(lambda: served.client.reserve([claim], "node-b"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "adminAccess" in message and FORBIDDEN in message


def test_file_inventories_carry_namespaces(tmp_path: Path) -> None:
    (tmp_path / "ns.yaml").write_text(yaml.safe_dump_all([_namespace("ops", {LABEL: "true"}), _namespace("team")]))
    (tmp_path / "node.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}}))
    snap = FileSource(str(tmp_path)).load()
    assert snap.namespaces == {"ops": {LABEL: "true"}, "team": {}}
    assert snap.counts()["Namespace"] == 2


def test_kube_inventory_watches_namespace_labels(kube_cluster: KubeCluster) -> None:
    from dra_solver.service.kubeapi.client import api_client

    ns = kube_cluster.namespace()
    src = KubeSource(api_client(kubeconfig=kube_cluster.kubeconfig, user_agent="dra-solver-test"), debounce=0.01, retry_delay=0.1)
    src.start()
    try:
        assert src.wait_ready(30)
        until(lambda: (src.snapshot().namespaces or {}).get(ns) is not None, "the namespace is seen")
        assert (src.snapshot().namespaces or {})[ns].get(LABEL) is None
        kube_cluster.request("PATCH", f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {LABEL: "true"}}},
                             content_type="application/merge-patch+json")
        until(lambda: (src.snapshot().namespaces or {}).get(ns, {}).get(LABEL) == "true", "the label is seen")
    finally:
        src.stop()


def until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not reached within {timeout:.0f} s: {what}"
        time.sleep(0.02)
