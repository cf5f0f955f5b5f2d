"""The Kubernetes inventory source against an in-process API server, through the real client:
initial list, readiness, watch events, an unserved optional kind, and relist after 410 Gone."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from service.inventory import KubeSource
from tests.service.fake_kube import FakeKube


def _slice(node: str, devices: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def _claim(name: str, device: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": device}]}}},
    }


def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    # DeviceTaintRule (an alpha API) is not served: the source must treat it as empty.
    kube = FakeKube(served={"DeviceClass", "ResourceSlice", "ResourceClaim", "Node"})
    kube.put({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
              "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}})
    for n in ("n1", "n2"):
        kube.put(_node(n))
        kube.put(_slice(n))
    kube.start()
    yield kube
    kube.stop()


@pytest.fixture
def source(fake: FakeKube) -> Iterator[KubeSource]:
    api = client.ApiClient(client.Configuration(host=fake.host))
    src = KubeSource(api, watch_timeout=30, debounce=0.01, retry_delay=0.05)
    src.start()
    yield src
    src.stop()


def test_ready_after_initial_list(source: KubeSource) -> None:
    assert source.wait_ready(10)
    counts = source.snapshot().counts()
    assert counts == {"DeviceClass": 1, "ResourceSlice": 2, "ResourceClaim": 0, "DeviceTaintRule": 0, "Node": 2}
    assert source.snapshot().index.node_names == ("n1", "n2")


def test_watch_events_update_snapshots(fake: FakeKube, source: KubeSource) -> None:
    assert source.wait_ready(10)
    before = source.snapshot()
    fake.put(_claim("c1", "gpu-0"))
    fake.put(_slice("n3", devices=4))
    fake.put(_node("n3"))
    _until(lambda: source.snapshot().counts()["ResourceClaim"] == 1 and source.snapshot().counts()["Node"] == 3)
    after = source.snapshot()
    assert after.generation > before.generation
    assert "n3" in after.index.node_names
    # Snapshot isolation: the snapshot taken before the events has not changed.
    assert before.counts()["ResourceClaim"] == 0
    fake.delete("ResourceSlice", "n3-gpu")
    _until(lambda: source.snapshot().counts()["ResourceSlice"] == 2)


def test_relist_after_410_gone(fake: FakeKube, source: KubeSource) -> None:
    assert source.wait_ready(10)
    # Changes the watch never sees, then history compaction: the resumed watch gets 410 Gone,
    # and only a fresh list can bring the source up to date.
    fake.put(_claim("hidden", "gpu-1"), notify=False)
    fake.delete("ResourceSlice", "n2-gpu", notify=False)
    fake.compact()
    _until(lambda: source.relists >= 1 and source.snapshot().counts()["ResourceClaim"] == 1)
    assert source.snapshot().counts()["ResourceSlice"] == 1
    assert source.ready
    assert any("watch=true" in r for r in fake.requests)


def test_rbac_list_matches_the_kinds_watched() -> None:
    from service.inventory import DEFAULT_KUBE_KINDS
    from service.rbac_calls import API_CALLS

    assert {(k.group, k.plural) for k in DEFAULT_KUBE_KINDS} == {(g, r) for g, r, _ in API_CALLS}
    assert all(set(verbs) == {"list", "watch"} for _, _, verbs in API_CALLS)
