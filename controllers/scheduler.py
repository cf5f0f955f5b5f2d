"""The scheduler for pods with ``spec.schedulerName: dra-solver``: the shell around
:mod:`controllers.scheduling` and the solver service.

One attempt for a pod (a work-queue key; several workers run attempts for different pods):

1. gather the pod's claims from the cache; if one is missing, being deleted or not yet
   created from its template, mark the pod unschedulable with that reason and wait for the
   claim's event;
2. filter nodes on everything but devices (selector, affinity, taints, CPU/memory/pods, the
   node selectors of claims allocated earlier);
3. ask the service to ``Schedule`` the unallocated claims over those candidates with
   ``reserve`` set, so no concurrent caller gets the same devices until the API shows them;
4. under a lock: check the answer against our own view (claims allocated, allocations other
   workers have in flight, the node's free CPU/memory now) and assume the pod on the node;
5. write each claim: the delete-protection finalizer, then allocation and ``reservedFor``
   together in one status update, each preconditioned on the resourceVersion read and
   retried from a fresh read on conflict (first creating the special claim for extended
   resources served by DRA, :mod:`controllers.extended`, and recording it in the pod status);
6. when a device has binding conditions, wait for them off the worker
   (:mod:`controllers.prebind`), then
7. bind the pod through the ``pods/binding`` subresource.

Steps 5 to 7 are the binding cycle: as kube-scheduler does, a worker hands the assumed pod to
a pool of binder threads and goes back to the queue, so the API writes of many pods overlap and
never hold up the next pod's choice (the assumption keeps the pod's node resources and devices
counted meanwhile).

Any failure after step 3 rolls back: claims written lose the pod's reservation (and the
allocation, when we made it and nobody else uses the claim), the service's reservation is
released, the pod is un-assumed, and the attempt is retried with backoff. A pod no node fits
gets ``PodScheduled=False`` (reason Unschedulable) with the solver's explanation, and is tried
again when the cluster changes (slices, nodes, claims freed, pods gone) or periodically. A
change that arrives while the attempt runs is not lost: :mod:`controllers.schedqueue` records it
and the pod is retried at once instead of being parked.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Protocol

import grpc

from dra_solver.controllers import bindingconditions as bc
from dra_solver.controllers import extended
from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling as logic
from dra_solver.controllers.cluster import (
    CLAIM_DEVICE_INDEX,
    CLAIM_OWNER_INDEX,
    POD_CLAIMS_INDEX,
    Cluster,
)
from dra_solver.controllers.features import KubeFeatures
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.objects import Obj
from dra_solver.controllers.prebind import BindingWaiter
from dra_solver.controllers.runtime import Events, Requeue, Retry, Runner, new_queue
from dra_solver.controllers.schedqueue import Move, PendingPods
from dra_solver.model import is_too_few_free
from dra_solver.service.api import kube, pb


class GroupPlacer(Protocol):
    """Gang scheduling (:class:`controllers.gangscheduler.GangScheduler`, which attaches
    itself): which queue key schedules a pod, and one attempt for a PodGroup key."""

    def group_of(self, pod: Obj) -> str: ...

    def attempt(self, key: str) -> str: ...

log = logging.getLogger(__name__)

PERMANENT_CODES = frozenset({"INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"})
IN_FLIGHT_LINGER = 10.0
"""Seconds a claim we wrote is still sent as in flight after our watch shows it allocated: a
solver replica's watch may be behind ours (the replica counts it once either way)."""
"""gRPC codes that mean "these claims cannot be placed as they are": report, do not hammer."""


class SolverError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    """The chosen node; empty when no node fits."""
    allocations: Mapping[str, Obj]
    """Claim key -> status.allocation for the claims that needed one."""
    reservation: str = ""
    reason: str = ""
    verdicts: Mapping[str, str] | None = None
    """Node -> why not, for the nodes the service evaluated and rejected."""
    extended: extended.ExtendedClaim | None = None
    """The special claim for the pod's DRA-served extended resources on ``node`` (its
    allocation is in ``allocations`` under the claim's temporary key)."""


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A pod on the node an attempt chose, as :meth:`Scheduler.assume` checks and counts it."""

    pod: Obj
    node: str
    gathered: logic.Gathered
    """The pod's claims (those allocated before bring their node selectors)."""
    dra_backed: frozenset[str] = frozenset()
    """The extended resources DRA serves for the pod on ``node`` (not counted against the
    node's allocatable)."""
    requests: logic.Resources | None = None
    """What the pod takes from its node, when the attempt read it already (None: read here)."""


class Solver:
    """The calls the scheduler makes to the solver service, timed and with errors mapped."""

    def __init__(self, client: Any, metrics: ControllerMetrics, *, timeout: float = 10.0, reservation_ttl: float = 60.0,
                 policy: str = "", feature_gates: str = "") -> None:
        self.client = client
        self.metrics = metrics
        self.timeout = timeout
        self.reservation_ttl = reservation_ttl
        self.policy = policy
        self.feature_gates = feature_gates
        """The solver's gates for what it may allocate (devices with binding conditions)."""

    def _timed(self, rpc: str, call: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        code = "OK"
        try:
            return call()
        except grpc.RpcError as err:
            status = err.code() if hasattr(err, "code") else None
            code = status.name if status is not None else "UNKNOWN"
            details = err.details() if hasattr(err, "details") else str(err)
            raise SolverError(code, str(details or "")) from err
        finally:
            self.metrics.solver_latency.labels(rpc=rpc, code=code).observe(time.perf_counter() - start)

    def schedule(self, claims: Sequence[Obj], candidates: Sequence[str], *, pod: str, in_flight: Sequence[Obj | bytes] | None = None) -> Placement:
        """``in_flight``: every allocation we decided that the API may not show yet, so any
        solver replica answers the same and a replica restart loses nothing. The replica still
        holds what it answers (``in_flight_complete`` False): our workers schedule concurrently,
        and two calls on one replica must not be handed the same device (docs/replicas.md)."""
        extra: dict[str, Any] = {} if in_flight is None else {"in_flight": list(in_flight), "in_flight_complete": False}
        resp = self._timed(
            "Schedule",
            lambda: self.client.schedule(list(claims), list(candidates), policy=self.policy, reserve=True,
                                         ttl=self.reservation_ttl, pod=pod, timeout=self.timeout,
                                         feature_gates=self.feature_gates, chosen_verdict_only=True,
                                         validate="ignore", **extra),  # the API server validated these claims
        )
        verdicts = {v.node: v.reason for v in resp.nodes if v.verdict == pb.VERDICT_UNSCHEDULABLE}
        if not resp.node:
            # "No node" is only a verdict when every candidate was looked at: a solver that ran
            # out of time on a busy machine has not shown the pod does not fit, and parking
            # the pod on that answer would leave it waiting for an event that never comes.
            unseen = len(set(candidates) - {v.node for v in resp.nodes if v.verdict != pb.VERDICT_NOT_EVALUATED})
            if unseen:
                raise SolverError("DEADLINE_EXCEEDED", f"{unseen} of {len(set(candidates))} candidate nodes not evaluated in time: {resp.reason}")
            return Placement("", {}, reason=resp.reason, verdicts=verdicts)
        allocations: dict[str, Obj] = {}
        for claim, answer in zip(claims, resp.claims, strict=True):
            allocations[ob.key(claim)] = json.loads(answer.allocation)
        return Placement(resp.node, allocations, resp.reservation.id, verdicts=verdicts)

    def schedule_group(self, *, pod_group: str, pods: Sequence[pb.GroupPod], shared_claims: Sequence[bytes], min_count: int,
                       topology_key: str, rooms: Sequence[pb.NodeRoom]) -> pb.ScheduleGroupResponse:
        """``ScheduleGroup`` for a gang, reserving what it answers, with the same policy, gates
        and reservation TTL as :meth:`schedule`."""
        request = pb.ScheduleGroupRequest(
            pod_group=pod_group, pods=pods, shared_claims=shared_claims, min_count=min_count, topology_key=topology_key,
            nodes=rooms,
            options=pb.SolveOptions(policy=self.policy, feature_gates=self.feature_gates, validate="ignore"),
            reserve=True, reservation_ttl_seconds=self.reservation_ttl,
        )
        response: pb.ScheduleGroupResponse = self._timed(
            "ScheduleGroup", lambda: self.client.schedule_group(request, timeout=self.timeout))
        return response

    def unreserve(self, reservation: str) -> None:
        if not reservation:
            return
        try:
            self._timed("Unreserve", lambda: self.client.unreserve(reservation, timeout=self.timeout))
        except SolverError as err:
            if err.code != "NOT_FOUND":  # already gone: the API showed the allocation, or it expired
                log.warning("unreserve %s: %s", reservation, err)

    def explain(self, claims: Sequence[Obj], node: str) -> str:
        resp = self._timed("Explain", lambda: self.client.explain(list(claims), node, timeout=self.timeout))
        return str(resp.summary or "")


class AttemptFailed(Retry):
    """A scheduling attempt failed after the solver answered; rolled back, retry with backoff."""


@dataclass
class Written:
    """What one attempt wrote on one claim, so that :meth:`Scheduler.undo` takes back exactly
    that and nothing another attempt or consumer did."""

    key: str
    allocated: bool = False
    """We wrote the allocation (so a rollback clears it)."""
    finalizer: bool = False
    """We added the finalizer."""
    reserved: bool = False
    """We added the pod to reservedFor."""
    created: bool = False
    """We created the claim (the extended-resource claim): a rollback deletes it."""


class Scheduler:
    name = "scheduler"

    def __init__(
        self,
        kube_api: kube.Kube,
        cluster: Cluster,
        metrics: ControllerMetrics,
        solver: Solver,
        *,
        scheduler_name: str = ob.SCHEDULER_NAME,
        workers: int = 4,
        binders: int = 16,
        send_in_flight: bool = False,
        explain: bool = True,
        conflict_retries: int = 5,
        backoff_initial: float = 1.0,
        backoff_max: float = 10.0,
        flush_interval: float = 60.0,
        solver_lag: float = 0.5,
        events: Events | None = None,
        clock: Callable[[], float] = time.time,
        features: KubeFeatures | None = None,
        binding_timeout: float = bc.DEFAULT_TIMEOUT,
    ) -> None:
        self.kube = kube_api
        features = features or KubeFeatures()
        self.features = features
        self.cluster = cluster
        self.metrics = metrics
        self.solver = solver
        self.scheduler_name = scheduler_name
        self.explain = explain
        self.conflict_retries = conflict_retries
        self.flush_interval = flush_interval
        self.events = events or Events(None, scheduler_name)
        self.clock = clock
        self.pods = cluster.informer("pods")
        self.claims = cluster.informer("claims")
        self.nodes = cluster.informer("nodes")
        self.slices = cluster.informer("slices")
        # DeviceClasses name the extended resources DRA serves (DRAExtendedResource).
        self.classes = cluster.informers.get("classes") if features.extended_resource else None
        self.prebind = BindingWaiter(self.claims.store.get, timeout=binding_timeout)
        self._extended_seq = itertools.count(1)
        self.queue = new_queue(self.name, metrics, base=backoff_initial, cap=backoff_max)
        self.runner = Runner(self.name, self.queue, self.sync, workers=workers, metrics=metrics)
        self._lock = threading.Lock()
        self.pending = PendingPods(backoff_initial=backoff_initial, backoff_max=backoff_max, solver_lag=solver_lag)
        self._usage = logic.NodeUsage()
        """What pods take on each node: the bound ones from pod events (the API's view), and the
        ones in ``_assumed`` (under their keys until the API shows them bound); under ``_lock``."""
        for pod in self.pods.store.objects():  # a cache that started first (normally empty here)
            self._usage.update(ob.key(pod), pod)
        self._assumed: dict[str, tuple[str, str, logic.Resources]] = {}
        self._inflight: dict[str, Mapping[str, Obj]] = {}
        self._lingering: dict[str, tuple[Obj, float]] = {}
        """Claim key -> (the claim as we wrote it, when): still sent as in flight for a while after
        our own watch shows it, since a solver replica's watch may lag behind ours."""
        self.stateless = send_in_flight
        """Send our in-flight allocations with every Schedule (any solver replica will do)."""
        self._encodings: dict[str, tuple[Obj, bytes]] = {}
        self._inflight_devices = logic.DeviceHolders()
        """The exclusive devices of ``_inflight``'s allocations -> their claim (under ``_lock``)."""
        self.binders = binders
        """Binding cycles run at once (0: each runs on the worker that assumed the pod)."""
        self._binder: ThreadPoolExecutor | None = None
        self._to_bind: dict[str, Placement] = {}
        """Pods handed to the binder pool whose binding cycle has not started (under ``_lock``)."""
        self._binding = 0
        """Binding cycles queued or running (under ``_lock``)."""
        self._binding_room = threading.Condition(self._lock)
        """Notified when a binding cycle ends (:meth:`_wait_for_binder`)."""
        self.max_binding = 2 * binders
        """Binding cycles queued or running beyond which new attempts wait: with a backlog of
        pods, scheduling ran thousands of pods ahead of their binds, every one of them holding a
        solver reservation, until the service refused more (RESOURCE_EXHAUSTED) and the
        refused attempts were solved again and again."""
        self._allocatable: dict[int, tuple[Mapping[str, Any], logic.Resources]] = {}
        """id of a Node object in the cache -> (that object, its allocatable)."""
        self._placements = logic.PlacementVerdicts()
        """The node filter's placement verdicts, kept across pods (per placement and node)."""
        self._held: dict[str, set[str]] = {}
        """Reservation id -> claims (keys) we allocated under it that the API still shows allocated."""
        self._held_by_claim: dict[str, str] = {}
        self.release_queue = new_queue("scheduler_release", metrics)
        self.releaser = Runner("scheduler_release", self.release_queue, self._release, workers=1, metrics=metrics)
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self.pods.add_handler(self._on_pod)
        self.claims.add_handler(self._on_claim)
        self.nodes.add_handler(self._on_node)
        self.slices.add_handler(self._on_slice)
        if self.classes is not None:
            self.classes.add_handler(self._on_class)
        self.gang: GroupPlacer | None = None
        """PodGroups with a gang policy, placed whole (set by the GangScheduler when the
        cache serves PodGroups)."""

    def start(self) -> None:
        self._stop.clear()
        self.prebind.start()
        if self.binders > 0:
            self._binder = ThreadPoolExecutor(self.binders, thread_name_prefix="scheduler-binder")
        self.runner.start()
        self.releaser.start()
        self._flusher = threading.Thread(target=self._flush_loop, name="scheduler-flush", daemon=True)
        self._flusher.start()

    def stop(self) -> None:
        self._stop.set()
        with self._binding_room:
            self._binding_room.notify_all()  # attempts waiting for the binder
        self.prebind.stop()
        self.runner.stop()
        self._stop_binder()
        self.releaser.stop()
        if self._flusher is not None:
            self._flusher.join(timeout=5)

    # --- events -------------------------------------------------------------------------------

    def is_pending(self, pod: Obj | None) -> bool:
        """The pod waits for us to schedule it (see :func:`controllers.scheduling.is_pending`)."""
        return pod is not None and logic.is_pending(pod, self.scheduler_name)

    def _work_key(self, pod: Obj) -> str:
        """The queue key that schedules ``pod``: its PodGroup's for a gang member."""
        group = self.gang.group_of(pod) if self.gang is not None else ""
        return group or ob.key(pod)

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        pod = new if new is not None else old
        assert pod is not None
        k = ob.key(pod)
        placed = new is None or ob.pod_node(new) or ob.pod_terminal(new)
        with self._lock:
            if placed:
                self._assumed.pop(k, None)  # counted as bound now (or gone)
                self._usage.update(k, new)
            elif k not in self._assumed:  # an assumed pod stays counted where we put it
                self._usage.update(k, new)
        # A pod leaving a node (or finishing) frees CPU, memory and, soon, its devices.
        if old is not None and ob.pod_node(old) and (new is None or ob.pod_terminal(new)):
            self._cluster_changed("AssignedPodDelete" if new is None else "AssignedPodUpdate")
        if not self.is_pending(new):
            self.pending.scheduled(k)
        elif logic.scheduling_inputs_changed(old, new):  # type: ignore[arg-type]
            assert new is not None
            work = self._work_key(new)
            self.pending.wake(work)
            self.queue.add(work)
        self._update_gauges()

    def _on_claim(self, old: Obj | None, new: Obj | None) -> None:
        claim = new if new is not None else old
        assert claim is not None
        # The pods using this claim: it appeared, changed or went away. An attempt's own claim
        # writes and rollback land here too, so a pod whose attempt is in flight or just failed
        # is not run again at once: that would retry a failing write (a Forbidden or Invalid
        # status update) over and over. See PendingPods.pod_event and add_unless_backing_off.
        event = "ResourceClaimAdd" if old is None else "ResourceClaimDelete" if new is None else "ResourceClaimUpdate"
        self.prebind.claims_changed()  # a binding condition may have changed
        for pod in self.pods.store.by_index(POD_CLAIMS_INDEX, ob.key(claim)):
            work = self._work_key(pod) if self.is_pending(pod) else ""
            if work and self.pending.pod_event(work, event):
                self.queue.add_unless_backing_off(work)
        freed = old is not None and ob.allocation(old) is not None and (new is None or ob.allocation(new) is None)
        if freed:
            self._release_held(ob.key(claim))
            self._cluster_changed("ResourceClaimDelete" if new is None else "ResourceClaimUpdate")

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None and (old is None or logic.node_changed(old, new)):
            self._cluster_changed("NodeAdd" if old is None else "NodeUpdate")

    def _on_slice(self, old: Obj | None, new: Obj | None) -> None:
        # A slice removed only takes devices away; one added or changed may bring some.
        if new is not None:
            self._cluster_changed("ResourceSliceAdd" if old is None else "ResourceSliceUpdate")

    def _on_class(self, old: Obj | None, new: Obj | None) -> None:
        # A new or changed DeviceClass may serve an extended resource a parked pod asks for.
        if new is not None and (old is None or ob.spec(old) != ob.spec(new)):
            self._cluster_changed("DeviceClassAdd" if old is None else "DeviceClassUpdate")

    def _release(self, reservation: str) -> None:
        self.solver.unreserve(reservation)
        self._cluster_changed("ReservationReleased")  # the devices are free for the service now too

    def _release_held(self, claim_key: str) -> None:
        """The API shows the claim deallocated or gone: once every claim of its reservation is,
        the reservation protects nothing and only blocks the devices, so release it.

        The service drops a reservation by itself when its inventory shows the claims
        allocated; but a pod deleted right after binding can have its claims freed before the
        service ever saw them allocated, and the reservation would then hold the devices until
        it expires. Releasing earlier is never unsafe: the API no longer holds the devices.
        """
        with self._lock:
            reservation = self._held_by_claim.pop(claim_key, None)
            if reservation is None:
                return
            remaining = self._held.get(reservation, set())
            remaining.discard(claim_key)
            if remaining:
                return
            self._held.pop(reservation, None)
        self.release_queue.add(reservation)

    def _cluster_changed(self, event: str) -> None:
        """Something that may make unschedulable pods fit: record it for the attempts in
        flight and try the parked pods again, each once its backoff has passed."""
        self._requeue(self.pending.cluster_event(event))

    def _requeue(self, moves: Iterable[Move]) -> None:
        for move in moves:
            self.metrics.queue_incoming_pods.labels(event=move.event, queue="active" if move.delay <= 0 else "backoff").inc()
            self.queue.add_after(move.key, move.delay)
        self._update_gauges()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval):
            self._requeue(self.pending.flush())

    def _update_gauges(self) -> None:
        self.metrics.pending_pods.labels(queue="unschedulable").set(len(self.pending.parked()))
        self.metrics.pending_pods.labels(queue="active").set(self.queue.pending())

    def unschedulable_pods(self) -> list[str]:
        return self.pending.parked()

    # --- one attempt --------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        if self.gang is not None and key.startswith("podgroup:"):
            self._sync_group(key)
            return
        pod = self.pods.store.get(key)
        if not self.is_pending(pod):
            return
        assert pod is not None
        if self._work_key(pod) != key:
            return  # a gang member: placed with its group
        with self._lock:
            assumed = self._assumed.get(key)
        if assumed is not None and assumed[0] == ob.uid(pod):
            return  # bound by us; the cache has not caught up yet
        if not self.cluster.wait_synced(0):
            raise Requeue(0.2, "caches not synced yet")
        self._wait_for_binder()
        self._counted_attempt(key, lambda start: self._attempt(pod, start))

    def _wait_for_binder(self) -> None:
        """Hold the next attempt while the binder is :attr:`max_binding` cycles behind (or
        until stopping): kube-scheduler's binds need no reservation, ours do."""
        if self._binder is None:
            return
        with self._binding_room:
            while self._binding >= self.max_binding and not self._stop.is_set():
                self._binding_room.wait(0.5)

    def _binding_ended(self, cycles: int = 1) -> None:
        """Under ``_lock``: ``cycles`` binding cycles ended (or were dropped)."""
        self._binding -= cycles
        self._binding_room.notify_all()

    def _counted_attempt(self, key: str, run: Callable[[float], str]) -> None:
        """``run(start)`` as one attempt for ``key``: in flight meanwhile, then ended and counted
        (``_end_attempt``), unless it handed the pod to the binder ("binding"): the pod stays in
        flight until its binding cycle ends (the cycle's own claim writes and rollback must not
        run it again before its backoff), and the binder ends and counts the attempt."""
        start = time.perf_counter()
        result = "error"
        self.pending.begin(key)
        failed = True
        try:
            result = run(start)
            failed = False
        finally:
            if result != "binding":
                self._end_attempt(key, result, failed=failed, started=start)

    def _end_attempt(self, key: str, result: str, *, failed: bool, started: float) -> None:
        """An attempt (with its binding cycle) is over: an event about the pod that came in
        during it runs the pod again at once, unless the attempt failed (then its backoff
        decides: the event may be its own write); the attempt is counted."""
        if self.pending.end(key) and not failed:
            self.queue.add(key)
        self.metrics.schedule_attempts.labels(result=result).inc()
        self.metrics.scheduling_latency.labels(result=result).observe(time.perf_counter() - started)

    def _node_allocatable(self, node: Mapping[str, Any]) -> logic.Resources:
        """The node's allocatable, parsed once per Node object the cache holds (not once per pod
        and node). Found by the object's identity: the cache replaces the object when the node
        changes, and even reading the name and resourceVersion of every node on every attempt
        showed in the profile."""
        cached = self._allocatable.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        parsed = logic.node_allocatable(node)
        if len(self._allocatable) > 2 * len(self.nodes.store.by_key()) + 16:
            self._allocatable.clear()  # objects of nodes that changed since
        self._allocatable[id(node)] = (node, parsed)  # holding the object keeps its id unique
        return parsed

    def _sync_group(self, key: str) -> None:
        assert self.gang is not None
        if not self.cluster.wait_synced(0):
            raise Requeue(0.2, "caches not synced yet")
        gang = self.gang
        self._counted_attempt(key, lambda _start: gang.attempt(key))

    def used_resources(self) -> dict[str, logic.Resources]:
        """Node -> what its pods take: the bound ones the pod events showed, plus the pods we
        assumed there that they have not shown bound yet (a fresh dict, the caller's to change).
        Kept as running totals: summing the assumed pods on every attempt cost a fifth of the
        scheduler's CPU with thousands of pods waiting for their binds."""
        with self._lock:
            return self._usage.used()

    def _attempt(self, pod: Obj, started: float) -> str:
        key = ob.key(pod)
        claims_view = self.cluster.view("claims")
        gathered = logic.gather_claims(pod, claims_view)
        if gathered.wait:
            self._mark_unschedulable(pod, gathered.wait, record=not gathered.being_created)
            return "waiting"
        wanted = self._extended_requests(pod)
        nodes = self.nodes.store.shared_by_key()  # a Node's key is its name; the same mapping while none changes
        used = self.used_resources()
        backed = wanted[0].resources if wanted is not None else frozenset()
        need = logic.pod_requests(pod)
        filtered = logic.filter_nodes(pod, nodes, used=used, claims=gathered.claims, dra_backed=backed,
                                      allocatable=self._node_allocatable, placements=self._placements, need=need)
        if not filtered.candidates:
            self._mark_unschedulable(pod, filtered.summary(len(nodes)))
            return "unschedulable"
        placement = self._place(pod, gathered, filtered, nodes, used, wanted)
        if placement is None:
            return "unschedulable"
        try:
            self.assume(key, [PlacedPod(pod, placement.node, gathered, dra_backed=backed, requests=need)], placement.allocations, nodes)
        except AttemptFailed as err:
            self.release_reservation(placement.reservation)
            raise Retry(f"pod {key}: {err}") from err
        binder = self._binder
        if binder is None:
            return self._binding_cycle(pod, gathered, placement)
        with self._lock:
            self._to_bind[key] = placement
            self._binding += 1
        try:
            binder.submit(self._run_binding_cycle, pod, gathered, placement, time.perf_counter(), started)
        except RuntimeError:  # the pool shut down: we are stopping
            with self._lock:
                self._to_bind.pop(key, None)
                self._binding_ended()
            self.forget(key, pods=[key])
            self.release_reservation(placement.reservation)
            raise Requeue(0.0, "stopping") from None
        return "binding"

    def _run_binding_cycle(self, pod: Obj, gathered: logic.Gathered, placement: Placement, assumed_at: float,
                           started: float) -> None:
        """One pod's binding cycle on a binder thread, with the retry rules the worker applies."""
        key = ob.key(pod)
        with self._lock:
            if self._to_bind.pop(key, None) is None:
                return  # dropped by stop(), which rolled it back and counted it
        self.metrics.binding_wait.observe(time.perf_counter() - assumed_at)
        result = "error"
        failed = True
        try:
            result = self._binding_cycle(pod, gathered, placement)
            failed = False
        except (Retry, kube.ApiError) as err:
            log.info("pod %s: %s; trying again", key, err)
            self.queue.add_rate_limited(key)
        except Exception:
            log.exception("pod %s: binding cycle failed", key)
            self.queue.add_rate_limited(key)
        finally:
            self._end_attempt(key, result, failed=failed, started=started)
            with self._lock:
                self._binding_ended()

    def _binding_cycle(self, pod: Obj, gathered: logic.Gathered, placement: Placement) -> str:
        """PreBind and Bind: write the claims, wait for binding conditions, bind; roll back on
        failure (re-raised for a retry with backoff, unless the pod or a claim is gone)."""
        node = placement.node
        written: list[Written] = []
        claims = list(gathered.claims)
        allocations = dict(placement.allocations)
        try:
            if placement.extended is not None:
                created = self._create_extended(pod, placement.extended, written)
                allocations[ob.key(created)] = allocations.pop(placement.extended.key)
                claims.append(logic.PodClaim(ob.key(created), created, False))
            self.write_claims(pod, claims, allocations, written)
            if placement.extended is not None:
                self._record_extended(pod, ob.key(created), placement.extended)
            if self._must_wait(claims):
                self._wait_for_binding(pod, node, placement, written, allocations, [c.key for c in claims])
                return "waiting"
            self.bind(pod, node)
        except Exception as err:
            return self._abort(pod, node, placement, written, err)
        self._bound(pod, node, placement, allocations)
        return "scheduled"

    def _stop_binder(self) -> None:
        """No new binding cycles; those not started are dropped (the pod is no longer assumed,
        its reservation released); those running finish."""
        binder, self._binder = self._binder, None
        if binder is None:
            return
        with self._lock:
            dropped = list(self._to_bind.items())
            self._to_bind.clear()
        for key, placement in dropped:
            self.forget(key, pods=[key])
            self.solver.unreserve(placement.reservation)
            self.pending.end(key)
            log.info("pod %s: binding cycle dropped on stop", key)
        with self._lock:
            self._binding_ended(len(dropped))
        binder.shutdown(wait=True, cancel_futures=True)

    def binding(self) -> int:
        """Binding cycles queued or running (tests wait for none before reading the outcome)."""
        with self._lock:
            return self._binding

    def _bound(self, pod: Obj, node: str, placement: Placement, allocations: Mapping[str, Obj]) -> None:
        key = ob.key(pod)
        self.settle(key, allocations)
        self.pending.scheduled(key)
        self.hold_reservation(placement.reservation, allocations)
        self.metrics.bindings.inc()
        self.events.emit(pod, "Pod", type_="Normal", reason="Scheduled", message=f"Successfully assigned {key} to {node}")
        log.info("pod %s: bound to %s", key, node)

    def _abort(self, pod: Obj, node: str, placement: Placement, written: Sequence[Written], err: Exception) -> str:
        """Undo an attempt after the solver answered: claims written, the service's
        reservation, the assumed pod. Re-raises ``err`` (retry with backoff) unless the pod
        or a claim is gone."""
        self.undo(ob.key(pod), placement.reservation, [(pod, written)], pods=[ob.key(pod)])
        log.info("pod %s: attempt on node %s rolled back: %s", ob.key(pod), node, err)
        if isinstance(err, kube.NotFound):
            return "error"  # the pod or a claim is gone; its event decides what comes next
        raise err

    # --- extended resources backed by DRA ----------------------------------------------------

    def _extended_requests(self, pod: Obj) -> tuple[extended.ClassIndex, dict[str, Fraction]] | None:
        """The class index and the pod's DRA-served extended resource requests, or None when
        the pod asks for none. A special claim left by an earlier attempt is deleted first
        and the pod retried, as upstream's PostFilter does."""
        if self.classes is None:
            return None
        index = extended.ClassIndex(self.classes.store.objects())
        requests = extended.pod_dra_requests(pod, index)
        if not requests:
            return None
        stale = extended.find_claim(pod, self.claims.store.by_index(CLAIM_OWNER_INDEX, ob.uid(pod)))
        if stale is not None:
            self._delete_claim(dict(stale))
            raise Retry(f"pod {ob.key(pod)}: deleted the extended-resource claim {ob.key(stale)} an earlier attempt left")
        return index, requests

    def _create_extended(self, pod: Obj, special: extended.ExtendedClaim, written: list[Written]) -> Obj:
        created = self.kube.create_claim(ob.namespace(pod), extended.claim_to_create(pod, special))
        self.claims.store.assume(created)
        written.append(Written(ob.key(created), finalizer=True, created=True))
        log.info("pod %s: created extended-resource claim %s", ob.key(pod), ob.key(created))
        return created

    def _record_extended(self, pod: Obj, claim_key: str, special: extended.ExtendedClaim) -> None:
        _, name = ob.split_key(claim_key)
        patched = self.kube.patch_pod_status(ob.namespace(pod), ob.name(pod), extended.pod_status_patch(pod, name, special.mappings))
        self.pods.store.assume(patched)

    def _delete_claim(self, claim: Obj) -> None:
        """Delete a claim we made (finalizer first, as upstream's ``deleteClaim``)."""
        ns, name = ob.namespace(claim), ob.name(claim)
        for _ in range(self.conflict_retries + 1):
            try:
                if ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(claim):
                    claim = self.kube.update_claim(extended.without_finalizer(claim))
                    self.claims.store.assume(claim)
                self.kube.delete_claim(ns, name, uid=ob.uid(claim))
                return
            except kube.Conflict:
                claim = self.kube.get_claim(ns, name)
            except kube.NotFound:
                return

    # --- PreBind: binding conditions ---------------------------------------------------------

    def _stamped(self, allocations: Mapping[str, Obj]) -> dict[str, Obj]:
        """Allocations with ``allocationTimestamp`` (set by the scheduler when binding
        conditions are enabled; their timeout counts from it)."""
        if not self.features.device_binding:
            return dict(allocations)
        stamp = ob.format_time(self.clock())
        return {k: {**a, "allocationTimestamp": a.get("allocationTimestamp") or stamp} for k, a in allocations.items()}

    def _must_wait(self, claims: Sequence[logic.PodClaim]) -> bool:
        if not self.features.device_binding:
            return False
        for pc in claims:
            current = self.claims.store.get(pc.key) or pc.claim
            if bc.has_binding_conditions(current):
                return True
        return False

    def _wait_for_binding(self, pod: Obj, node: str, placement: Placement, written: list[Written],
                          allocations: Mapping[str, Obj], claim_keys: Sequence[str]) -> None:
        """PreBind's wait, off the worker: the waiter binds the pod once every binding
        condition is True, or rolls the attempt back (the allocation cleared) and retries."""
        key = ob.key(pod)
        self.events.emit(pod, "Pod", type_="Normal", reason="BindingConditionsPending",
                         message=f"waiting for binding conditions for device on node {node}")
        log.info("pod %s: waiting for binding conditions on node %s", key, node)

        def done(state: bc.BindingState) -> None:
            if state.kind == bc.READY:
                try:
                    self.bind(pod, node)
                except Exception as err:
                    # The devices are ready; only the binding failed: keep the allocations (the
                    # next attempt finds them ready at once), as upstream's Unreserve does;
                    # only the pod's reservations go.
                    for record in written:
                        record.allocated = False
                    self._binding_failed(pod, placement, written, (), f"binding failed: {err}")
                    return
                self._bound(pod, node, placement, allocations)
                return
            self._binding_failed(pod, placement, written, claim_keys, state.message)

        self.prebind.add(key, claim_keys, done)

    def _binding_failed(self, pod: Obj, placement: Placement, written: list[Written], claim_keys: Sequence[str], why: str) -> None:
        """Roll the attempt back and try again. Upstream deallocates a claim whose binding
        failed or timed out (PostFilter) before trying again; so do we for the claims in
        ``claim_keys`` with binding conditions that no other consumer holds, whoever
        allocated them."""
        latest = {r.key: r for r in written}
        extra: list[Written] = []
        for k in claim_keys:
            claim = self.claims.store.get(k)
            if claim is None or not bc.has_binding_conditions(claim):
                continue
            record = latest.get(k)
            if record is None:
                record = latest[k] = Written(k)
                extra.append(record)
            record.allocated = record.reserved = True
        self.undo(ob.key(pod), placement.reservation, [(pod, [*written, *extra])], pods=[ob.key(pod)])
        message = f"running PreBind plugin \"DynamicResources\": {why}"
        self.events.emit(pod, "Pod", type_="Warning", reason="FailedScheduling", message=message)
        log.info("pod %s: %s; trying again", ob.key(pod), why)
        self.queue.add_rate_limited(ob.key(pod))

    # --- choosing node and devices -----------------------------------------------------------

    def _place(self, pod: Obj, gathered: logic.Gathered, filtered: logic.NodeFilter, nodes: Mapping[str, Obj],
               used: Mapping[str, logic.Resources], wanted: tuple[extended.ClassIndex, dict[str, Fraction]] | None) -> Placement | None:
        """Node and devices for the pod, or None after marking it unschedulable.

        With extended resources served by DRA the claims differ from node to node (a node
        serving a resource by device plugin needs no request for it), so the candidates are
        asked in groups: the nodes that need the fewest DRA-served resources first.
        """
        key = ob.key(pod)
        user = [c.claim for c in gathered.to_allocate]
        groups: list[tuple[frozenset[str], tuple[str, ...]]]
        if wanted is None:
            groups = [(frozenset(), filtered.candidates)]
        else:
            groups = extended.node_groups(filtered.candidates, nodes, wanted[1])
        verdicts: dict[str, str] = {}
        reason = ""
        asked: dict[str, list[Obj]] = {}
        for resources, candidates in groups:
            special = None
            if resources and wanted is not None:
                temp = f"extended-resources.{ob.uid(pod)}.{next(self._extended_seq)}"
                special = extended.special_claim(pod, resources, wanted[0], temp_name=temp)
            claims = user + ([special.claim] if special is not None else [])
            if not claims:
                return Placement(logic.least_allocated(candidates, nodes, used), {})
            for n in candidates:
                asked[n] = claims
            try:
                placement = self.solver.schedule(claims, candidates, pod=key, in_flight=self._in_flight_claims() if self.stateless else None)
            except SolverError as err:
                if err.code in PERMANENT_CODES:
                    self._mark_unschedulable(pod, f"the solver rejected the claims: {err.message}", by_solver=True)
                    return None
                raise self.solver_retry(err, f"pod {key}") from err
            if placement.node:
                return replace(placement, extended=special)
            verdicts.update(placement.verdicts or {})
            reason = reason or placement.reason
        first = asked.get(filtered.candidates[0], user)
        message = self._explain(first, filtered, Placement("", {}, reason=reason, verdicts=verdicts), total=len(nodes))
        self._mark_unschedulable(pod, message, by_solver=True)
        return None

    def _in_flight_claims(self) -> list[bytes]:
        """Allocations the solver must count beside what its inventory shows: those other
        workers are writing (between assume and bind), and those we wrote recently (until
        every solver replica's watch has surely caught up, or the claim is freed)."""
        now = self.clock()
        out: dict[str, bytes] = {}
        with self._lock:
            for allocations in self._inflight.values():
                for ck, alloc in allocations.items():
                    out[ck] = self._encoded(ck, alloc)
            for ck, (written, at) in list(self._lingering.items()):
                current = self.claims.store.get(ck)
                if now - at > IN_FLIGHT_LINGER or current is None or not ob.allocation(current) or ob.uid(current) != ob.uid(written):
                    del self._lingering[ck]  # long seen, or freed: the API's word is final
                    continue
                if ck not in out:
                    out[ck] = self._encoded(ck, written)
            for ck in [k for k in self._encodings if k not in out]:
                del self._encodings[ck]
        return [out[k] for k in sorted(out)]

    def _encoded(self, key: str, source: Obj) -> bytes:
        """JSON of an in-flight claim (a claim we wrote, or an allocation being written), once
        per version: it goes with every Schedule until the API shows it."""
        hit = self._encodings.get(key)
        if hit is not None and hit[0] is source:
            return hit[1]
        if source.get("kind") == "ResourceClaim":
            doc = source
        else:
            current = self.claims.store.get(key) or {}
            meta = {k: v for k, v in (current.get("metadata") or {}).items() if k in ("name", "namespace", "uid")}
            if not meta:
                ns, n = ob.split_key(key)
                meta = {"namespace": ns, "name": n}
            doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": {"devices": {}},
                   "status": {"allocation": source}}
        data = json.dumps(doc, separators=(",", ":")).encode()
        self._encodings[key] = (source, data)
        return data

    def _explain(self, claims: Sequence[Obj], filtered: logic.NodeFilter, placement: Placement, *, total: int) -> str:
        """The scheduler-style summary over all nodes, plus the solver's explanation for the
        first candidate node (the smallest set of reasons that blocks the claims there)."""
        reasons = list(filtered.reasons.values())
        verdicts = placement.verdicts or {}
        for n in filtered.candidates:
            why = verdicts.get(n)
            reasons.append(why.split(":")[0] if why else "not evaluated")
        message = logic.nodes_summary(total, reasons)
        if self.explain and filtered.candidates:
            node = filtered.candidates[0]
            why = verdicts.get(node, "")
            if is_too_few_free(why):
                # The node has fewer free devices than the claims need: its verdict says so.
                # Explaining it anyway (dozens of CP-SAT solves) for every pod left over on a
                # full cluster took most of the solver's time from the pods that fit.
                return message + f" {node}: {why}"
            try:
                summary = self.solver.explain(claims, node)
            except SolverError as err:
                log.debug("explain on %s failed: %s", node, err)
                summary = ""
            if summary:
                message += f" {node}: {summary}"
        return message

    # --- the steps every attempt shares -------------------------------------------------------
    # The per-pod path and GangScheduler (all of a PodGroup's pods in one attempt) both go
    # through these, so the lock, the assumed pods, the allocations in flight and the
    # reservations held are kept in this class alone. An attempt runs under a key (the pod's,
    # or the PodGroup's): ``assume`` after the solver answered (on AttemptFailed nothing is
    # assumed: ``release_reservation``), then ``write_claims`` and ``bind``, then ``settle``
    # and ``hold_reservation`` once bound, or ``undo`` when a step before the first bind fails.
    # ``is_pending`` and ``used_resources`` are what the attempts read; ``solver_retry`` turns
    # a solver error that may pass into a retry.

    def solver_retry(self, err: SolverError, subject: str) -> kube.Transient:
        """The error to raise (a retry with backoff) for a solver call that failed in a way
        that may pass; ``subject`` names the pod or PodGroup. A call that ended without an
        answer may have left a reservation behind (:meth:`_reservation_may_expire`)."""
        if err.code in ("DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED"):
            self._reservation_may_expire()
        return kube.Transient(f"{subject}: solver: {err}")

    def _reservation_may_expire(self) -> None:
        """A Schedule call ended without an answer, so the solver may hold a reservation we
        never learned the id of: its devices come free when it expires, with no API event to
        say so. Count its expiry as a cluster change."""
        timer = threading.Timer(self.solver.reservation_ttl + 0.5, self._cluster_changed, args=("ReservationExpired",))
        timer.daemon = True
        timer.start()

    def release_reservation(self, reservation: str) -> None:
        """Give back what a failed attempt held: other pods may have been refused those devices."""
        if reservation:
            self.solver.unreserve(reservation)
            self._cluster_changed("ReservationReleased")

    def hold_reservation(self, reservation: str, claims: Iterable[str]) -> None:
        """``reservation`` held the devices of ``claims`` (keys), now written: it is released
        once the API shows them all freed (:meth:`_release_held`), if the service has not
        dropped it before."""
        with self._lock:
            keys = set(claims)
            if reservation and keys:
                self._held[reservation] = keys
                for k in keys:
                    self._held_by_claim[k] = reservation

    def assume(self, key: str, placed: Sequence[PlacedPod], allocations: Mapping[str, Obj], nodes: Mapping[str, Obj]) -> None:
        """Last checks against our own view, then count each pod on its node and
        ``allocations`` (claim key -> allocation, all the attempt allocates) as in flight under
        ``key``, atomically with respect to the other workers. Raises :class:`AttemptFailed`,
        with nothing assumed, when a device got taken or a node no longer fits its pods."""
        used = self.used_resources()
        claims = self.claims.store
        with self._lock:
            # Our own view: claims the cache shows allocated (indexed by device) and the
            # allocations other attempts have in flight. O(devices asked for), not O(claims).
            def holders(device: str) -> list[str]:
                out = [ob.key(c) for c in claims.by_index(CLAIM_DEVICE_INDEX, device)]
                inflight = self._inflight_devices.holder(device)
                if inflight is not None and inflight[0] != key:
                    out.append(inflight[1])
                return out

            conflicts = logic.conflicts_with(allocations, holders)
            if conflicts:
                raise AttemptFailed("; ".join(conflicts))
            needs = [logic.pod_requests(p.pod) if p.requests is None else p.requests for p in placed]
            for p, need in zip(placed, needs, strict=True):  # each pod against the node with the attempt's pods before it
                selectors = [(ob.allocation(c.claim) or {}).get("nodeSelector") for c in p.gathered.allocated]
                why = logic.node_verdict(
                    p.pod, nodes.get(p.node) or {}, used=used.get(p.node, logic.Resources()),
                    claim_selectors=[s for s in selectors if s], dra_backed=p.dra_backed, need=need,
                )
                if why:
                    whose = "" if ob.key(p.pod) == key else f" pod {ob.key(p.pod)}"  # a group's attempt names the pod
                    raise AttemptFailed(f"node {p.node} no longer fits{whose}: {why}")
                used[p.node] = used.get(p.node, logic.Resources()).plus(need)
            for p, need in zip(placed, needs, strict=True):
                pk = ob.key(p.pod)
                self._assumed[pk] = (ob.uid(p.pod), p.node, need)
                self._usage.put(pk, (p.node, need))
            self._add_inflight(key, allocations)

    def settle(self, key: str, allocations: Mapping[str, Obj], *, unbound: Iterable[str] = ()) -> None:
        """``key``'s claims are written (the API holds their allocations): nothing of it is in
        flight any more, but each claim written lingers among the in-flight claims sent to
        solver replicas until every replica's watch has surely shown it (or it is freed). The
        ``unbound`` pods (keys) are no longer assumed."""
        now = self.clock()
        with self._lock:
            for ck in allocations:
                written = self.claims.store.get(ck)
                if written is not None and ob.allocation(written):
                    self._lingering[ck] = (written, now)
        self.forget(key, pods=unbound)

    def forget(self, key: str, *, pods: Iterable[str] = ()) -> None:
        """``key``'s attempt has nothing in flight any more (its claims are written, or it gave
        up), and the ``pods`` named (keys) are no longer assumed: they were not bound."""
        with self._lock:
            self._drop_inflight(key)
            for k in pods:
                if self._assumed.pop(k, None) is not None:
                    self._usage.put(k, None)  # not bound: the API's view has nothing of it

    def _add_inflight(self, key: str, allocations: Mapping[str, Obj]) -> None:
        """Under ``_lock``: ``key``'s allocations (a pod's, or a PodGroup's) are in flight."""
        self._drop_inflight(key)
        self._inflight[key] = dict(allocations)
        self._inflight_devices.add(key, allocations)

    def _drop_inflight(self, key: str) -> None:
        """Under ``_lock``: ``key``'s allocations are no longer in flight."""
        allocations = self._inflight.pop(key, None)
        if allocations:
            self._inflight_devices.remove(allocations)

    def write_claims(self, consumer: Obj, claims: Sequence[logic.PodClaim], allocations: Mapping[str, Obj],
                     written: list[Written], *, reference: Obj | None = None) -> None:
        """PreBind's claim writes for ``consumer`` (a pod; or a PodGroup, ``reference`` being
        its ``reservedFor`` entry): each claim gets its allocation from ``allocations`` (claim
        key -> allocation, stamped here) if it has one, and the consumer's reservation; a claim
        reserved for the consumer already with nothing to allocate is left alone. Each write
        is recorded in ``written`` before it is tried, for :meth:`undo`."""
        stamped = self._stamped(allocations)
        for pc in claims:
            allocation = stamped.get(pc.key)
            if pc.reserved and allocation is None:
                continue
            record = Written(pc.key)
            written.append(record)
            self._write_claim(consumer, pc.claim, allocation, record, reference=reference)

    def _write_claim(self, pod: Obj, claim: Obj, allocation: Obj | None, record: Written, *, reference: Obj | None = None) -> None:
        ns, name = ob.namespace(claim), ob.name(claim)
        for _ in range(self.conflict_retries + 1):
            step = logic.write_step(claim, pod, allocation, reference=reference)
            if step.kind == "done":
                return
            if step.kind == "error":
                raise AttemptFailed(step.message)
            try:
                if step.kind == "finalizer":
                    assert step.body is not None
                    claim = self._write("claim_finalizer", self.kube.update_claim, step.body)
                    record.finalizer = True
                else:
                    body = ob.deep_copy(claim)
                    body["status"] = step.body
                    claim = self._write("claim_status", self.kube.update_claim_status, body)
                    record.reserved = True
                    record.allocated = allocation is not None
                self.claims.store.assume(claim)
            except kube.Conflict:
                self.metrics.claim_write_conflicts.inc()
                claim = self.kube.get_claim(ns, name)
        raise AttemptFailed(f"claim {ns}/{name}: still conflicting after {self.conflict_retries} retries")

    def _write(self, operation: str, call: Callable[..., Any], *args: Any) -> Any:
        """One API write, timed (the report's split between solver, API writes and queueing)."""
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.metrics.api_write_latency.labels(operation=operation).observe(time.perf_counter() - start)

    def bind(self, pod: Obj, node: str) -> None:
        """Bind the pod to ``node`` (``pods/binding``): the last step, the one no undo takes back."""
        ns, name = ob.namespace(pod), ob.name(pod)
        try:
            self._write("bind", self.kube.bind_pod, ns, name, logic.binding(pod, node))
        except (kube.Conflict, kube.Transient) as err:
            # A timeout or a dropped connection says nothing about whether the binding was
            # stored: rolling back the claims of a pod that is in fact bound would leave it on
            # the node without its devices. Look before deciding.
            try:
                current = self.kube.get_pod(ns, name)
            except kube.ApiError:
                raise err from None
            if ob.uid(current) == ob.uid(pod) and ob.pod_node(current) == node:
                return  # the binding got through; its answer did not
            raise

    def undo(self, key: str, reservation: str, writes: Sequence[tuple[Obj, Sequence[Written]]], *, pods: Iterable[str]) -> None:
        """Roll back ``key``'s attempt after the solver answered: each consumer's claim writes
        (consumers in the order given, each one's last write first), the service's
        reservation, then the assumed ``pods`` and the allocations in flight."""
        self.metrics.rollbacks.inc()
        for consumer, written in writes:
            self._rollback(consumer, written)
        self.release_reservation(reservation)
        self.forget(key, pods=pods)

    def _rollback(self, pod: Obj, written: Sequence[Written]) -> None:
        doomed = {r.key for r in written if r.created}
        for record in reversed(written):
            ns, name = ob.split_key(record.key)
            if record.key in doomed and not record.created:
                continue  # deleted below: nothing to undo on it first
            if record.created:
                # The extended-resource claim exists only for this attempt (upstream's
                # Unreserve deletes it too); the next attempt builds it anew.
                try:
                    self._delete_claim(self.kube.get_claim(ns, name))
                except kube.NotFound:
                    pass
                except kube.ApiError as err:
                    log.warning("rollback: deleting claim %s failed: %s", record.key, err)
                continue
            for _ in range(self.conflict_retries + 1):
                try:
                    claim = self.kube.get_claim(ns, name)
                    status = logic.rollback_status(claim, pod, clear_allocation=record.allocated) if record.reserved or record.allocated else None
                    if status is not None:
                        body = ob.deep_copy(claim)
                        body["status"] = status
                        claim = self.kube.update_claim_status(body)
                        self.claims.store.assume(claim)
                    if record.finalizer and ob.allocation(claim) is None and ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(claim):
                        body = ob.deep_copy(claim)
                        body["metadata"]["finalizers"] = [f for f in ob.finalizers(claim) if f != ob.DELETE_PROTECTION_FINALIZER]
                        claim = self.kube.update_claim(body)
                        self.claims.store.assume(claim)
                    break
                except kube.Conflict:
                    self.metrics.claim_write_conflicts.inc()
                    continue
                except kube.NotFound:
                    break
                except kube.ApiError as err:
                    log.warning("rollback of claim %s failed: %s", record.key, err)
                    break

    # --- outcome ------------------------------------------------------------------------------

    def _mark_unschedulable(self, pod: Obj, message: str, *, by_solver: bool = False, record: bool = True) -> None:
        """Record why the pod does not fit (``record``: as a PodScheduled condition and an
        Event), then park it, unless a cluster change arrived during the attempt (then it is
        tried again right away: the change may be the answer)."""
        key = ob.key(pod)
        verdict = self.pending.unschedulable(key, by_solver=by_solver)
        if verdict.retry_after is None:
            self.metrics.queue_incoming_pods.labels(event="ScheduleAttemptFailure", queue="unschedulable").inc()
        else:
            self.metrics.queue_incoming_pods.labels(event=verdict.event, queue="active" if verdict.retry_after <= 0 else "backoff").inc()
            self.queue.add_after(key, verdict.retry_after)
            log.info("pod %s: %s arrived during the attempt, trying again", key, verdict.event)
        patch = logic.unschedulable_patch(pod, message, now=self.clock()) if record else None
        if patch is not None:
            try:
                patched = self._write("pod_status", self.kube.patch_pod_status, ob.namespace(pod), ob.name(pod), patch)
                self.pods.store.assume(patched)
            except kube.NotFound:
                return
            except kube.ApiError as err:
                log.info("pod %s: cannot record PodScheduled=False: %s", key, err)
            self.events.emit(pod, "Pod", type_="Warning", reason="FailedScheduling", message=message)
        # A claim the claim controller is about to create is a wait, not news (kube-scheduler
        # holds such pods back before any attempt and logs nothing at its default verbosity).
        log.log(logging.INFO if record else logging.DEBUG, "pod %s: unschedulable: %s", key, message)
        self._update_gauges()
