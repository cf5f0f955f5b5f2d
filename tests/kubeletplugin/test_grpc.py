"""The kubelet's view: registration handshake, prepare/unprepare over the real unix sockets."""

from __future__ import annotations

import json
import stat
import threading
import time
from collections.abc import Callable

import grpc
import pytest
import yaml

from dra_solver.kubeletplugin import protos
from tests import builders as b
from tests.kubeletplugin.conftest import Running
from tests.kubeletplugin.helpers import DRIVER, NODE, uid_of, write_claims

PARTITIONED = """
gpus:
  count: 2
  partitions:
    profiles:
      - {name: 1g.10gb, compute: 1, memorySlices: 1, count: 2}
nics:
  count: 1
health:
  pollSeconds: 0.1
simulate:
  failPrepare: [gpu-1-mig-1g10gb-1]
"""


def cdi_spec(running: Running, uid: str) -> dict:
    path = running.dirs.cdi / f"{DRIVER}-device_{uid}.json"
    return json.loads(path.read_text())


# --- registration ---------------------------------------------------------------------------


def test_registration_handshake(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    info = running.kubelet.registration.GetInfo(protos.registration.InfoRequest(), timeout=5)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(running.dirs.dra_socket)
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    status = running.plugin.server.registration
    assert status.registered is None
    running.kubelet.registration.NotifyRegistrationStatus(
        protos.registration.RegistrationStatus(plugin_registered=True), timeout=5
    )
    assert (status.registered, status.calls) == (True, 1)
    running.kubelet.registration.NotifyRegistrationStatus(
        protos.registration.RegistrationStatus(plugin_registered=False, error="version mismatch"),
        timeout=5,
    )
    assert (status.registered, status.error, status.calls) == (False, "version mismatch", 2)


def test_advertised_services_are_served(start_plugin: Callable[..., Running]) -> None:
    """Every supported_versions entry names a service that answers on the endpoint."""
    running = start_plugin()
    k = running.kubelet
    empty_v1 = k.v1.NodePrepareResources(protos.dra_v1.NodePrepareResourcesRequest(), timeout=5)
    empty_beta = k.v1beta1.NodePrepareResources(
        protos.dra_v1beta1.NodePrepareResourcesRequest(), timeout=5
    )
    assert len(empty_v1.claims) == len(empty_beta.claims) == 0
    for stub, pb in ((k.health_v1, protos.health_v1), (k.health_v1alpha1, protos.health_v1alpha1)):
        stream = stub.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=5)
        first = next(stream)
        assert len(first.devices) == 8
        stream.cancel()


def test_sockets_and_directories_are_private(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    d = running.dirs
    for sock in (d.dra_socket, d.registration_socket):
        st = sock.stat()
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600, sock
    for directory in (d.plugin, d.checkpoint):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    running.plugin.shutdown()
    assert not d.dra_socket.exists()
    assert not d.registration_socket.exists()


def test_stale_sockets_are_replaced(start_plugin: Callable[..., Running], dirs) -> None:
    dirs.plugin.mkdir(parents=True, mode=0o755)
    dirs.registry.mkdir(parents=True)
    dirs.dra_socket.write_text("stale")
    dirs.registration_socket.write_text("stale")
    running = start_plugin()
    assert stat.S_ISSOCK(dirs.dra_socket.stat().st_mode)
    assert stat.S_ISSOCK(dirs.registration_socket.stat().st_mode)
    # The plugin's own directory is tightened even when it already existed.
    assert stat.S_IMODE(dirs.plugin.stat().st_mode) == 0o700
    info = running.kubelet.registration.GetInfo(protos.registration.InfoRequest(), timeout=5)
    assert info.name == DRIVER


# --- prepare / unprepare ----------------------------------------------------------------------


def test_prepare_single_device(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    c = b.SIM_GPU.named("one").request("gpu", count=None).allocated("gpu-3").obj()
    write_claims(running.dirs.claims, c)
    resp = running.kubelet.prepare(c)
    entry = resp.claims[uid_of(c)]
    assert entry.error == ""
    assert len(entry.devices) == 1
    device = entry.devices[0]
    cdi_name = f"{uid_of(c)}-gpu-3"
    assert (list(device.request_names), device.pool_name, device.device_name) == (
        ["gpu"],
        NODE,
        "gpu-3",
    )
    assert list(device.cdi_device_ids) == [f"{DRIVER}/device={cdi_name}"]
    assert not device.HasField("share_id")
    spec = cdi_spec(running, uid_of(c))
    assert spec["cdiVersion"] == "0.8.0"
    assert spec["kind"] == f"{DRIVER}/device"
    assert [d["name"] for d in spec["devices"]] == [cdi_name]
    env = spec["devices"][0]["containerEdits"]["env"]
    assert any(e.startswith("DRA_SIM_GPU_3_UUID=GPU-") for e in env)
    assert "DRA_SIM_GPU_3_REQUESTS=gpu" in env


def test_prepare_multi_device_and_other_drivers(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    c = b.SIM_GPU.named("multi").request("big", count=None).request("gpus", count=None).request("net", count=None).allocated(("gpus", "gpu-0"), ("gpus", "gpu-1"), b.result("net", "eth0", driver="net.example.com", pool=b.NODE_1), ("big/large", "gpu-2")).obj()
    only_other = b.SIM_GPU.named("other").request("net", count=None).allocated(b.result("net", "eth1", driver="net.example.com", pool=b.NODE_1)).obj()
    write_claims(running.dirs.claims, c, only_other)
    resp = running.kubelet.prepare(c, only_other)
    devices = resp.claims[uid_of(c)].devices
    assert [(d.device_name, list(d.request_names)) for d in devices] == [
        ("gpu-0", ["gpus"]),
        ("gpu-1", ["gpus"]),
        ("gpu-2", ["big"]),
    ]
    assert [d["name"].rsplit("-gpu-", 1)[1] for d in cdi_spec(running, uid_of(c))["devices"]] == [
        "0",
        "1",
        "2",
    ]
    other = resp.claims[uid_of(only_other)]
    assert (other.error, len(other.devices)) == ("", 0)
    assert not (running.dirs.cdi / f"{DRIVER}-device_{uid_of(only_other)}.json").exists()


def test_prepare_is_idempotent_and_unprepare_unknown_succeeds(
    start_plugin: Callable[..., Running],
) -> None:
    running = start_plugin()
    c = b.SIM_GPU.named("idem").request("gpu", count=None).allocated("gpu-5").obj()
    write_claims(running.dirs.claims, c)
    first = running.kubelet.prepare(c)
    spec_before = cdi_spec(running, uid_of(c))
    # Even if the allocation visible in the source changed, a prepared claim answers from the
    # checkpoint: the kubelet must get the same devices every time.
    write_claims(running.dirs.claims, b.SIM_GPU.named("idem").request("gpu", count=None).allocated("gpu-6").obj())
    second = running.kubelet.prepare(c)
    assert second == first
    assert cdi_spec(running, uid_of(c)) == spec_before

    assert running.kubelet.unprepare(c).claims[uid_of(c)].error == ""
    assert not (running.dirs.cdi / f"{DRIVER}-device_{uid_of(c)}.json").exists()
    again = running.kubelet.unprepare(c)
    assert again.claims[uid_of(c)].error == ""
    never = b.SIM_GPU.named("never").request("gpu", count=None).allocated("gpu-0").obj()
    assert running.kubelet.unprepare(never).claims[uid_of(never)].error == ""


def test_errors_are_per_claim(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin(PARTITIONED)
    good = b.SIM_GPU.named("good").request("gpu", count=None).allocated("gpu-0").obj()
    unallocated = b.SIM_GPU.named("unallocated").request("req", count=None).obj()
    missing_device = b.SIM_GPU.named("missing").request("gpu", count=None).allocated("gpu-99").obj()
    foreign_pool = b.SIM_GPU.named("foreign").request("gpu", count=None).allocated(b.result("gpu", "gpu-1", driver=b.SIM_DRIVER, pool="node-2")).obj()
    failing = b.SIM_GPU.named("failing").request("a", count=None).request("b", count=None).allocated(("a", "gpu-1-mig-1g10gb-0"), ("b", "gpu-1-mig-1g10gb-1")).obj()
    replaced = b.SIM_GPU.named("replaced").request("gpu", count=None).allocated("gpu-1").obj()
    not_found = b.SIM_GPU.named("ghost").request("gpu", count=None).allocated("gpu-1").obj()
    on_disk = {**replaced, "metadata": {**replaced["metadata"], "uid": "another-uid"}}
    write_claims(
        running.dirs.claims, good, unallocated, missing_device, foreign_pool, failing, on_disk
    )

    resp = running.kubelet.prepare(
        good, unallocated, missing_device, foreign_pool, failing, replaced, not_found
    )
    errors = {
        name: resp.claims[uid_of(c)].error
        for name, c in (
            ("good", good),
            ("unallocated", unallocated),
            ("missing", missing_device),
            ("foreign", foreign_pool),
            ("failing", failing),
            ("replaced", replaced),
            ("ghost", not_found),
        )
    }
    assert errors["good"] == ""
    assert errors["unallocated"] == "claim default/unallocated not allocated"
    assert errors["missing"] == "claim default/missing: device node-1/gpu-99 does not exist"
    assert "not in this node's pool node-1" in errors["foreign"]
    assert "gpu-1-mig-1g10gb-1: simulated failure while preparing" in errors["failing"]
    assert "got replaced" in errors["replaced"]
    assert errors["ghost"].startswith("retrieve claim default/ghost: not found")
    # The failed claim was rolled back: its first partition is not left prepared.
    markers = running.plugin.profile.prepared_markers()
    assert set(markers) == {uid_of(good)}
    assert not (running.dirs.cdi / f"{DRIVER}-device_{uid_of(failing)}.json").exists()


def test_v1beta1_and_shared_devices(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin(PARTITIONED)
    claim_a = b.SIM_GPU.named("share-a").request("net", count=None).allocated(b.result("net", "nic-0", driver=b.SIM_DRIVER, pool=b.NODE_1, share_id="a1b2c3d4-0000-4000-8000-000000000001", consumed={"bandwidth": "25G"})).obj()
    claim_b = b.SIM_GPU.named("share-b").request("net", count=None).allocated(b.result("net", "nic-0", driver=b.SIM_DRIVER, pool=b.NODE_1, share_id="a1b2c3d4-0000-4000-8000-000000000002")).obj()
    write_claims(running.dirs.claims, claim_a, claim_b)
    resp_a = running.kubelet.prepare(claim_a)
    resp_b = running.kubelet.prepare(claim_b, beta=True)
    dev_a = resp_a.claims[uid_of(claim_a)].devices[0]
    assert dev_a.share_id == "a1b2c3d4-0000-4000-8000-000000000001"
    dev_b = resp_b.claims[uid_of(claim_b)].devices[0]
    assert dev_b.device_name == "nic-0"  # v1beta1 has no share_id field at all
    assert dev_a.cdi_device_ids != dev_b.cdi_device_ids
    env = cdi_spec(running, uid_of(claim_a))["devices"][0]["containerEdits"]["env"]
    assert "DRA_SIM_NIC_0_BANDWIDTH=25G" in env
    assert running.kubelet.unprepare(claim_b, beta=True).claims[uid_of(claim_b)].error == ""
    assert set(running.plugin.profile.prepared_markers()) == {uid_of(claim_a)}


def test_opaque_config_reaches_the_container(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    params = {
        "apiVersion": "sim.dra-solver.dev/v1",
        "kind": "DeviceConfig",
        "env": {"MODE": "fast"},
    }
    c = b.SIM_GPU.named("configured").request("gpu", count=None).request("other", count=None).allocated(("gpu", "gpu-0"), ("other", "gpu-1"), config=[
            {
                "source": "FromClaim",
                "requests": ["gpu"],
                "opaque": {"driver": DRIVER, "parameters": params},
            }
        ]).obj()
    bad = b.SIM_GPU.named("badconfig").request("gpu", count=None).allocated("gpu-2", config=[
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"kind": "Nope"}}}
        ]).obj()
    write_claims(running.dirs.claims, c, bad)
    resp = running.kubelet.prepare(c, bad)
    spec = cdi_spec(running, uid_of(c))
    assert "MODE=fast" in spec["devices"][0]["containerEdits"]["env"]
    assert "MODE=fast" not in spec["devices"][1]["containerEdits"]["env"]
    assert "unsupported parameters None/Nope" in resp.claims[uid_of(bad)].error


def test_concurrent_calls_are_serialised(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    claims = [b.SIM_GPU.named(f"c{i}").request("gpu", count=None).allocated(f"gpu-{i}").obj() for i in range(8)]
    write_claims(running.dirs.claims, *claims)
    errors: list[str] = []

    def worker(c: dict) -> None:
        for _ in range(3):
            r = running.kubelet.prepare(c).claims[uid_of(c)]
            errors.append(r.error)
            errors.append(running.kubelet.unprepare(c).claims[uid_of(c)].error)
        errors.append(running.kubelet.prepare(c).claims[uid_of(c)].error)

    threads = [threading.Thread(target=worker, args=(c,)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(errors) == {""}
    checkpoint = json.loads((running.dirs.checkpoint / "checkpoint.json").read_text())
    assert {c["state"] for c in checkpoint["claims"].values()} == {"PrepareCompleted"}
    assert len(checkpoint["claims"]) == 8


# --- health and publishing ---------------------------------------------------------------------


def _wait(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def _slices(running: Running) -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted(running.dirs.slices.glob("*.yaml"))]


def _tainted(running: Running) -> dict[str, list[dict]]:
    out = {}
    for s in _slices(running):
        for d in s["spec"].get("devices") or []:
            if d.get("taints"):
                out[d["name"]] = d["taints"]
    return out


def test_health_stream_and_taints(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin(PARTITIONED)
    _wait(lambda: running.dirs.slices.is_dir() and len(_slices(running)) == 2)
    first_generation = _slices(running)[0]["spec"]["pool"]["generation"]
    stream = running.kubelet.health_v1alpha1.NodeWatchResources(
        protos.health_v1alpha1.NodeWatchResourcesRequest(), timeout=30
    )
    snapshot = next(stream)
    assert {d.health for d in snapshot.devices} == {protos.health_v1alpha1.HEALTHY}
    assert {d.device.pool_name for d in snapshot.devices} == {NODE}

    health_file = running.dirs.checkpoint / "health.yaml"
    health_file.write_text(
        "gpu-1: {health: Unhealthy, severity: critical, message: 'XID 79'}\nnic-0: Unhealthy\n"
    )
    update = next(stream)
    by_name = {d.device.device_name: d for d in update.devices}
    assert by_name["gpu-1"].health == protos.health_v1alpha1.UNHEALTHY
    assert by_name["gpu-1"].message == "XID 79"
    assert (
        by_name["gpu-1-mig-1g10gb-0"].health == protos.health_v1alpha1.UNHEALTHY
    )  # follows its GPU
    assert by_name["gpu-0"].health == protos.health_v1alpha1.HEALTHY
    assert by_name["gpu-1"].last_updated_time > 0

    _wait(lambda: "gpu-1" in _tainted(running))
    tainted = _tainted(running)
    assert set(tainted) == {"gpu-1", "gpu-1-mig-1g10gb-0", "gpu-1-mig-1g10gb-1", "nic-0"}
    taint = tainted["gpu-1"][0]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        f"{DRIVER}/unhealthy",
        "critical",
        "NoExecute",
    )
    assert taint["timeAdded"].endswith("Z")
    assert tainted["nic-0"][0]["effect"] == "NoSchedule"
    assert _slices(running)[0]["spec"]["pool"]["generation"] > first_generation

    health_file.write_text("")
    final = next(stream)
    assert {d.health for d in final.devices} == {protos.health_v1alpha1.HEALTHY}
    _wait(lambda: not _tainted(running))
    stream.cancel()


def test_health_stream_ends_on_shutdown(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    stream = running.kubelet.health_v1.NodeWatchResources(
        protos.health_v1.NodeWatchResourcesRequest(), timeout=30
    )
    next(stream)
    running.plugin.shutdown()
    # The stream ends (instead of holding shutdown for the whole grace period).
    with pytest.raises((StopIteration, grpc.RpcError)):
        next(stream)
    assert not running.dirs.dra_socket.exists()
