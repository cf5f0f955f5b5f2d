"""Binding conditions and DeviceTaintRule status, the pure parts, plus the feature gates and the
PreBind waiter (controllers/bindingconditions.py, rulestatus.py, features.py, prebind.py). The
same behaviour on the real API server next to upstream's: tests/controllers/test_parity.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dra_solver.controllers import bindingconditions as bc
from dra_solver.controllers import features, rulestatus
from dra_solver.controllers.prebind import BindingWaiter
from tests import builders as b

Obj = dict[str, Any]
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def claim(*, conditions: dict[str, str] | None = None, allocated_at: str | None = "2027-01-15T07:59:00Z", bc_on: bool = True) -> Obj:
    c = b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").obj()
    result = c["status"]["allocation"]["devices"]["results"][0]
    if bc_on:
        result["bindingConditions"] = ["attached"]
        result["bindingFailureConditions"] = ["failed"]
    if allocated_at:
        c["status"]["allocation"]["allocationTimestamp"] = allocated_at
    if conditions is not None:
        c["status"]["devices"] = [{"driver": b.DRIVER, "pool": "node-a", "device": "gpu-0", "conditions": [
            {"type": t, "status": v, "reason": "R", "message": "m"} for t, v in conditions.items()]}]
    return c


@pytest.mark.parametrize(("obj", "kind"), [
    (claim(bc_on=False), bc.READY),
    (claim(), bc.PENDING),
    (claim(conditions={"attached": "False"}), bc.PENDING),
    (claim(conditions={"attached": "True"}), bc.READY),
    (claim(conditions={"attached": "True", "failed": "True"}), bc.FAILED),
    (claim(conditions={"failed": "True"}), bc.FAILED),
    (claim(allocated_at="2027-01-15T07:40:00Z"), bc.TIMEOUT),
    (claim(allocated_at=None), bc.PENDING),
    (b.ONE_GPU.named("c").obj(), bc.GONE),
    (None, bc.GONE),
], ids=["no conditions", "no device status", "not yet true", "ready", "failed beats ready", "failed", "timed out",
        "no timestamp: no timeout", "deallocated", "deleted"])
def test_claim_state(obj: Obj | None, kind: str) -> None:
    assert bc.claim_state(obj, now=NOW, timeout=600).kind == kind


def test_pod_state_and_messages() -> None:
    failed = bc.claim_state(claim(conditions={"failed": "True"}), now=NOW, timeout=600)
    assert failed.message.startswith('device binding failed: claim=c, reason=R, message="m"')
    assert bc.pod_state([claim(conditions={"attached": "True"}), claim()], now=NOW, timeout=600).kind == bc.PENDING
    assert bc.pod_state([claim(), claim(conditions={"failed": "True"})], now=NOW, timeout=600).kind == bc.FAILED
    assert bc.pod_state([], now=NOW, timeout=600).kind == bc.READY
    assert bc.has_binding_conditions(claim()) and not bc.has_binding_conditions(claim(bc_on=False))


def test_feature_gates() -> None:
    assert features.parse("") == features.KubeFeatures()
    off = features.parse("DRADeviceBindingConditions=false, DRAExtendedResource=true")
    assert not off.device_binding and off.solver_gates() == "DeviceBindingAndStatus=false"
    assert features.KubeFeatures().solver_gates() == ""
    for text, error in [
        ("DRAExtendedResource=false", "cannot set feature gate DRAExtendedResource to false, feature is locked to true"),
        ("DRAResourceClaimDeviceStatus=false", "locked to true"),
        ("Nope=true", "unrecognized feature gate: Nope"),
        ("DRADeviceBindingConditions=maybe", "invalid value of DRADeviceBindingConditions=maybe"),
        ("DRADeviceBindingConditions", 'missing "="'),
    ]:
        with pytest.raises(features.FeatureGateError, match=error):
            features.parse(text)


def test_waiter_hands_decided_pods_to_their_callbacks() -> None:
    claims: dict[str, Obj | None] = {"ns/a": claim(), "ns/b": claim()}
    clock = [0.0]
    waiter = BindingWaiter(claims.get, timeout=600, clock=lambda: clock[0], wall=lambda: NOW)
    got: dict[str, str] = {}
    done = threading.Event()

    def record(key: str) -> Any:
        def on_done(state: bc.BindingState) -> None:
            got[key] = state.kind
            if len(got) == 2:
                done.set()
        return on_done

    waiter.start()
    try:
        waiter.add("pod-a", ["ns/a"], record("pod-a"))
        waiter.add("pod-b", ["ns/b"], record("pod-b"))
        assert waiter.waiting() == ["pod-a", "pod-b"]
        claims["ns/a"] = claim(conditions={"attached": "True"})
        clock[0] = 601.0  # pod-b's own wait has run out
        waiter.claims_changed()
        assert done.wait(10)
    finally:
        waiter.stop()
    assert got == {"pod-a": bc.READY, "pod-b": bc.TIMEOUT}
    assert waiter.waiting() == []


def rule(effect: str = "NoExecute", *, generation: int = 1, condition: Obj | None = None) -> Obj:
    r = b.taint_rule("r", pool="node-a", effect=effect)
    r["metadata"].update({"uid": "rule-uid", "generation": generation})
    if condition is not None:
        r["status"] = {"conditions": [condition]}
    return r


@pytest.mark.parametrize(("obj", "counts", "status", "reason", "message"), [
    (rule(), rulestatus.Counts(2, 1, 1), "True", "PodsPendingEviction",
     "2 pods need to be evicted in 1 namespace. 1 pod evicted since starting the controller."),
    (rule(), rulestatus.Counts(1, 2), "True", "PodsPendingEviction", "1 pod needs to be evicted in 2 different namespaces."),
    (rule(), rulestatus.Counts(evicted_pods=3), "False", "Completed", "3 pods evicted since starting the controller."),
    (rule(), rulestatus.Counts(), "False", "NotStarted", ""),
    (rule("NoSchedule"), rulestatus.Counts(), "False", "OtherEffect", "Eviction only happens for the NoExecute effect."),
    (rule("None"), rulestatus.Counts(1, 1, 0, 2, 1), "False", "NoEffect",
     "2 published devices selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace if the effect was "
     "NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update."),
], ids=["pending", "pending many namespaces", "completed", "not started", "other effect", "dry run"])
def test_rule_condition(obj: Obj, counts: rulestatus.Counts, status: str, reason: str, message: str) -> None:
    got = rulestatus.condition(obj, counts)
    assert got == {"type": "EvictionInProgress", "status": status, "reason": reason, "message": message, "observedGeneration": 1}


def test_rule_status_pacing_and_counts() -> None:
    stamp = "2027-01-15T07:59:55Z"  # five seconds before NOW
    written = {"type": "EvictionInProgress", "status": "True", "reason": "PodsPendingEviction", "message": "m",
               "observedGeneration": 1, "lastTransitionTime": stamp}
    assert rulestatus.wait_before_update(rule(condition=written), now=NOW, period=10) == 5
    assert rulestatus.wait_before_update(rule(generation=2, condition=written), now=NOW, period=10) == 0
    assert rulestatus.wait_before_update(rule(), now=NOW, period=10) == 0
    assert not rulestatus.changed(rule(condition=written), {k: v for k, v in written.items() if k != "lastTransitionTime"})
    assert rulestatus.changed(rule(condition=written), {**written, "message": "other"})
    body = rulestatus.apply_body(rule(), {"type": "EvictionInProgress"}, now=NOW, api_version="resource.k8s.io/v1")
    assert body["metadata"] == {"name": "r", "uid": "rule-uid"}
    assert body["status"]["conditions"][0]["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    # One pod on the tainted pool: would be evicted; the dry run also counts the devices.
    victim = b.pod("v", uid="v-uid", claims={"gpu": "c"}, node="node-a")
    allocated = b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").reserved_for(victim).obj()
    slices = [b.gpu_slice("node-a", count=2), b.gpu_slice("node-b", count=1)]
    counts = rulestatus.count(rule("None"), pods=[victim], claims=b.by_key(allocated), slices=slices, rules=[], evicted=0)
    assert counts == rulestatus.Counts(1, 1, 0, 2, 1)
    assert rulestatus.count(rule(), pods=[victim], claims=b.by_key(allocated), slices=slices, rules=[], evicted=4) == rulestatus.Counts(1, 1, 4)
    gone = b.pod("v", uid="v-uid", claims={"gpu": "c"}, node="node-a", deleting=True)
    assert rulestatus.count(rule(), pods=[gone], claims=b.by_key(allocated), slices=slices, rules=[], evicted=1) == rulestatus.Counts(evicted_pods=1)


def test_with_the_gate_off_devices_with_binding_conditions_are_not_allocated(env: Any) -> None:
    """``--feature-gates DRADeviceBindingConditions=false`` reaches the solver: a device that
    needs binding conditions is never chosen, and a plain one is taken without any wait."""
    from tests.controllers.conftest import wait_for
    from tests.controllers.parity import binding_slice, device_class, slot_claim

    env.create(device_class())
    env.node("node-a")
    env.create(binding_slice("fabric", ["fpga-0"], all_nodes=True, conditions=["attached"], failure=["failed"]))
    env.create(slot_claim("fabric-only", 0))
    env.create(b.ONE_GPU.named("any").obj())
    env.manager(features=features.parse("DRADeviceBindingConditions=false"))
    env.create(b.pod("needs-fabric", claims={"dev": "fabric-only"}))
    wait_for(lambda: any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                         for c in (env.pod("needs-fabric") or {}).get("status", {}).get("conditions") or []),
             what="the pod unschedulable")
    assert (env.get("ResourceClaim", "fabric-only") or {}).get("status", {}).get("allocation") is None
    env.create(b.gpu_slice("node-a", count=1))
    env.create(b.pod("plain", claims={"dev": "any"}))
    wait_for(lambda: env.bound("plain"), what="the plain pod bound")
    assert [r["device"] for r in (env.get("ResourceClaim", "any") or {})["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
    assert not env.events("BindingConditionsPending")
