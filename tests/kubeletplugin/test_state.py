"""DeviceState and its neighbours without gRPC: purity, locking, recovery; claim sources; taints."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from dra_solver.kubeletplugin import discovery, simconfig
from dra_solver.kubeletplugin.cdi import CdiHandler
from dra_solver.kubeletplugin.checkpoint import CheckpointStore, ClaimEntry, ClaimState
from dra_solver.kubeletplugin.claims import ClaimLookupError, DirectoryClaimSource
from dra_solver.kubeletplugin.health import HealthMonitor, format_time, taint_for
from dra_solver.kubeletplugin.state import (
    ClaimRef,
    DeviceState,
    FaultInjection,
    PrepareError,
    compute_device_config,
)
from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from tests import builders as b
from tests.kubeletplugin.helpers import DRIVER, NODE, uid_of, write_claims


def make_state(root: Path, *, lock_timeout: float = 60.0) -> DeviceState:
    config = simconfig.parse_config({"gpus": {"count": 4}})
    profile = discovery.SimulatedProfile(
        config, node=NODE, state_dir=root / "sim", health_file=None
    )
    return DeviceState(
        driver=DRIVER,
        node=NODE,
        profile=profile,
        cdi=CdiHandler(root / "cdi", driver=DRIVER, cdi_class="device"),
        store=CheckpointStore(root),
        lock_path=root / "plugin.lock",
        lock_timeout=lock_timeout,
    )


def decoded(obj: dict) -> o.ResourceClaim:
    c = decode_object(obj)
    assert isinstance(c, o.ResourceClaim)
    return c


def test_compute_device_config_is_pure(tmp_path: Path) -> None:
    state = make_state(tmp_path)
    c = decoded(b.SIM_GPU.named("p").request("a", count=None).request("b", count=None).request("c", count=None).allocated(("a", "gpu-0"), ("b", "gpu-0"), ("c/sub", "gpu-1")).obj())
    before = copy.deepcopy(c.model_dump())
    inventory = state.profile.enumerate_devices().by_name()
    one = compute_device_config(c, driver=DRIVER, node=NODE, devices=inventory, cdi=state.cdi)
    two = compute_device_config(c, driver=DRIVER, node=NODE, devices=inventory, cdi=state.cdi)
    assert one == two
    assert c.model_dump() == before
    assert list(tmp_path.iterdir()) == []  # nothing written
    # Two results for one device become one device serving both requests.
    assert [(p.device, p.request_names) for p in one] == [("gpu-0", ("a", "b")), ("gpu-1", ("c",))]


def test_two_processes_worth_of_state_serialise_on_the_file_lock(tmp_path: Path) -> None:
    first, second = make_state(tmp_path), make_state(tmp_path, lock_timeout=0.2)
    c = decoded(b.SIM_GPU.named("locked").request("gpu", count=None).allocated("gpu-0").obj())
    import filelock

    holder = filelock.FileLock(str(tmp_path / "plugin.lock"))
    holder.acquire()
    try:
        blocked = second.prepare([c])[uid_of(c.model_dump(by_alias=True))]
        assert blocked.error.startswith("prepare: The file lock")
    finally:
        holder.release()
    assert first.prepare([c])[c.metadata.uid or ""].error == ""
    # The second instance sees the first one's work: the file is the source of truth.
    assert (
        second.prepare([c])[c.metadata.uid or ""].devices
        == first.prepare([c])[c.metadata.uid or ""].devices
    )


def test_recovery_undoes_started_claims_and_orphans(tmp_path: Path) -> None:
    state = make_state(tmp_path)
    c = decoded(b.SIM_GPU.named("half").request("gpu", count=None).allocated("gpu-2").obj())
    devices = compute_device_config(
        c,
        driver=DRIVER,
        node=NODE,
        devices=state.profile.enumerate_devices().by_name(),
        cdi=state.cdi,
    )
    uid = c.metadata.uid or ""
    state.store.write(
        state.store.read().with_claim(
            ClaimEntry(uid, "default", "half", ClaimState.PREPARE_STARTED, devices)
        )
    )
    state.profile.prepare_device(uid, "gpu-2", share_id=None)
    state.cdi.create_claim_spec_file(uid, "default/half", devices)
    state.cdi.create_claim_spec_file("orphan-uid", "default/orphan", devices)
    (tmp_path / "cdi" / "other-vendor.json").write_text("{}")  # not ours: untouched

    assert state.recover() == [uid]
    assert state.store.read().claims == {}
    assert state.cdi.claim_spec_files() == {}
    assert state.profile.prepared_markers() == {}  # type: ignore[attr-defined]
    assert (tmp_path / "cdi" / "other-vendor.json").exists()


def test_skip_rollback_leaves_things_behind(tmp_path: Path) -> None:
    state = make_state(tmp_path)
    state.faults = FaultInjection(skip_rollback=True)
    state.profile.config = simconfig.parse_config(
        {"gpus": {"count": 4}, "simulate": {"failPrepare": ["gpu-1"]}}
    )  # type: ignore[attr-defined]
    c = decoded(b.SIM_GPU.named("fails").request("a", count=None).request("b", count=None).allocated(("a", "gpu-0"), ("b", "gpu-1")).obj())
    assert "simulated failure" in state.prepare([c])[c.metadata.uid or ""].error
    assert state.profile.prepared_markers() == {c.metadata.uid: {"gpu-0"}}  # type: ignore[attr-defined]
    assert state.recover() == []


def test_unprepare_reports_backend_errors_and_keeps_the_record(tmp_path: Path) -> None:
    state = make_state(tmp_path)
    c = decoded(b.SIM_GPU.named("stuck").request("gpu", count=None).allocated("gpu-3").obj())
    uid = c.metadata.uid or ""
    assert state.prepare([c])[uid].error == ""

    def broken(*args: object, **kwargs: object) -> None:
        raise discovery.DeviceBackendError("device gpu-3: busy")

    state.profile.unprepare_device = broken  # type: ignore[method-assign]
    errors = state.unprepare([ClaimRef("default", "stuck", uid)])
    assert errors[uid] == "claim default/stuck: unprepare: device gpu-3: busy"
    assert state.store.read().claims[uid].state == ClaimState.UNPREPARE_STARTED


def test_fault_injection_rejects_unknown_steps() -> None:
    with pytest.raises(ValueError, match="unknown step"):
        FaultInjection.from_env({"DRA_SOLVER_KUBELET_PLUGIN_CRASH_AT": "prepare-nope"})
    f = FaultInjection.from_env(
        {"DRA_SOLVER_KUBELET_PLUGIN_CRASH_AT": "prepare-cdi, unprepare-cdi"}
    )
    assert f.crash_at == {"prepare-cdi", "unprepare-cdi"} and not f.skip_rollback


def test_prepare_error_messages_name_the_claim(tmp_path: Path) -> None:
    state = make_state(tmp_path)
    c = decoded(
        b.SIM_GPU.named("bad").request("gpu", count=None).allocated("gpu-0", config=[{"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": "text"}}]).obj()
    )
    with pytest.raises(
        PrepareError,
        match=r"claim default/bad, config #0 \(FromClass\): opaque parameters must be an object",
    ):
        compute_device_config(
            c,
            driver=DRIVER,
            node=NODE,
            devices=state.profile.enumerate_devices().by_name(),
            cdi=state.cdi,
        )


# --- the directory claim source -------------------------------------------------------------------


def test_directory_claim_source(tmp_path: Path) -> None:
    claim_a = b.SIM_GPU.named("a", ns="ns1").request("gpu", count=None).allocated("gpu-0").obj()
    claim_b = b.SIM_GPU.named("b", ns="ns2").request("gpu", count=None).allocated("gpu-1").obj()
    write_claims(tmp_path, claim_a, file="a.yaml")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "list.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [claim_b]})
    )
    (tmp_path / "slices.yaml").write_text(
        yaml.safe_dump(
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "x"}}
        )
    )
    (tmp_path / "broken.yaml").write_text("{{{")
    source = DirectoryClaimSource(tmp_path)
    assert source.get("ns1", "a", uid_of(claim_a)).name == "a"
    assert source.get("ns2", "b", uid_of(claim_b)).namespace == "ns2"
    with pytest.raises(ClaimLookupError, match=f"retrieve claim ns1/b: not found in {tmp_path}"):
        source.get("ns1", "b", uid_of(claim_b))
    # A stale copy next to the current one: the requested UID wins.
    old = copy.deepcopy(claim_a)
    old["metadata"]["uid"] = "old-uid"
    write_claims(tmp_path, old, file="z-old.yaml")
    assert source.get("ns1", "a", uid_of(claim_a)).metadata.uid == uid_of(claim_a)
    assert source.get("ns1", "a", "old-uid").metadata.uid == "old-uid"
    with pytest.raises(ClaimLookupError, match="got replaced"):
        source.get("ns1", "a", "third-uid")
    assert DirectoryClaimSource(tmp_path / "missing").__class__ is DirectoryClaimSource
    with pytest.raises(ClaimLookupError, match="not found"):
        DirectoryClaimSource(tmp_path / "missing").get("ns", "x", "u")


def test_directory_claim_source_sees_new_files(tmp_path: Path) -> None:
    source = DirectoryClaimSource(tmp_path)
    c = b.SIM_GPU.named("late").request("gpu", count=None).allocated("gpu-0").obj()
    with pytest.raises(ClaimLookupError):
        source.get("default", "late", uid_of(c))
    write_claims(tmp_path, c, file="late.yaml")
    assert source.get("default", "late", uid_of(c)).allocated


# --- health -> taints ---------------------------------------------------------------------------


def test_taint_for() -> None:
    from dra_solver.kubeletplugin.health import DeviceHealthState

    assert (
        taint_for(
            DeviceHealthState("Healthy", "", "", 5),
            driver=DRIVER,
            no_execute_severities=("critical",),
        )
        is None
    )
    assert (
        taint_for(
            DeviceHealthState("Unknown", "", "", 5),
            driver=DRIVER,
            no_execute_severities=("critical",),
        )
        is None
    )
    soft = taint_for(
        DeviceHealthState("Unhealthy", "warning", "x", 0),
        driver=DRIVER,
        no_execute_severities=("critical",),
    )
    assert soft == {
        "key": f"{DRIVER}/unhealthy",
        "effect": "NoSchedule",
        "value": "warning",
        "timeAdded": "1970-01-01T00:00:00Z",
    }
    hard = taint_for(
        DeviceHealthState("Unhealthy", "Critical", "", 0),
        driver=DRIVER,
        no_execute_severities=("critical",),
    )
    assert hard is not None and hard["effect"] == "NoExecute"
    odd = taint_for(
        DeviceHealthState("Unhealthy", "not a label value!", "", 0),
        driver=DRIVER,
        no_execute_severities=(),
    )
    assert odd is not None and "value" not in odd
    assert format_time(1767225600) == "2026-01-01T00:00:00Z"


def test_monitor_versions_and_listeners(tmp_path: Path) -> None:
    config = simconfig.parse_config({"gpus": {"count": 2}})
    health = tmp_path / "h.yaml"
    profile = discovery.SimulatedProfile(
        config, node=NODE, state_dir=tmp_path / "s", health_file=health
    )
    clock = [1000.0]
    monitor = HealthMonitor(
        profile, driver=DRIVER, node=NODE, config=config.health, clock=lambda: clock[0]
    )
    calls: list[int] = []
    monitor.add_listener(lambda: calls.append(1))
    assert monitor.poll() is True and monitor.poll() is False
    version, _ = monitor.snapshot()
    health.write_text("gpu-0: Unhealthy\n")
    clock[0] = 2000.0
    woke: list[int] = []
    waiter = threading.Thread(target=lambda: woke.append(monitor.wait_for_change(version, 10)))
    waiter.start()
    time.sleep(0.05)
    assert monitor.poll() is True
    waiter.join(5)
    assert woke == [version + 1] and len(calls) == 2
    assert monitor.taints()["gpu-0"][0]["timeAdded"] == format_time(2000)
    health.write_text("gpu-0: [not, valid]\n")
    assert monitor.poll() is False  # a broken file keeps the last known state
    assert "gpu-0" in monitor.taints()
