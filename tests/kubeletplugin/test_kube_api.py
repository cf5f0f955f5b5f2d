"""The Kubernetes API layer, through the real ``kubernetes`` client against a fake API server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kubeletplugin import discovery
from kubeletplugin.claims import ClaimLookupError, KubeClaimSource
from kubeletplugin.publish import KubeSliceSink, Publisher, PublishError
from tests.kubeletplugin.fakeapi import FakeApi
from tests.kubeletplugin.helpers import (
    DRIVER,
    NODE,
    PluginDirs,
    PluginProcess,
    claim,
    result,
    uid_of,
)


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi().start()
    fake.nodes[NODE] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "uid": "node-uid-1"},
    }
    try:
        yield fake
    finally:
        fake.stop()


def api_client(fake: FakeApi) -> Any:
    config = client.Configuration()
    config.host = fake.host
    return client.ApiClient(config)


def node_devices(count: int) -> discovery.NodeDevices:
    return discovery.build_devices(discovery.parse_config({"gpus": {"count": count}}), node=NODE)


def test_slices_through_the_api(api: FakeApi) -> None:
    other_node = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "theirs", "uid": "x", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-2",
            "pool": {"name": "node-2", "generation": 1, "resourceSliceCount": 1},
        },
    }
    api.slices["theirs"] = other_node
    sink = KubeSliceSink(api_client(api), driver=DRIVER, node=NODE)
    publisher = Publisher(sink, driver=DRIVER, node=NODE)

    first = publisher.sync(node_devices(200), taints={})
    assert first.created == (f"{NODE}-{DRIVER}-0", f"{NODE}-{DRIVER}-1")
    ours = api.slices[f"{NODE}-{DRIVER}-0"]
    assert ours["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-1", "controller": True}
    ]
    assert ours["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 2}

    api.requests.clear()
    assert publisher.sync(node_devices(200), taints={}).changed is False
    assert [m for m, _ in api.requests] == ["GET"]  # one list, no writes

    taint = {
        "key": f"{DRIVER}/unhealthy",
        "effect": "NoExecute",
        "value": "critical",
        "timeAdded": "2026-01-01T00:00:00Z",
    }
    changed = publisher.sync(node_devices(10), taints={"gpu-2": [taint]})
    assert (changed.generation, changed.updated, changed.deleted) == (
        2,
        (f"{NODE}-{DRIVER}-0",),
        (f"{NODE}-{DRIVER}-1",),
    )
    assert api.slices[f"{NODE}-{DRIVER}-0"]["spec"]["devices"][2]["taints"] == [taint]
    assert "theirs" in api.slices

    methods = {(m, p.rsplit("/", 1)[0] if m in ("PUT", "DELETE") else p) for m, p in api.requests}
    assert methods == {
        ("GET", "/apis/resource.k8s.io/v1/resourceslices"),
        ("PUT", "/apis/resource.k8s.io/v1/resourceslices"),
        ("DELETE", "/apis/resource.k8s.io/v1/resourceslices"),
    }


def test_conflicts_and_missing_node(api: FakeApi) -> None:
    del api.nodes[NODE]
    sink = KubeSliceSink(api_client(api), driver=DRIVER, node=NODE)
    publisher = Publisher(sink, driver=DRIVER, node=NODE)
    publisher.sync(node_devices(2), taints={})
    assert "ownerReferences" not in api.slices[f"{NODE}-{DRIVER}-0"]["metadata"]

    stale = sink.list()[0]
    stale["spec"]["pool"]["generation"] = 9
    api.slices[f"{NODE}-{DRIVER}-0"]["metadata"]["resourceVersion"] = "999"  # someone else wrote
    with pytest.raises(PublishError, match=r"update resourceslice .*409 Conflict"):
        sink.update(stale)
    # The next sync lists again and succeeds.
    assert publisher.sync(node_devices(3), taints={}).changed is True


def test_claims_from_the_api(api: FakeApi) -> None:
    allocated = claim("c1", [result("gpu", "gpu-0")], namespace="team-a")
    api.claims[("team-a", "c1")] = allocated
    api.claims[("team-a", "pending")] = claim("pending", None, namespace="team-a")
    source = KubeClaimSource(api_client(api))

    got = source.get("team-a", "c1", uid_of(allocated))
    assert got.status is not None and got.status.allocation is not None
    assert got.status.allocation.devices is not None
    assert [r.device for r in got.status.allocation.devices.results or []] == ["gpu-0"]
    with pytest.raises(ClaimLookupError, match="got replaced"):
        source.get("team-a", "c1", "other-uid")
    with pytest.raises(ClaimLookupError, match="retrieve claim team-a/missing: not found"):
        source.get("team-a", "missing", "u")
    pending = api.claims[("team-a", "pending")]
    with pytest.raises(ClaimLookupError, match="claim team-a/pending not allocated"):
        source.get("team-a", "pending", uid_of(pending))
    assert ("GET", "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c1") in api.requests


def test_unreachable_api_is_a_clean_error() -> None:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"  # discard port: connection refused
    config.retries = False
    source = KubeClaimSource(client.ApiClient(config))
    with pytest.raises(ClaimLookupError, match="retrieve claim ns/c"):
        source.get("ns", "c", "u")
    sink = KubeSliceSink(client.ApiClient(config), driver=DRIVER, node=NODE)
    with pytest.raises(PublishError, match="list resourceslices"):
        sink.list()


def test_plugin_process_in_kube_mode(api: FakeApi, dirs: PluginDirs) -> None:
    """``--publish kube --claim-source kube`` with a kubeconfig: the whole loop over HTTP."""
    c = claim("from-api", [result("gpu", "gpu-4")])
    api.claims[("default", "from-api")] = c
    kubeconfig = api.kubeconfig(dirs.root / "kubeconfig")
    # Same directories, but the API instead of files; no in-cluster config, so the kubeconfig.
    proc = PluginProcess(
        _KubeDirs(dirs.root), env={"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": ""}
    )
    proc.start()
    try:
        kubelet = proc.kubelet()
        resp = kubelet.prepare(c).claims[uid_of(c)]
        assert resp.error == "" and [d.device_name for d in resp.devices] == ["gpu-4"]
        kubelet.close()
        slices = [s for s in api.slices.values() if s["spec"]["nodeName"] == NODE]
        assert len(slices) == 1 and len(slices[0]["spec"]["devices"]) == 8
        assert slices[0]["metadata"]["ownerReferences"][0]["uid"] == "node-uid-1"
    finally:
        assert proc.terminate() == 0, proc.log()
    assert "publishing ResourceSlices through the Kubernetes API" in proc.log()
    assert not (dirs.root / "slices").exists()


class _KubeDirs(PluginDirs):
    def args(self) -> list[str]:
        out = super().args()
        for flag in ("--publish", "--claim-source"):
            out[out.index(flag) + 1] = "kube"
        return out
