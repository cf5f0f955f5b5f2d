"""The service's Kubernetes inventory (``KubeSource``) against the real kube-apiserver.

Objects are listed and watched through the shared client layer (``service.kubeapi``); a claim
allocated in the API is seen allocated and drops the reservation the service held for it;
a watch whose resourceVersion was compacted away gets 410 Gone and the inventory lists again;
a kube-apiserver restart costs nothing but a relist.
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dra_solver.service.inventory import DEFAULT_KUBE_KINDS, KubeKind, KubeSource
from dra_solver.service.kubeapi.client import api_client
from dra_solver.service.localcluster.cluster import create_node, node_object
from dra_solver.service.localcluster.controlplane import ControlPlane, binaries
from tests import builders as b
from tests.realkube import KubeCluster

RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.example.com"

Obj = dict[str, Any]
Request = Callable[..., Any]


def device_class(name: str = "gpu") -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}


def resource_slice(node: str, devices: int = 2) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


ONE_GPU = b.claim("c", cls="gpu").request("gpu", count=None)


def allocate(request: Request, namespace: str, name: str, *, pool: str, device: str) -> Obj:
    """Write ``status.allocation`` as the scheduler would (status subresource, with preconditions)."""
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"
    current = request("GET", path)
    current["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device},
    ]}}}
    updated: Obj = request("PUT", f"{path}/status", current)
    return updated


def until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not reached within {timeout:.0f} s: {what}"
        time.sleep(0.02)


def counts(source: KubeSource) -> dict[str, int]:
    out = source.snapshot().counts()
    out.pop("Namespace")  # the control plane's own namespaces come and go with the tests
    return out


def start_source(kubeconfig: str, **kw: Any) -> KubeSource:
    api = api_client(kubeconfig=kubeconfig, user_agent="dra-solver-test")
    source = KubeSource(api, debounce=0.01, retry_delay=0.1, **kw)
    source.start()
    return source


@pytest.fixture
def sources() -> Iterator[list[KubeSource]]:
    started: list[KubeSource] = []
    yield started
    for s in started:
        s.stop()


def test_lists_then_watches_every_kind(kube_cluster: KubeCluster, sources: list[KubeSource]) -> None:
    kube_cluster.create(f"{RESOURCE}/deviceclasses", device_class())
    for n in ("n1", "n2"):
        kube_cluster.node(n)
        kube_cluster.create(f"{RESOURCE}/resourceslices", resource_slice(n))
    source = start_source(kube_cluster.kubeconfig)
    sources.append(source)
    assert source.wait_ready(30)
    assert counts(source) == {"DeviceClass": 1, "ResourceSlice": 2, "ResourceClaim": 0, "DeviceTaintRule": 0, "Node": 2}
    assert source.snapshot().index.node_names == ("n1", "n2")
    assert {"default", "kube-system"} <= set(source.snapshot().namespaces or {})

    before = source.snapshot()
    ns = kube_cluster.namespace()
    created = kube_cluster.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", ONE_GPU.named("c1", ns=ns).obj())
    kube_cluster.node("n3")
    kube_cluster.create(f"{RESOURCE}/resourceslices", resource_slice("n3", devices=4))
    kube_cluster.create(f"{RESOURCE}/devicetaintrules", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "maintenance"},
        "spec": {"deviceSelector": {"driver": DRIVER, "pool": "n3"},
                 "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}},
    })
    until(lambda: counts(source) == {"DeviceClass": 1, "ResourceSlice": 3, "ResourceClaim": 1, "DeviceTaintRule": 1, "Node": 3},
          "watch events for a claim, a node, a slice and a taint rule")
    assert "n3" in source.snapshot().index.node_names
    assert (source.snapshot().namespaces or {}).get(ns) == {"kubernetes.io/metadata.name": ns}
    assert source.snapshot().allocated_claims() == {}
    # Snapshot isolation: the snapshot taken before the events has not changed.
    assert before.counts()["ResourceClaim"] == 0 and before.generation < source.snapshot().generation

    allocate(kube_cluster.request, ns, "c1", pool="n3", device="gpu-1")
    until(lambda: source.snapshot().allocated_claims() == {f"{ns}/c1": created["metadata"]["uid"]},
          "the allocation written to the claim's status")
    kube_cluster.request("DELETE", f"{RESOURCE}/resourceslices/n3-gpu")
    until(lambda: counts(source)["ResourceSlice"] == 2, "the deleted slice gone")
    assert source.relists == 0


def test_a_slow_rebuild_holds_the_next_one_off_and_loses_no_event(kube_cluster: KubeCluster, sources: list[KubeSource]) -> None:
    # A scheduler writing claims steadily would otherwise have the service rebuild its
    # snapshot every ``debounce``, whatever a rebuild costs (at 500 nodes and 4,000 claims that
    # was most of the service's CPU). Here a rebuild takes 0.25 s (a slow listener), so the next
    # may start 0.25 + 4 x 0.25 s after the last one started, and the claims created in the
    # meantime all arrive in the one after.
    kube_cluster.create(f"{RESOURCE}/deviceclasses", device_class("holdoff"))
    source = start_source(kube_cluster.kubeconfig, holdoff=4.0, max_holdoff=2.0)
    sources.append(source)
    assert source.wait_ready(30)
    published: list[float] = []

    def slow(_snapshot: Any) -> None:
        published.append(time.monotonic())
        time.sleep(0.25)

    source.add_listener(slow)
    ns = kube_cluster.namespace()
    for i in range(12):
        kube_cluster.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", ONE_GPU.named(f"h{i}", ns=ns).obj())
        time.sleep(0.15)
    until(lambda: sum(1 for c in source.snapshot().inventory.claims if c.namespace == ns) == 12, "all 12 claims in a snapshot")
    gaps = [later - earlier for earlier, later in itertools.pairwise(published)]
    assert gaps and min(gaps) >= 1.1, gaps
    assert source.last_publish_seconds >= 0.25


def test_a_version_the_server_does_not_serve_is_empty(kube_cluster: KubeCluster, sources: list[KubeSource]) -> None:
    # kube-apiserver v1.37 serves DeviceTaintRule as v1 only; v1alpha3 answers 404 (a fault
    # only a server of another version, or with other runtime-config, would not produce).
    kinds = [KubeKind("DeviceTaintRule", "resource.k8s.io", "v1alpha3", "devicetaintrules", "rules", "list_device_taint_rule", optional=True)
             if k.kind == "DeviceTaintRule" else k for k in DEFAULT_KUBE_KINDS]
    kube_cluster.create(f"{RESOURCE}/deviceclasses", device_class())
    source = start_source(kube_cluster.kubeconfig, kinds=kinds)
    sources.append(source)
    assert source.wait_ready(30)
    assert counts(source)["DeviceTaintRule"] == 0 and counts(source)["DeviceClass"] == 1
    assert source.informers["DeviceTaintRule"].served is False


def _serve(kubeconfig: str) -> Any:
    """The service exactly as ``dra-solver serve --kubeconfig FILE --port 0`` builds it."""
    from dra_solver.service.commands import serve

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["--kubeconfig", kubeconfig, "--port", "0", "--metrics-port", "-1", "--log-level", "warning"])
    service = serve.build(args)
    service.start()
    return service


def test_reservations_end_when_the_api_shows_the_allocation(kube_cluster: KubeCluster) -> None:
    from dra_solver.service.client import Client

    kube_cluster.create(f"{RESOURCE}/deviceclasses", device_class())
    kube_cluster.node("n1")
    kube_cluster.create(f"{RESOURCE}/resourceslices", resource_slice("n1", devices=2))
    ns = kube_cluster.namespace()
    first = kube_cluster.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", ONE_GPU.named("first", ns=ns).obj())
    second = kube_cluster.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", ONE_GPU.named("second", ns=ns).obj())
    service = _serve(kube_cluster.kubeconfig)
    try:
        engine = service.engine
        with Client(f"127.0.0.1:{service.port}", timeout=30) as client:
            client.wait_ready(timeout=30)
            until(lambda: service.engine.source.ready, "every kind listed")  # the channel is up before the inventory
            response = client.allocate([first], "n1", reserve=True, ttl=300)
            (device,) = [d.rsplit("/", 1)[-1] for d in Client.devices(response)]
            assert len(engine.reservations) == 1
            allocate(kube_cluster.request, ns, "first", pool="n1", device=device)
            until(lambda: len(engine.reservations) == 0, "the reservation dropped once the API shows the allocation")
            # Only a claim changed: the watched objects kept their identity, so the snapshot that
            # shows the allocation carried the node index instead of laying it out again.
            carried = engine.metrics.registry.get_sample_value("dra_solver_inventory_index_duration_seconds_count", {"layout": "carried"})
            assert carried and carried >= 1
            assert engine.current().index.in_use("n1").devices
            # The device is now held by the API's copy of the claim, not by a reservation.
            other = Client.devices(client.allocate([second], "n1"))
            assert len(other) == 1 and not other[0].endswith(f"/{device}")
    finally:
        service.stop(0)


def test_watch_expiry_relists_after_410_gone() -> None:
    # The API server's watch cache answers watches from memory, where an old resourceVersion
    # stays valid long after etcd compacted it. Without the cache every watch goes to etcd, and
    # resuming from a compacted revision is answered with 410 Gone: what a real cluster does
    # when a watch falls further behind than the cache's window.
    with ControlPlane(binaries(), extra_apiserver_args=["--watch-cache=false"], controller_manager=False) as cp:
        cp.request("POST", f"{RESOURCE}/deviceclasses", device_class())
        create_node(cp, node_object("n1"))
        cp.request("POST", f"{RESOURCE}/resourceslices", resource_slice("n1"))
        # The server ends each watch after a second; the informers resume from the last
        # resourceVersion they saw, which for the quiet kinds predates the compaction below.
        source = start_source(str(cp.kubeconfig), watch_timeout=1)
        try:
            assert source.wait_ready(30)
            for n in ("n2", "n3"):
                create_node(cp, node_object(n))
                cp.request("POST", f"{RESOURCE}/resourceslices", resource_slice(n))
            until(lambda: counts(source)["ResourceSlice"] == 3, "slices of the new nodes")
            classes = source.informers["DeviceClass"]
            assert (classes.stats.lists, classes.stats.relists_after_gone, source.relists) == (1, 0, 0)
            cp.compact_etcd()
            until(lambda: classes.stats.relists_after_gone >= 1 and classes.stats.lists >= 2, "410 Gone, then a list")
            assert source.relists >= 1
            # After the relist the watch goes on from the fresh list's resourceVersion.
            cp.request("POST", f"{RESOURCE}/deviceclasses", device_class("gpu-2"))
            cp.request("DELETE", f"{RESOURCE}/resourceslices/n2-gpu")
            until(lambda: counts(source) == {"DeviceClass": 2, "ResourceSlice": 2, "ResourceClaim": 0, "DeviceTaintRule": 0, "Node": 3},
                  "changes after the relist")
            assert source.ready
        finally:
            source.stop()


def test_apiserver_restart_loses_nothing(kube_cluster: KubeCluster, sources: list[KubeSource]) -> None:
    kube_cluster.create(f"{RESOURCE}/deviceclasses", device_class())
    kube_cluster.node("n1")
    kube_cluster.create(f"{RESOURCE}/resourceslices", resource_slice("n1"))
    ns = kube_cluster.namespace()
    created = kube_cluster.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", ONE_GPU.named("c1", ns=ns).obj())
    source = start_source(kube_cluster.kubeconfig)
    sources.append(source)
    assert source.wait_ready(30)
    generation = source.snapshot().generation

    kube_cluster.cp.restart_apiserver(down_for=2)
    # While the server was away the inventory kept its last snapshot and stayed ready.
    assert source.ready and counts(source)["ResourceSlice"] == 1
    assert source.snapshot().generation >= generation

    kube_cluster.node("n2")
    kube_cluster.create(f"{RESOURCE}/resourceslices", resource_slice("n2"))
    allocate(kube_cluster.request, ns, "c1", pool="n1", device="gpu-0")
    until(lambda: counts(source) == {"DeviceClass": 1, "ResourceSlice": 2, "ResourceClaim": 1, "DeviceTaintRule": 0, "Node": 2}
          and source.snapshot().allocated_claims() == {f"{ns}/c1": created["metadata"]["uid"]},
          "changes made after the restart")
    assert sum(i.stats.errors for i in source.informers.values()) >= 1, "the restart went unnoticed"


def test_rbac_list_matches_the_kinds_watched() -> None:
    from dra_solver.service.rbac_calls import API_CALLS

    assert {(k.group, k.plural) for k in DEFAULT_KUBE_KINDS} == {(g, r) for g, r, _ in API_CALLS}
    assert all(set(verbs) == {"list", "watch"} for _, _, verbs in API_CALLS)


def test_one_client_layer() -> None:
    """Only ``service/kubeapi`` talks to the ``kubernetes`` client: no component keeps its own
    list/watch or ApiException handling beside it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for package in ("service", "controllers", "kubeletplugin"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.parts[:2] in {("service", "kubeapi"), ("service", "gen"), ("kubeletplugin", "gen")}:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                offenders += [f"{rel}:{node.lineno}: {n}" for n in names if n == "kubernetes" or n.startswith("kubernetes.")]
    assert offenders == []


def test_changes_between_snapshots_are_decoded_once_in_their_last_version() -> None:
    # No server: the informers are not started; the watch's changes are handed in directly.
    source = KubeSource(api_client(host="http://127.0.0.1:1"))
    decoded: list[tuple[str, str]] = []
    decode = source._decoder.decode

    def counting(raw: Obj, **kw: Any) -> Any:
        decoded.append((raw["metadata"]["name"], raw["metadata"]["resourceVersion"]))
        return decode(raw, **kw)

    source._decoder.decode = counting  # type: ignore[method-assign, assignment]

    def claim(name: str, rv: int, **labels: str) -> Obj:
        doc = b.ONE_GPU.named(name).obj()
        doc["metadata"].update(resourceVersion=str(rv), labels=labels)
        return doc

    v1, v2, v3 = claim("c", 1), claim("c", 2, step="finalizer"), claim("c", 3, step="allocation")
    source._changed("ResourceClaim", None, v1)
    source._changed("ResourceClaim", v1, v2)
    source._changed("ResourceClaim", v2, v3)
    gone = claim("gone", 4)
    source._changed("ResourceClaim", None, gone)
    source._changed("ResourceClaim", gone, None)
    source._apply_changes()
    assert decoded == [("c", "3")], "one decode, of the last version; none for an object created and deleted since"
    claims = source._state["ResourceClaim"].objects
    assert list(claims) == ["default/c"] and claims["default/c"].metadata.labels == {"step": "allocation"}
    source._changed("ResourceClaim", v3, None)
    source._apply_changes()
    assert claims == {} and decoded == [("c", "3")]


def test_an_object_that_does_not_decode_is_a_problem_until_deleted() -> None:
    source = KubeSource(api_client(host="http://127.0.0.1:1"))
    bad = b.ONE_GPU.named("bad").obj()
    bad["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    bad["metadata"]["resourceVersion"] = "1"
    source._changed("ResourceClaim", None, bad)
    source._apply_changes()
    assert [p.name for p, _ in source._problems.values()] == ["default/bad"]
    assert source._state["ResourceClaim"].objects == {}
    source._changed("ResourceClaim", bad, None)
    source._apply_changes()
    assert source._problems == {}


def test_claim_changes_alone_wait_the_longer_debounce_others_do_not() -> None:
    source = KubeSource(api_client(host="http://127.0.0.1:1"), debounce=0.01, churn_debounce=1.0)
    published: list[float] = []
    source.publish_objects = lambda *a, **kw: published.append(time.monotonic())  # type: ignore[method-assign, assignment]
    thread = threading.Thread(target=source._publisher, daemon=True)
    thread.start()
    try:
        def claim(rv: int) -> Obj:
            doc = b.ONE_GPU.named("c").obj()
            doc["metadata"]["resourceVersion"] = str(rv)
            return doc

        def settle(count: int) -> float:
            deadline = time.monotonic() + 10
            while len(published) < count and time.monotonic() < deadline:
                time.sleep(0.005)
            assert len(published) == count, published
            return published[-1]

        changed = time.monotonic()
        source._changed("ResourceClaim", None, claim(1))
        assert settle(1) - changed < 0.5, "the first snapshot does not wait"
        changed = time.monotonic()
        source._changed("ResourceClaim", claim(1), claim(2))
        assert settle(2) - changed >= 0.95, "claims alone: the longer wait"
        time.sleep(0.1)
        changed = time.monotonic()
        source._changed("ResourceSlice", None, resource_slice("node-a"))
        assert settle(3) - changed < 0.5, "a slice shows within the debounce"
        time.sleep(0.1)
        source._changed("ResourceClaim", claim(2), claim(3))
        time.sleep(0.1)  # in the claims' longer wait
        changed = time.monotonic()
        source._changed("ResourceSlice", None, resource_slice("node-b"))
        assert settle(4) - changed < 0.5, "a slice that comes during the claims' wait ends it"
    finally:
        source._stop.set()
        source._dirty.set()
        thread.join(5)
