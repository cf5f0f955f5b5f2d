"""The controllers and the real gRPC solver service against the real kube-apiserver.

Pods with claim templates get claims, the claims get allocated without any device used twice
and reserved for their pods, pods get bound; deleting a pod frees its devices (the real garbage
collector deletes its generated claims); a conflict on write is retried and a failed binding
rolled back; unschedulable pods say why and get scheduled when room appears; concurrent
scheduling never double-allocates.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from dra_solver.controllers import objects as ob
from dra_solver.service.kubeapi import client as kube
from tests import builders as b
from tests.controllers.conftest import Env, FaultyKube, wait_for


def test_pods_with_templates_get_claims_devices_and_nodes(env: Env) -> None:
    env.cluster(nodes=3, gpus=4)
    env.create(b.template("one-gpu", labels={"app": "train"}))
    env.create(b.template("two-gpus", count=2))
    checker = env.checker()
    manager = env.manager()
    names = [f"p{i}" for i in range(5)]
    for i, n in enumerate(names):
        env.create(b.pod(n, templates={"gpu": "two-gpus" if i % 2 else "one-gpu"}))
    wait_for(lambda: env.bound(*names), what="every pod bound")
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
        assert {r["pool"] for r in ob.allocated_devices(claim)} == {ob.pod_node(pod)}, "devices must be on the pod's node"
        conds = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        assert conds.get("PodScheduled") == "True"
    [first_claim] = env.claims_of(env.pod("p0") or {})
    assert first_claim["metadata"]["labels"] == {"app": "train"}
    env.settle()
    assert not checker.violations, checker.violations[:3]
    assert manager.metrics.claim_creates.labels(status="success", admin_access="false")._value.get() == 5
    assert manager.metrics.bindings._value.get() == 5
    assert len(env.events("Scheduled")) == 5
    # Bound by the binder pool, each write timed for the comparison's time split.
    sample = manager.metrics.registry.get_sample_value
    assert sample("dra_solver_scheduler_binding_queue_duration_seconds_count") == 5
    for operation in ("claim_status", "bind"):
        assert sample("dra_solver_scheduler_api_write_duration_seconds_count", {"operation": operation}) == 5
    # Generated claims are born with the delete-protection finalizer: no update adds it.
    assert sample("dra_solver_scheduler_api_write_duration_seconds_count", {"operation": "claim_finalizer"}) is None

    # Deleting a pod (forced: no kubelet will ever confirm it) frees its devices: the garbage
    # collector deletes the generated claim, the claim controller lifts the finalizer, and the
    # solver's inventory shows the devices free again.
    victim = env.pod("p1")
    assert victim is not None
    [victim_claim] = env.claims_of(victim)
    env.delete("Pod", "p1", force=True)
    wait_for(lambda: env.get("ResourceClaim", ob.name(victim_claim)) is None, what="the generated claim garbage-collected")
    assert len(env.allocated_devices()) == 5
    env.wait_solver_sees(lambda snap: len(snap.allocated_claims()) == 4)


def test_a_generated_claim_never_allocated_goes_with_its_pod(env: Env) -> None:
    # Born with the delete-protection finalizer, a generated claim whose pod is deleted before
    # anything allocated it must not stay Terminating: the claim controller lifts the
    # finalizer once the garbage collector has asked for the claim's deletion.
    env.cluster(nodes=1, gpus=1)
    env.create(b.template("two-gpus", count=2))
    env.manager()
    env.create(b.pod("big", templates={"gpu": "two-gpus"}))
    wait_for(lambda: env.events("FailedScheduling"), what="the pod found unschedulable")
    pod = env.pod("big")
    assert pod is not None
    [claim] = env.claims_of(pod)
    assert ob.allocation(claim) is None and ob.finalizers(claim) == [ob.DELETE_PROTECTION_FINALIZER]
    env.delete("Pod", "big", force=True)
    wait_for(lambda: env.get("ResourceClaim", ob.name(claim)) is None, what="the unallocated claim garbage-collected")


def test_a_pod_waiting_for_its_claim_to_be_created_waits_quietly(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    # Without the claim controller the claim never comes: the scheduler tries the pod and waits,
    # with neither a PodScheduled condition nor an INFO line per attempt (a burst of pods with
    # templates made thousands of them before their claims existed).
    env.cluster(nodes=1, gpus=1)
    env.create(b.template("one-gpu"))
    env.manager(enable=frozenset({"scheduler"}))
    with caplog.at_level(logging.DEBUG, logger="dra_solver.controllers.scheduler"):
        env.create(b.pod("early", templates={"gpu": "one-gpu"}))
        wait_for(lambda: any("early: unschedulable: waiting for resourceclaim" in r.getMessage() for r in caplog.records), what="an attempt")
    waits = [r for r in caplog.records if "early: unschedulable: waiting for resourceclaim" in r.getMessage()]
    assert {r.levelno for r in waits} == {logging.DEBUG}
    pod = env.pod("early")
    assert pod is not None and not [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]


def test_a_pod_no_free_device_blocks_gets_the_solvers_explanation(env: Env) -> None:
    # Free devices that no selector admits: not a count the verdict can state, so the
    # scheduler asks the solver's Explain for the candidate node.
    env.cluster(nodes=1, gpus=2)
    picky = b.claim("picky", cls=b.CLASS).request("gpu", selectors=[{"cel": {"expression": "device.driver == 'nothing.example.com'"}}])
    env.create(picky.template())
    env.manager()
    env.create(b.pod("p", templates={"gpu": "picky"}))

    def message() -> str:
        pod = env.pod("p") or {}
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return str(cond["message"])
        return ""

    text = wait_for(message, what="the pod unschedulable")
    assert text.startswith("0/1 nodes are available: 1 cannot allocate all claims."), text
    assert "node-a: cannot allocate: " in text and "free devices" not in text, text


def test_unschedulable_pod_explains_and_fits_once_devices_are_released(env: Env) -> None:
    env.cluster(nodes=1, gpus=2)
    env.create(b.template("one-gpu"))
    manager = env.manager()
    for n in ("a", "b", "c"):
        env.create(b.pod(n, templates={"gpu": "one-gpu"}))

    def two_bound_one_waiting() -> str:
        pods = [env.pod(n) for n in ("a", "b", "c")]
        bound = [p for p in pods if p and ob.pod_node(p)]
        waiting = [p for p in pods if p and not ob.pod_node(p)]
        if len(bound) != 2 or len(waiting) != 1:
            return ""
        for cond in waiting[0]["status"].get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond["message"].startswith("0/1 nodes"):
                return str(waiting[0]["metadata"]["name"])
        return ""

    waiting = wait_for(two_bound_one_waiting, what="two pods bound and one unschedulable")
    pod = env.pod(waiting)
    assert pod is not None
    [cond] = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("0/1 nodes are available: 1 "), cond["message"]
    # node-a has no free device: its verdict is the explanation (no Explain call for it).
    assert cond["message"].endswith("node-a: cannot allocate all claims: 0 free devices, at least 1 needed"), cond["message"]
    wait_for(lambda: env.events("FailedScheduling"), what="the FailedScheduling event (posted after the status)")
    wait_for(lambda: f"default/{waiting}" in manager.scheduler.unschedulable_pods(), what="the pod parked")
    [claim] = env.claims_of(pod)
    assert ob.allocation(claim) is None
    # Delete one bound pod: its claim is deallocated and garbage-collected, the devices come
    # back, and the parked pod is woken by that event (the periodic flush is an hour away).
    victim = next(n for n in ("a", "b", "c") if n != waiting)
    [victim_claim] = env.claims_of(env.pod(victim) or {})
    env.delete("Pod", victim, force=True)
    wait_for(lambda: env.get("ResourceClaim", ob.name(victim_claim)) is None, what="the victim's claim gone")
    wait_for(lambda: env.bound(waiting), what="the waiting pod bound")
    devices = env.allocated_devices()
    assert len(devices) == 2 and len(set(devices)) == 2
    assert manager.metrics.queue_incoming_pods.labels(event="UnschedulableTimeout", queue="active")._value.get() == 0


def test_conflict_on_claim_write_is_retried(env: Env) -> None:
    """Real 409s: just before the scheduler's first finalizer write and first status write,
    another client changes the claim, so the resourceVersion the scheduler sends is stale.
    The claim is the user's own: one generated from a template already has the finalizer."""
    env.cluster(nodes=1, gpus=2)
    env.create(b.ONE_GPU.named("mine").obj())
    faulty = env.client("conflicts", faulty=True)
    assert isinstance(faulty, FaultyKube)

    writes: list[str] = []

    def someone_else_writes(args: tuple[Any, ...]) -> None:
        writes.append(ob.name(args[0]))  # a new value each time: a no-op patch would not change the resourceVersion
        env.patch("ResourceClaim", ob.name(args[0]), {"metadata": {"labels": {"touched": str(len(writes))}}})

    faulty.inject("update_claim", someone_else_writes)
    faulty.inject("update_claim_status", someone_else_writes)
    env.manager("claims", enable=frozenset({"claim"}))
    manager = env.manager("scheduler", enable=frozenset({"scheduler"}), kube_api=faulty)
    env.create(b.pod("p", claims={"gpu": "mine"}))
    wait_for(lambda: env.bound("p"), what="the pod bound")
    assert faulty.pending_faults("update_claim") == faulty.pending_faults("update_claim_status") == 0
    assert manager.metrics.claim_write_conflicts._value.get() >= 2
    assert manager.metrics.rollbacks._value.get() == 0
    [claim] = env.claims_of(env.pod("p") or {})
    assert ob.allocation(claim) is not None and ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(claim)
    assert claim["metadata"]["labels"] == {"touched": "2"}, "the other writer's changes are kept"


def test_failed_binding_rolls_back_and_retries(env: Env) -> None:
    env.cluster(nodes=1, gpus=2)
    env.create(b.template("one-gpu"))
    faulty = env.client("binding", faulty=True)
    assert isinstance(faulty, FaultyKube)
    faulty.fail("bind_pod", kube.Transient("bind pod default/p: the server is currently unable to handle the request", status=503), times=2)
    env.manager("claims", enable=frozenset({"claim"}))
    manager = env.manager("scheduler", enable=frozenset({"scheduler"}), kube_api=faulty)
    env.create(b.pod("p", templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound("p"), what="the pod bound")
    assert faulty.calls["bind_pod"] == 3
    assert manager.metrics.rollbacks._value.get() == 2
    pod = env.pod("p")
    assert pod is not None
    [claim] = env.claims_of(pod)
    assert ob.allocation(claim) is not None and ob.is_reserved_for_pod(pod, claim)
    assert env.solver is not None
    env.wait_solver_sees(lambda snap: len(snap.allocated_claims()) == 1)
    wait_for(lambda: len(env.solver.engine.reservations) == 0, what="reservations released")  # type: ignore[union-attr]


def test_a_refused_claim_status_write_is_retried_with_backoff_not_at_once(env: Env) -> None:
    """A Forbidden status update rolls the attempt back; the attempt's own claim writes and
    that rollback come back as claim events, which must not run the pod again before its
    backoff (they once did: a retry every few milliseconds for as long as the 403 lasted)."""
    env.cluster(nodes=1, gpus=2)
    env.create(b.template("one-gpu"))
    faulty = env.client("forbidden", faulty=True)
    assert isinstance(faulty, FaultyKube)
    forbidden = kube.Invalid("update claim default/p-gpu status: forbidden", status=403, reason="Forbidden")
    faulty.fail("update_claim_status", forbidden, times=2)
    env.manager("claims", enable=frozenset({"claim"}))
    manager = env.manager("scheduler", enable=frozenset({"scheduler"}), kube_api=faulty, backoff_initial=1.0, backoff_max=1.0)
    env.create(b.pod("p", templates={"gpu": "one-gpu"}))
    wait_for(lambda: manager.metrics.rollbacks._value.get() == 1, what="the first attempt rolled back")
    time.sleep(0.5)  # well inside the 1 s backoff: the claim events of that attempt have arrived
    assert faulty.calls["update_claim_status"] == 1, "retried before its backoff"
    wait_for(lambda: env.bound("p"), what="the pod bound once the writes are allowed")
    assert faulty.calls["update_claim_status"] == 3
    assert manager.metrics.rollbacks._value.get() == 2


def test_binding_stored_but_its_answer_lost_is_not_rolled_back(env: Env) -> None:
    """The binding reaches the API server but the answer never comes back (a timeout): the
    scheduler must see the pod bound and keep its claims, not roll them back."""
    env.cluster(nodes=1, gpus=2)
    env.create(b.template("one-gpu"))
    faulty = env.client("binding", faulty=True)
    assert isinstance(faulty, FaultyKube)

    def bind_then_lose_the_answer(args: tuple[Any, ...]) -> None:
        ns, name, binding = args
        env.kc.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
        raise kube.Transient(f"bind pod {ns}/{name}: ReadTimeoutError: read timed out")

    faulty.inject("bind_pod", bind_then_lose_the_answer)
    env.manager("claims", enable=frozenset({"claim"}))
    manager = env.manager("scheduler", enable=frozenset({"scheduler"}), kube_api=faulty)
    env.create(b.pod("p", templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound("p"), what="the pod bound")
    env.settle()
    assert faulty.calls["bind_pod"] == 1
    assert manager.metrics.rollbacks._value.get() == 0
    pod = env.pod("p")
    assert pod is not None
    [claim] = env.claims_of(pod)
    assert ob.allocation(claim) is not None and ob.is_reserved_for_pod(pod, claim)


@pytest.mark.parametrize("in_flight", [False, True], ids=["reservations", "in-flight-claims"])
def test_concurrent_scheduling_never_double_allocates(env: Env, in_flight: bool) -> None:
    env.cluster(nodes=4, gpus=4)
    env.create(b.template("one-gpu"))
    checker = env.checker()
    # 24 pods for 16 devices, all created before the controllers start so that the
    # scheduler's 8 workers race for the same free devices.
    names = [f"w{i:02d}" for i in range(24)]
    for n in names:
        env.create(b.pod(n, templates={"gpu": "one-gpu"}))
    manager = env.manager(scheduler_workers=8, claim_workers=4, solver_in_flight=in_flight)
    wait_for(lambda: len(env.bound_pods()) == 16 and len(manager.scheduler.unschedulable_pods()) == 8, timeout=60,
             what="16 pods bound, 8 parked")
    assert env.solver is not None
    # --solver-in-flight: the service was sent (and decoded) the claims being written.
    assert bool(env.solver.engine._flights._entries) == in_flight  # type: ignore[union-attr]
    devices = env.allocated_devices()
    assert len(devices) == len(set(devices)) == 16
    # Free 6 devices: the 8 parked pods race for them; exactly 6 more get placed.
    gone = sorted(env.bound_pods())[::3][:6]
    for n in gone:
        env.delete("Pod", n, force=True)
    remaining = [n for n in names if n not in gone]
    wait_for(lambda: sum(1 for n in env.bound_pods() if n in remaining) == 16, timeout=60, what="6 more pods bound")
    env.settle()
    devices = env.allocated_devices()
    assert len(devices) == len(set(devices)) == 16
    assert not checker.violations, checker.violations[:3]
    assert checker.events > 40
    for n in remaining:
        pod = env.pod(n)
        assert pod is not None
        if ob.pod_node(pod):
            [claim] = env.claims_of(pod)
            assert ob.allocation(claim) is not None and ob.is_reserved_for_pod(pod, claim)
            assert {r["pool"] for r in ob.allocated_devices(claim)} == {ob.pod_node(pod)}
    env.wait_solver_sees(lambda snap: len(snap.allocated_claims()) == 16)
    wait_for(lambda: len(env.solver.engine.reservations) == 0, what="reservations released")  # type: ignore[union-attr]


def test_pod_with_existing_user_claim_and_no_devices(env: Env) -> None:
    env.cluster(nodes=2, gpus=1, cpu="1")
    env.create(b.ONE_GPU.named("shared").obj())
    env.manager()
    env.create(b.pod("first", claims={"gpu": "shared"}, cpu="600m"))
    wait_for(lambda: env.bound("first"), what="first bound")
    first = env.pod("first")
    assert first is not None
    # A second pod sharing the claim must land on the same node (the claim's node selector),
    # but that node has no CPU left: unschedulable, not a second allocation.
    env.create(b.pod("second", claims={"gpu": "shared"}, cpu="600m"))
    wait_for(lambda: any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                         for c in (env.pod("second") or {}).get("status", {}).get("conditions") or []), what="second unschedulable")
    assert not ob.pod_node(env.pod("second") or {})
    # A pod without claims goes to the emptier node.
    env.create(b.pod("plain", cpu="100m"))
    wait_for(lambda: env.bound("plain"), what="plain bound")
    assert ob.pod_node(env.pod("plain") or {}) != ob.pod_node(first)
    claim = env.get("ResourceClaim", "shared")
    assert claim is not None and [r["name"] for r in claim["status"]["reservedFor"]] == ["first"]


def test_scheduler_restart_after_writing_claims_binds_where_they_were_allocated(env: Env) -> None:
    # The state a scheduler leaves when it dies between writing the claim and binding the
    # pod: the claim is allocated on node-b and reserved for the pod, the pod is not bound.
    env.cluster(nodes=3, gpus=2)
    pod = env.create(b.pod("resumed", claims={"gpu": "mine"}))
    claim = env.create(b.ONE_GPU.named("mine").finalizer().obj())
    done = b.ONE_GPU.named("mine").finalizer().allocated("gpu-1", node="node-b").reserved_for(pod).obj()
    claim["status"] = done["status"]
    env.kc.request("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/mine/status", claim)
    manager = env.manager()
    wait_for(lambda: env.bound("resumed"), what="the pod bound")
    assert ob.pod_node(env.pod("resumed") or {}) == "node-b"
    current = env.get("ResourceClaim", "mine")
    assert current is not None and [r["device"] for r in ob.allocated_devices(current)] == ["gpu-1"]
    env.settle()
    assert manager.metrics.solver_latency.labels(rpc="Schedule", code="OK")._sum.get() == 0, "nothing to solve"


def test_metrics_use_upstream_names(env_no_solver: Env) -> None:
    from prometheus_client import generate_latest

    manager = env_no_solver.manager(start=False, enable=frozenset({"claim", "eviction"}))
    text = generate_latest(manager.metrics.registry).decode()
    for name in (
        "resourceclaim_controller_creates_total",
        "resourceclaim_controller_resource_claims",
        "device_taint_eviction_controller_pod_deletions_total",
        "device_taint_eviction_controller_pod_deletion_duration_seconds_bucket",
        "dra_solver_scheduler_schedule_attempts_total",
        "dra_solver_scheduler_solver_request_duration_seconds",
        "dra_solver_scheduler_claim_write_conflicts_total",
        "scheduler_queue_incoming_pods_total",
        "dra_solver_leader",
        "dra_solver_events_dropped_total",
    ):
        assert f"# TYPE {name.removesuffix('_total').removesuffix('_bucket')}" in text, name


def test_binding_on_the_worker_when_no_binders(env: Env) -> None:
    """``--scheduler-binders 0``: the binding cycle runs on the scheduling worker."""
    env.cluster(nodes=1, gpus=2)
    env.create(b.template("one-gpu"))
    checker = env.checker()
    manager = env.manager(scheduler_binders=0)
    env.create(b.pod("w0", templates={"gpu": "one-gpu"}))
    env.create(b.pod("w1", templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound("w0", "w1"), what="both pods bound")
    devices = env.allocated_devices()
    assert len(devices) == len(set(devices)) == 2
    assert manager.metrics.registry.get_sample_value("dra_solver_scheduler_binding_queue_duration_seconds_count") == 0
    env.settle()
    assert not checker.violations, checker.violations[:3]
