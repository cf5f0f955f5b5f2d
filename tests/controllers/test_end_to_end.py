"""The controllers against the fake API server and the real gRPC solver service.

Pods with claim templates get claims, the claims get allocated without any device used twice,
pods get bound, devices come back when pods go; a conflict or a failure on write is retried or
rolled back; unschedulable pods say why and get scheduled when room appears; NoExecute taints
evict; concurrent scheduling never double-allocates.
"""

from __future__ import annotations

import time

from controllers import objects as ob
from tests.controllers import builders as b
from tests.controllers.conftest import DoubleAllocationChecker, Env


def test_pods_with_templates_get_claims_devices_and_nodes(env: Env) -> None:
    env.cluster(nodes=3, gpus=4)
    env.fake.create(b.template("one-gpu", labels={"app": "train"}))
    env.fake.create(b.template("two-gpus", count=2))
    checker = DoubleAllocationChecker(env.fake)
    env.fake.on_write.append(checker)
    manager = env.manager()
    names = [f"p{i}" for i in range(5)]
    for i, n in enumerate(names):
        env.fake.create(b.pod(n, templates={"gpu": "two-gpus" if i % 2 else "one-gpu"}))
    env.fake.wait_for(lambda: env.bound(*names), timeout=20)
    devices = env.allocated_devices()
    assert len(devices) == 1 + 2 + 1 + 2 + 1
    assert len(set(devices)) == len(devices), "a device was allocated twice"
    for n in names:
        pod = env.pod(n)
        assert pod is not None
        [claim] = env.claims_of(pod)
        meta = claim["metadata"]
        assert meta["name"].startswith(f"{n}-gpu-")
        assert meta["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
        assert meta["ownerReferences"][0]["uid"] == ob.uid(pod) and meta["ownerReferences"][0]["controller"] is True
        assert ob.DELETE_PROTECTION_FINALIZER in meta["finalizers"]
        assert ob.is_reserved_for_pod(pod, claim)
        node_of_devices = {r["pool"] for r in ob.allocated_devices(claim)}
        assert node_of_devices == {ob.pod_node(pod)}, "devices must be on the pod's node"
        conds = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        assert conds.get("PodScheduled") == "True"
    assert env.fake.get("resourceclaims", env.claims_of(env.pod("p0"))[0]["metadata"]["name"], b.NS)["metadata"]["labels"] == {"app": "train"}  # type: ignore[arg-type, index]
    assert not checker.violations
    env.settle()
    metrics = manager.metrics
    assert metrics.claim_creates.labels(status="success", admin_access="false")._value.get() == 5
    assert metrics.bindings._value.get() == 5
    events = {e["reason"] for e in env.fake.list("events")}
    assert "Scheduled" in events


def test_unschedulable_pod_explains_and_fits_once_devices_are_released(env: Env) -> None:
    env.cluster(nodes=1, gpus=2)
    env.fake.create(b.template("one-gpu"))
    manager = env.manager()
    for n in ("a", "b", "c"):
        env.fake.create(b.pod(n, templates={"gpu": "one-gpu"}))

    def two_bound_one_waiting() -> str | None:
        pods = [env.pod(n) for n in ("a", "b", "c")]
        bound = [p for p in pods if p and ob.pod_node(p)]
        waiting = [p for p in pods if p and not ob.pod_node(p)]
        if len(bound) != 2 or len(waiting) != 1:
            return None
        for cond in waiting[0]["status"].get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond["message"].startswith("0/1 nodes"):
                return str(waiting[0]["metadata"]["name"])
        return None

    waiting = env.fake.wait_for(two_bound_one_waiting, timeout=20)
    pod = env.pod(waiting)
    assert pod is not None
    [cond] = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("0/1 nodes are available: 1 "), cond["message"]
    assert "node-a:" in cond["message"], "the solver's explanation for the candidate node is included"
    assert any(e["reason"] == "FailedScheduling" for e in env.fake.list("events"))
    env.fake.wait_for(lambda: f"default/{waiting}" in manager.scheduler.unschedulable_pods(), timeout=10)
    # The waiting pod's claim was created but not allocated.
    [claim] = env.claims_of(pod)
    assert ob.allocation(claim) is None
    # Delete one bound pod: its claim is deallocated and garbage-collected, the devices come back.
    victim = next(n for n in ("a", "b", "c") if n != waiting)
    [victim_claim] = env.claims_of(env.pod(victim))  # type: ignore[arg-type]
    env.fake.delete("pods", victim, b.NS)
    env.fake.wait_for(lambda: env.fake.get("resourceclaims", victim_claim["metadata"]["name"], b.NS) is None, timeout=20)
    env.fake.wait_for(lambda: env.bound(waiting), timeout=20)
    devices = env.allocated_devices()
    assert len(devices) == 2 and len(set(devices)) == 2


def test_conflict_on_claim_write_is_retried(env: Env) -> None:
    env.cluster(nodes=1, gpus=2)
    env.fake.create(b.template("one-gpu"))
    env.fake.inject("PUT", r"/resourceclaims/[^/]+/status$", 409, times=1)
    env.fake.inject("PUT", r"/resourceclaims/[^/]+$", 409, times=1)
    manager = env.manager(enable=frozenset({"claim", "scheduler"}))
    env.fake.create(b.pod("p", templates={"gpu": "one-gpu"}))
    env.fake.wait_for(lambda: env.bound("p"), timeout=20)
    assert manager.metrics.claim_write_conflicts._value.get() >= 2
    assert manager.metrics.rollbacks._value.get() == 0
    [claim] = env.claims_of(env.pod("p"))  # type: ignore[arg-type]
    assert ob.allocation(claim) is not None and ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(claim)


def test_failed_binding_rolls_back_and_retries(env: Env) -> None:
    env.cluster(nodes=1, gpus=2)
    env.fake.create(b.template("one-gpu"))
    bind_fault = env.fake.inject("POST", r"/pods/p/binding$", 500, times=2)
    seen: list[bool] = []

    def watch_claims(plural: str, old: dict | None, new: dict | None) -> None:  # type: ignore[type-arg]
        if plural == "resourceclaims" and new is not None:
            seen.append(ob.allocation(new) is not None)

    env.fake.on_write.append(watch_claims)
    manager = env.manager(enable=frozenset({"claim", "scheduler"}))
    env.fake.create(b.pod("p", templates={"gpu": "one-gpu"}))
    env.fake.wait_for(lambda: env.bound("p"), timeout=20)
    assert bind_fault.hits == 2
    assert manager.metrics.rollbacks._value.get() == 2
    # allocated -> rolled back (unallocated) -> allocated again ... -> allocated at the end
    assert True in seen and seen.index(True) < len(seen) - 1 and False in seen[seen.index(True):]
    [claim] = env.claims_of(env.pod("p"))  # type: ignore[arg-type]
    assert ob.allocation(claim) is not None and ob.is_reserved_for_pod(env.pod("p"), claim)  # type: ignore[arg-type]
    env.wait_solver_sees(lambda snap: len(snap.allocated_claims()) == 1)
    assert len(env.solver.engine.reservations) == 0  # type: ignore[union-attr]


def test_concurrent_scheduling_never_double_allocates(env: Env) -> None:
    env.cluster(nodes=4, gpus=4)
    env.fake.create(b.template("one-gpu"))
    checker = DoubleAllocationChecker(env.fake)
    env.fake.on_write.append(checker)
    # 24 pods for 16 devices, all created before the controllers start so that the
    # scheduler's 8 workers race for the same free devices.
    names = [f"w{i:02d}" for i in range(24)]
    for n in names:
        env.fake.create(b.pod(n, templates={"gpu": "one-gpu"}))
    manager = env.manager(scheduler_workers=8, claim_workers=4)

    def bound() -> list[str]:
        return [n for n in names if ob.pod_node(env.pod(n) or {})]

    env.fake.wait_for(lambda: len(bound()) == 16 and len(manager.scheduler.unschedulable_pods()) == 8, timeout=40)
    devices = env.allocated_devices()
    assert len(devices) == len(set(devices)) == 16
    assert not checker.violations, checker.violations[:3]
    # Free 6 devices: the 8 waiting pods race for them; exactly 6 more get placed.
    gone = bound()[::3][:6]
    for n in gone:
        env.fake.delete("pods", n, b.NS)
    remaining = [n for n in names if n not in gone]
    env.fake.wait_for(lambda: sum(1 for n in remaining if env.bound(n)) == 16, timeout=40)
    env.settle()
    devices = env.allocated_devices()
    assert len(devices) == len(set(devices)) == 16
    assert not checker.violations, checker.violations[:3]
    assert checker.writes > 40
    for n in remaining:
        pod = env.pod(n)
        assert pod is not None
        if ob.pod_node(pod):
            [claim] = env.claims_of(pod)
            assert ob.allocation(claim) is not None and ob.is_reserved_for_pod(pod, claim)
            assert {r["pool"] for r in ob.allocated_devices(claim)} == {ob.pod_node(pod)}
    # Every reservation held by the solver during the race has been released.
    env.wait_solver_sees(lambda snap: len(snap.allocated_claims()) == 16)
    env.fake.wait_for(lambda: len(env.solver.engine.reservations) == 0, timeout=10)  # type: ignore[union-attr]


def _bound_pod_device(env: Env, name: str) -> tuple[dict, str, str]:  # type: ignore[type-arg]
    pod = env.pod(name)
    assert pod is not None
    [claim] = env.claims_of(pod)
    [result] = ob.allocated_devices(claim)
    return pod, str(result["pool"]), str(result["device"])


def test_noexecute_taint_evicts_unless_tolerated(env: Env) -> None:
    env.cluster(nodes=1, gpus=3)
    env.fake.create(b.template("plain"))
    env.fake.create(b.template("tolerant", tolerations=[b.toleration()]))
    disrupted: list[str] = []

    def record(plural: str, old: dict | None, new: dict | None) -> None:  # type: ignore[type-arg]
        conditions = (new or {}).get("status", {}).get("conditions") or []
        if plural == "pods" and any(c.get("type") == "DisruptionTarget" and c.get("reason") == "DeletionByDeviceTaintManager" for c in conditions):
            disrupted.append(new["metadata"]["name"])  # type: ignore[index]

    env.fake.on_write.append(record)
    manager = env.manager()
    env.fake.create(b.pod("victim", templates={"gpu": "plain"}))
    env.fake.create(b.pod("survivor", templates={"gpu": "tolerant"}))
    env.fake.wait_for(lambda: env.bound("victim", "survivor"), timeout=20)
    _, pool, victim_device = _bound_pod_device(env, "victim")
    _, _, survivor_device = _bound_pod_device(env, "survivor")
    # Taint both devices (the driver marks them broken).
    slice_ = env.fake.get("resourceslices", f"{pool}-gpus")
    assert slice_ is not None
    now = ob.format_time(time.time())
    for d in slice_["spec"]["devices"]:
        if d["name"] in (victim_device, survivor_device):
            d["taints"] = [b.taint(time_added=now)]
    env.fake.put(slice_)
    env.fake.wait_for(lambda: env.pod("victim") is None, timeout=20)
    assert "victim" in disrupted, "the DisruptionTarget condition is added before deleting"
    env.settle()
    assert env.pod("survivor") is not None
    assert manager.metrics.pod_deletions._value.get() == 1
    assert any(e["reason"] == "DeviceTaintManagerEviction" for e in env.fake.list("events"))


def test_taint_rule_evicts_after_toleration_seconds_and_removal_cancels(env: Env) -> None:
    env.cluster(nodes=1, gpus=2)
    env.fake.create(b.template("patient", tolerations=[b.toleration(seconds=2)]))
    env.fake.create(b.template("slow", tolerations=[b.toleration(seconds=30)]))
    manager = env.manager()
    env.fake.create(b.pod("quick", templates={"gpu": "patient"}))
    env.fake.create(b.pod("slow", templates={"gpu": "slow"}))
    env.fake.wait_for(lambda: env.bound("quick", "slow"), timeout=20)
    start = time.monotonic()
    env.fake.create(b.taint_rule("node-a-down", pool="node-a", time_added=ob.format_time(time.time())))
    env.fake.wait_for(lambda: env.pod("quick") is None, timeout=20)
    # timeAdded has second precision, so the eviction comes 1 to 2 s after the rule.
    assert time.monotonic() - start >= 0.5, "tolerationSeconds delays the eviction"
    assert env.pod("slow") is not None
    # Removing the rule before the slow pod's 30 s are up cancels its eviction.
    env.fake.delete("devicetaintrules", "node-a-down")
    env.settle()
    eviction = manager.controllers["eviction"]
    assert eviction.queue.pending() == 0 or env.pod("slow") is not None
    assert env.pod("slow") is not None
    assert manager.metrics.pod_deletions._value.get() == 1


def test_pod_with_existing_user_claim_and_no_devices(env: Env) -> None:
    env.cluster(nodes=2, gpus=1, cpu="1")
    env.fake.create(b.claim("shared", count=1))
    env.manager()
    env.fake.create(b.pod("first", claims={"gpu": "shared"}, cpu="600m"))
    env.fake.wait_for(lambda: env.bound("first"), timeout=20)
    first = env.pod("first")
    assert first is not None
    # A second pod sharing the claim must land on the same node (the claim's node selector),
    # but that node has no CPU left: unschedulable, not a second allocation.
    env.fake.create(b.pod("second", claims={"gpu": "shared"}, cpu="600m"))
    env.fake.wait_for(lambda: any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                                  for c in (env.pod("second") or {}).get("status", {}).get("conditions") or []), timeout=20)
    assert not ob.pod_node(env.pod("second") or {})
    # A pod without claims goes to the emptier node.
    env.fake.create(b.pod("plain", cpu="100m"))
    env.fake.wait_for(lambda: env.bound("plain"), timeout=20)
    assert ob.pod_node(env.pod("plain") or {}) != ob.pod_node(first)
    claim = env.fake.get("resourceclaims", "shared", b.NS)
    assert claim is not None and [r["name"] for r in claim["status"]["reservedFor"]] == ["first"]


def test_scheduler_restart_after_writing_claims_binds_where_they_were_allocated(env: Env) -> None:
    # The state a scheduler leaves when it dies between writing the claim and binding the
    # pod: the claim is allocated on node-b and reserved for the pod, the pod is not bound.
    env.cluster(nodes=3, gpus=2)
    pod = env.fake.create(b.pod("resumed", claims={"gpu": "mine"}))
    claim = b.claim("mine", devices=["gpu-1"], node="node-b", reserved=[pod], finalizer=True)
    env.fake.create(claim)
    manager = env.manager()
    env.fake.wait_for(lambda: env.bound("resumed"), timeout=20)
    assert ob.pod_node(env.pod("resumed") or {}) == "node-b"
    current = env.fake.get("resourceclaims", "mine", b.NS)
    assert current is not None and [r["device"] for r in ob.allocated_devices(current)] == ["gpu-1"]
    env.settle()
    assert manager.metrics.solver_latency.labels(rpc="Schedule", code="OK")._sum.get() == 0, "nothing to solve"


def test_metrics_use_upstream_names(env: Env) -> None:
    from prometheus_client import generate_latest

    manager = env.manager(start=False)
    text = generate_latest(manager.metrics.registry).decode()
    for name in (
        "resourceclaim_controller_creates_total",
        "resourceclaim_controller_resource_claims",
        "device_taint_eviction_controller_pod_deletions_total",
        "device_taint_eviction_controller_pod_deletion_duration_seconds_bucket",
        "dra_solver_scheduler_schedule_attempts_total",
        "dra_solver_scheduler_solver_request_duration_seconds",
        "dra_solver_scheduler_claim_write_conflicts_total",
        "dra_solver_leader",
    ):
        assert f"# TYPE {name.removesuffix('_total').removesuffix('_bucket')}" in text, name
