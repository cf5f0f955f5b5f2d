"""The assume step both scheduling paths share (:meth:`Scheduler.assume` / ``forget``): the
last checks against the scheduler's own view, and the bookkeeping of assumed pods and
allocations in flight, for one pod or a PodGroup's pods in one attempt.

The scheduler here has the real cluster cache, never started: the cache's objects are put in
as the scheduler's own writes are (``Store.assume``), and no request leaves the process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling as logic
from dra_solver.controllers.cluster import Cluster
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.objects import Obj
from dra_solver.controllers.scheduler import AttemptFailed, PlacedPod, Scheduler, Solver
from dra_solver.service.kubeapi import client as kube
from tests import builders as b

GROUP = "podgroup:default/g"
NODES = {"node-a": b.node("node-a", cpu="2"), "node-b": b.node("node-b", cpu="2")}


@pytest.fixture
def sched() -> Iterator[Scheduler]:
    api = kube.Kube(kube.api_client(host="http://127.0.0.1:1"))  # never called
    metrics = ControllerMetrics()
    yield Scheduler(api, Cluster(api), metrics, Solver(None, metrics))


def _pod(name: str) -> Obj:
    return b.pod(name, uid=f"uid-{name}", cpu="1")


def _on(pod: Obj, node: str) -> PlacedPod:
    return PlacedPod(pod, node, logic.Gathered())


def _gpu(claim: str, device: str) -> dict[str, Obj]:
    allocation = ob.allocation(b.ONE_GPU.named(claim).allocated(device, node="node-a").obj())
    assert allocation is not None
    return {f"default/{claim}": allocation}


def _taken(device: str, claim: str, holder: str) -> str:
    return "^" + re.escape(f"device gpu.example.com/node-a/{device} of claim default/{claim} is already allocated to claim default/{holder}") + "$"


def _cpu(s: Scheduler, node: str) -> object:
    return s.used_resources().get(node, logic.Resources()).cpu


def test_a_groups_pods_are_counted_one_after_another_and_all_or_none_assumed(sched: Scheduler) -> None:
    p0, p1, p2 = _pod("p0"), _pod("p1"), _pod("p2")
    with pytest.raises(AttemptFailed, match=r"^node node-a no longer fits pod default/p2: "):
        sched.assume(GROUP, [_on(p0, "node-a"), _on(p1, "node-a"), _on(p2, "node-a")], {}, NODES)
    assert sched.used_resources() == {}
    sched.assume(GROUP, [_on(p0, "node-a"), _on(p1, "node-a"), _on(p2, "node-b")], {}, NODES)
    assert (_cpu(sched, "node-a"), _cpu(sched, "node-b")) == (2, 1)
    # A pod's own attempt, on the node the group filled: the message names no pod.
    with pytest.raises(AttemptFailed, match=r"^node node-a no longer fits: "):
        sched.assume("default/q", [_on(_pod("q"), "node-a")], {}, NODES)
    sched.forget(GROUP, pods=["default/p1"])  # p0 and p2 bound, p1 given up
    assert (_cpu(sched, "node-a"), _cpu(sched, "node-b")) == (1, 1)


def test_a_device_in_flight_for_another_attempt_or_allocated_in_the_cache_is_refused(sched: Scheduler) -> None:
    sched.assume(GROUP, [_on(_pod("p0"), "node-a")], _gpu("group-gpu", "gpu-0"), NODES)
    with pytest.raises(AttemptFailed, match=_taken("gpu-0", "mine", "group-gpu")):
        sched.assume("default/q", [_on(_pod("q"), "node-b")], _gpu("mine", "gpu-0"), NODES)
    assert _cpu(sched, "node-b") == 0
    # What the same key has in flight is no conflict: a new attempt replaces it (under another
    # claim name here, as a pod's extended-resource claim gets on every attempt).
    sched.assume(GROUP, [_on(_pod("p0"), "node-a")], _gpu("group-gpu-2", "gpu-0"), NODES)
    sched.claims.store.assume(b.ONE_GPU.named("held").rv("1").allocated("gpu-1", node="node-a").obj())
    with pytest.raises(AttemptFailed, match=_taken("gpu-1", "mine", "held")):
        sched.assume("default/q", [_on(_pod("q"), "node-b")], _gpu("mine", "gpu-1"), NODES)
    with pytest.raises(AttemptFailed, match=_taken("gpu-0", "mine", "group-gpu-2")):
        sched.assume("default/q", [_on(_pod("q"), "node-b")], _gpu("mine", "gpu-0"), NODES)
    sched.forget(GROUP)  # written: no longer in flight
    sched.assume("default/q", [_on(_pod("q"), "node-b")], _gpu("mine", "gpu-0"), NODES)
    assert _cpu(sched, "node-b") == 1


def test_settled_claims_linger_in_flight_and_unbound_pods_are_let_go(sched: Scheduler) -> None:
    """Written claims are sent to solver replicas until their watches have surely shown them;
    a pod whose bind failed is no longer counted on its node."""
    allocations = {**_gpu("p0-gpu", "gpu-0"), **_gpu("p1-gpu", "gpu-1")}
    sched.assume(GROUP, [_on(_pod("p0"), "node-a"), _on(_pod("p1"), "node-b")], allocations, NODES)
    for key, allocation in allocations.items():  # as the claim writes leave the cache
        claim = b.ONE_GPU.named(ob.split_key(key)[1]).rv("2").obj()
        claim["status"] = {"allocation": allocation}
        sched.claims.store.assume(claim)
    sched.settle(GROUP, allocations, unbound=["default/p1"])
    assert (_cpu(sched, "node-a"), _cpu(sched, "node-b")) == (1, 0)
    sent = [json.loads(c) for c in sched._in_flight_claims()]
    assert [(ob.name(c), ob.allocation(c)) for c in sent] == [("p0-gpu", allocations["default/p0-gpu"]), ("p1-gpu", allocations["default/p1-gpu"])]
    later = sched.clock() + 3600
    sched.clock = lambda: later  # long after: every replica's watch has shown them
    assert sched._in_flight_claims() == []


def test_an_assumed_pod_stays_counted_until_its_bind_shows_and_then_counts_once(sched: Scheduler) -> None:
    """The running totals: an update of the pod that does not bind it (a status write) leaves
    it counted where we assumed it; its bind replaces the assumed entry (still once); a later
    ``forget`` of a pod the API shows bound takes nothing away."""
    p0 = _pod("p0")
    sched.assume("default/p0", [_on(p0, "node-a")], {}, NODES)
    assert _cpu(sched, "node-a") == 1
    conditioned = {**p0, "status": {**p0["status"], "conditions": [{"type": "PodScheduled", "status": "False"}]}}
    sched._on_pod(p0, conditioned)
    assert _cpu(sched, "node-a") == 1
    bound = {**conditioned, "spec": {**conditioned["spec"], "nodeName": "node-a"}}
    sched._on_pod(conditioned, bound)
    assert _cpu(sched, "node-a") == 1
    sched.forget("default/p0", pods=["default/p0"])
    assert _cpu(sched, "node-a") == 1
    sched._on_pod(bound, None)  # deleted
    assert sched.used_resources() == {}
    # Assumed, then given up before any event: nothing left behind.
    sched.assume("default/p1", [_on(_pod("p1"), "node-b")], {}, NODES)
    sched.forget("default/p1", pods=["default/p1"])
    assert sched.used_resources() == {}


def test_attempts_wait_while_the_binder_is_max_binding_cycles_behind(sched: Scheduler) -> None:
    """Scheduling does not run ahead of binding by more than ``max_binding`` cycles (each holds
    a solver reservation): the next attempt waits for a cycle to end, or for stop."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    sched._binder = ThreadPoolExecutor(1)
    sched.max_binding = 2
    with sched._lock:
        sched._binding = 2
    passed = threading.Event()

    def attempt() -> None:
        sched._wait_for_binder()
        passed.set()

    waiter = threading.Thread(target=attempt)
    waiter.start()
    assert not passed.wait(0.3)
    with sched._lock:
        sched._binding_ended()
    assert passed.wait(5)
    waiter.join(5)
    # At the limit again: stop releases the waiting attempt.
    with sched._lock:
        sched._binding = 2
    passed.clear()
    waiter = threading.Thread(target=attempt)
    waiter.start()
    assert not passed.wait(0.3)
    sched._stop.set()
    with sched._binding_room:
        sched._binding_room.notify_all()
    assert passed.wait(5)
    waiter.join(5)
    sched._binder.shutdown()
