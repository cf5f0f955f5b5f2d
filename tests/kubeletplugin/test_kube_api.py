"""The kubelet plugin against the real kube-apiserver: ResourceSlices published and updated
(pool generation, splitting at the per-slice device limit, health taints, owner reference to
the Node), claims read from the server and prepared, the plugin as a real process that outlives
a kube-apiserver restart."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from dra_solver.kubeletplugin import discovery, simconfig
from dra_solver.kubeletplugin.claims import ClaimLookupError, KubeClaimSource
from dra_solver.kubeletplugin.publish import KubeSliceSink, Publisher, PublishError
from dra_solver.service.kubeapi.client import api_client
from tests import builders as b
from tests.kubeletplugin.helpers import DRIVER, NODE, PluginDirs, PluginProcess, uid_of
from tests.realkube import KubeCluster

RESOURCE = "/apis/resource.k8s.io/v1"
OURS = f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName%3D{NODE}"


def client_for(cluster: KubeCluster) -> Any:
    return api_client(kubeconfig=cluster.kubeconfig, user_agent="dra-solver-test")


def node_devices(count: int) -> discovery.NodeDevices:
    return discovery.build_devices(simconfig.parse_config({"gpus": {"count": count}}), node=NODE)


def published(cluster: KubeCluster) -> dict[str, dict[str, Any]]:
    items = cluster.get(OURS)["items"]
    return {s["metadata"]["name"]: s for s in items}


def create_allocated(cluster: KubeCluster, wanted: dict[str, Any]) -> dict[str, Any]:
    """A claim created in the API, its allocation (if any) written to the status subresource:
    the server's copy, with the UID the kubelet would send."""
    name = wanted["metadata"]["name"]
    body = {k: v for k, v in wanted.items() if k != "status"}
    body["metadata"] = {"name": name, "namespace": "default"}
    created: dict[str, Any] = cluster.create(f"{RESOURCE}/namespaces/default/resourceclaims", body)
    if "status" not in wanted:
        return created
    created["status"] = wanted["status"]
    path = f"{RESOURCE}/namespaces/default/resourceclaims/{name}/status"
    allocated: dict[str, Any] = cluster.request("PUT", path, created)
    return allocated


def until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not reached within {timeout:.0f} s: {what}"
        time.sleep(0.05)


def test_slices_published_split_and_updated(kube_cluster: KubeCluster) -> None:
    kube_cluster.node(NODE)
    node_uid = kube_cluster.get(f"/api/v1/nodes/{NODE}")["metadata"]["uid"]
    theirs = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "theirs"},
        "spec": {"driver": DRIVER, "nodeName": "node-2", "pool": {"name": "node-2", "generation": 1, "resourceSliceCount": 1}},
    }
    kube_cluster.create(f"{RESOURCE}/resourceslices", theirs)
    publisher = Publisher(KubeSliceSink(client_for(kube_cluster), driver=DRIVER, node=NODE), driver=DRIVER, node=NODE)

    # 200 devices: over the 128-device limit of one slice, so two slices of one pool.
    first = publisher.sync(node_devices(200), taints={})
    names = (f"{NODE}-{DRIVER}-0", f"{NODE}-{DRIVER}-1")
    assert (first.generation, first.created) == (1, names)
    slices = published(kube_cluster)
    assert sorted(slices) == list(names)
    assert [len(slices[n]["spec"]["devices"]) for n in names] == [128, 72]
    for s in slices.values():
        assert s["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 2}
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
        ]
    versions = {n: s["metadata"]["resourceVersion"] for n, s in slices.items()}

    # Nothing changed: the server's defaulting and time format must compare equal to ours.
    assert publisher.sync(node_devices(200), taints={}).changed is False
    assert {n: s["metadata"]["resourceVersion"] for n, s in published(kube_cluster).items()} == versions

    # A health taint lowers the per-slice limit to 64: 100 devices become two slices of the
    # next generation, written as updates of the existing names.
    taint = {"key": f"{DRIVER}/unhealthy", "effect": "NoExecute", "value": "critical", "timeAdded": "2026-01-01T00:00:00Z"}
    tainted = publisher.sync(node_devices(100), taints={"gpu-2": [taint]})
    assert (tainted.generation, tainted.updated, tainted.deleted) == (2, names, ())
    slices = published(kube_cluster)
    assert [len(slices[n]["spec"]["devices"]) for n in names] == [64, 36]
    assert slices[names[0]]["spec"]["devices"][2]["taints"] == [taint]
    assert {s["spec"]["pool"]["generation"] for s in slices.values()} == {2}
    assert publisher.sync(node_devices(100), taints={"gpu-2": [taint]}).changed is False

    # Fewer devices: the second slice goes, the first is rewritten at generation 3.
    shrunk = publisher.sync(node_devices(10), taints={})
    assert (shrunk.generation, shrunk.updated, shrunk.deleted) == (3, names[:1], names[1:])
    slices = published(kube_cluster)
    assert list(slices) == [names[0]]
    assert slices[names[0]]["spec"]["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 1}
    assert "taints" not in slices[names[0]]["spec"]["devices"][2]
    assert kube_cluster.get(f"{RESOURCE}/resourceslices/theirs")["spec"]["nodeName"] == "node-2"


def test_conflicts_and_a_missing_node(kube_cluster: KubeCluster) -> None:
    sink = KubeSliceSink(client_for(kube_cluster), driver=DRIVER, node=NODE)
    publisher = Publisher(sink, driver=DRIVER, node=NODE)
    publisher.sync(node_devices(2), taints={})  # no Node object: no owner reference, no failure
    assert "ownerReferences" not in published(kube_cluster)[f"{NODE}-{DRIVER}-0"]["metadata"]

    stale = sink.list()[0]
    fresh = json.loads(json.dumps(stale))
    fresh["spec"]["pool"]["generation"] = 7
    sink.update(fresh)  # someone else wrote in between
    stale["spec"]["pool"]["generation"] = 9
    with pytest.raises(PublishError, match=r"update resourceslice .*the object has been modified"):
        sink.update(stale)
    # The next sync lists again and succeeds.
    assert publisher.sync(node_devices(3), taints={}).generation == 8
    del stale["metadata"]["resourceVersion"]
    with pytest.raises(PublishError, match=r"create resourceslice .*already exists"):
        sink.create(stale)
    sink.delete(stale)
    sink.delete(stale)  # already gone is what delete wanted
    assert published(kube_cluster) == {}


def test_claims_from_the_server(kube_cluster: KubeCluster) -> None:
    allocated = create_allocated(kube_cluster, b.SIM_GPU.named("c1").request("gpu", count=None).allocated("gpu-0").obj())
    pending = create_allocated(kube_cluster, b.SIM_GPU.named("pending").request("req", count=None).obj())
    source = KubeClaimSource(client_for(kube_cluster))

    got = source.get("default", "c1", uid_of(allocated))
    assert got.status is not None and got.status.allocation is not None
    assert got.status.allocation.devices is not None
    assert [r.device for r in got.status.allocation.devices.results or []] == ["gpu-0"]
    with pytest.raises(ClaimLookupError, match="got replaced"):
        source.get("default", "c1", "other-uid")
    with pytest.raises(ClaimLookupError, match="retrieve claim default/missing: not found"):
        source.get("default", "missing", "u")
    with pytest.raises(ClaimLookupError, match="claim default/pending not allocated"):
        source.get("default", "pending", uid_of(pending))


def test_unreachable_api_is_a_clean_error() -> None:
    api = api_client(host="http://127.0.0.1:9")  # discard port: connection refused
    api.configuration.retries = False
    with pytest.raises(ClaimLookupError, match=r"retrieve claim ns/c: .*Connection refused"):
        KubeClaimSource(api).get("ns", "c", "u")
    with pytest.raises(PublishError, match=r"list resourceslices: .*Connection refused"):
        KubeSliceSink(api, driver=DRIVER, node=NODE).list()


class KubeDirs(PluginDirs):
    """The plugin's directories, with the API (``--kubeconfig``) as slice sink and claim source."""

    def __init__(self, root: Any, kubeconfig: str) -> None:
        super().__init__(root)
        self.kubeconfig = kubeconfig

    def args(self) -> list[str]:
        out = super().args()
        for flag in ("--publish", "--claim-source"):
            out[out.index(flag) + 1] = "kube"
        return [*out, "--kubeconfig", self.kubeconfig]


def test_plugin_process_publishes_and_prepares_from_the_server(kube_cluster: KubeCluster, dirs: PluginDirs) -> None:
    """``dra-solver kubelet-plugin --publish kube --claim-source kube --kubeconfig FILE``."""
    kube_cluster.node(NODE)
    node_uid = kube_cluster.get(f"/api/v1/nodes/{NODE}")["metadata"]["uid"]
    kdirs = KubeDirs(dirs.root, kube_cluster.kubeconfig)
    kdirs.config = dirs.root / "devices.yaml"
    kdirs.config.write_text("gpus: {count: 8}\nhealth: {pollSeconds: 3600}\n")
    proc = PluginProcess(kdirs, env={"KUBERNETES_SERVICE_HOST": ""})
    proc.start()
    try:
        until(lambda: len(published(kube_cluster)) == 1, "the plugin's slice on the server")
        (slice_,) = published(kube_cluster).values()
        assert len(slice_["spec"]["devices"]) == 8 and slice_["spec"]["pool"]["generation"] == 1
        assert slice_["metadata"]["ownerReferences"][0]["uid"] == node_uid

        c = create_allocated(kube_cluster, b.SIM_GPU.named("from-api").request("gpu", count=None).allocated("gpu-4").obj())
        kubelet = proc.kubelet()
        try:
            resp = kubelet.prepare(c).claims[uid_of(c)]
            assert resp.error == "" and [d.device_name for d in resp.devices] == ["gpu-4"]
            spec_file = kdirs.cdi / f"{DRIVER}-device_{uid_of(c)}.json"
            assert json.loads(spec_file.read_text())["devices"]
            missing = b.SIM_GPU.named("gone").request("gpu", count=None).allocated("gpu-5").obj()
            assert "retrieve claim default/gone: not found" in kubelet.prepare(missing).claims[uid_of(missing)].error
            kubelet.unprepare(c)
            assert not spec_file.exists()
        finally:
            kubelet.close()

        # A device turns unhealthy: the slice on the server gets its taint, next generation.
        (kdirs.checkpoint / "health.yaml").write_text("gpu-1: {health: Unhealthy, message: fan}\n")
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGUSR1)

        def tainted() -> bool:
            (s,) = published(kube_cluster).values()
            return bool(s["spec"]["devices"][1].get("taints")) and s["spec"]["pool"]["generation"] == 2

        until(tainted, "the health taint on the server")
        (s,) = published(kube_cluster).values()
        assert [t["key"] for t in s["spec"]["devices"][1]["taints"]] == [f"{DRIVER}/unhealthy"]

        # kube-apiserver restarts: the plugin keeps serving and uses the API again once it is back.
        kube_cluster.cp.restart_apiserver(down_for=1)
        after = create_allocated(kube_cluster, b.SIM_GPU.named("after-restart").request("gpu", count=None).allocated("gpu-6").obj())
        kubelet = proc.kubelet()
        try:
            assert kubelet.prepare(after).claims[uid_of(after)].error == ""
        finally:
            kubelet.close()
        (kdirs.checkpoint / "health.yaml").write_text("gpu-3: {health: Unhealthy, message: ecc}\n")
        proc.proc.send_signal(signal.SIGUSR1)

        def moved() -> bool:
            (s,) = published(kube_cluster).values()
            devices = s["spec"]["devices"]
            return bool(devices[3].get("taints")) and not devices[1].get("taints")

        until(moved, "the next health change published after the restart")
    finally:
        assert proc.terminate() == 0, proc.log()
    assert "publishing ResourceSlices through the Kubernetes API" in proc.log()
    assert "Traceback" not in proc.log()
