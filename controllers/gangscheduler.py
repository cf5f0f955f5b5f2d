"""Gang scheduling in the scheduler: a PodGroup with a ``gang`` policy placed whole.

The scheduler's work queue holds PodGroup keys (``podgroup:namespace/name``, see
:mod:`controllers.gang`) next to pod keys; member pods are never tried one at a time. One
attempt for a group:

1. the gate: the PodGroup exists, ``minCount`` member pods exist without scheduling gates,
   all name our scheduler; the group's claims (``spec.resourceClaims``) and every pod's own
   claims exist;
2. filter nodes per pod (everything but devices), and the room each node has left;
3. ``ScheduleGroup`` with ``reserve``: nodes, devices and topology domain for the pods in one
   model, every device held under one reservation;
4. under the scheduler's lock: check the answer against our own view and assume every pod;
5. write the group's claims (the delete-protection finalizer, then the allocation with
   ``reservedFor`` naming the PodGroup, as kube-scheduler v1.37 does), then each pod's claims
   (reserved for the pod);
6. re-read the pods (one deleted meanwhile must not leave the others bound without a quorum),
   then bind each.

Any failure before the first bind undoes everything: the claims written lose their
reservations and the allocations we made, the service's reservation is released, the pods
are un-assumed, and the group is retried with backoff. A bind cannot be undone, so binds go
last; when a later bind fails the bound pods stay and the next attempt places the rest (their
claims are already allocated) within the bound pods' domain.

The PodGroup's ``PodGroupInitiallyScheduled`` condition says the outcome: True/Scheduled,
False/Unschedulable with the solver's group explanation (each pending pod's PodScheduled
condition gets the same text), or False/SchedulerError for a group that cannot be placed as
it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from dra_solver.controllers import gang
from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling as logic
from dra_solver.controllers.cluster import POD_GROUP_INDEX
from dra_solver.controllers.objects import Obj
from dra_solver.controllers.runtime import Retry
from dra_solver.controllers.scheduler import (
    PERMANENT_CODES,
    AttemptFailed,
    PlacedPod,
    Scheduler,
    SolverError,
    Written,
)
from dra_solver.service.api import Client, kube, pb

log = logging.getLogger(__name__)


class GangScheduler:
    """The group attempts of a :class:`Scheduler`: its queue and workers, and its shared
    attempt steps (assume, write, bind, undo), which keep the lock and assume cache."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler
        self.groups = scheduler.cluster.informer("podgroups")
        self.groups.add_handler(self._on_group)
        scheduler.gang = self

    # --- membership ---------------------------------------------------------------------------

    def group_of(self, pod: Mapping[str, object]) -> str:
        """The PodGroup key when the pod is scheduled as part of a gang ("" when on its own:
        no group, or a group with a basic policy)."""
        name = gang.pod_group_name(pod)
        if not name:
            return ""
        pg = self.groups.store.get(f"{ob.namespace(pod)}/{name}")
        if pg is not None and gang.min_count(pg) is None:
            return ""
        return gang.group_key(ob.namespace(pod), name)

    def _on_group(self, old: Obj | None, new: Obj | None) -> None:
        pg = new if new is not None else old
        assert pg is not None
        k = gang.group_key(ob.namespace(pg), ob.name(pg))
        if new is None:
            self.s.pending.scheduled(k)
            return
        if old is None or ob.spec(old) != ob.spec(new) or ob.status(old).get("resourceClaimStatuses") != ob.status(new).get("resourceClaimStatuses"):
            self.s.pending.wake(k)
            self.s.queue.add(k)
            # A basic policy hands the pods back to the per-pod path (and a gang takes them).
            for pod in self.s.pods.store.by_index(POD_GROUP_INDEX, ob.key(pg)):
                if self.s.is_pending(pod):
                    self.s.queue.add(ob.key(pod))

    # --- one attempt --------------------------------------------------------------------------

    def attempt(self, key: str) -> str:
        parsed = gang.parse_group_key(key)
        assert parsed is not None
        ns, name = parsed
        pg = self.groups.store.get(f"{ns}/{name}")
        pods = gang.members(self.s.pods.store.by_index(POD_GROUP_INDEX, f"{ns}/{name}"), ns, name)
        g = gang.gate(pg, pods, scheduler_name=self.s.scheduler_name, name=name)
        if pg is None or not g.ready:
            if pg is not None and g.bound and not g.pending and len(g.bound) >= (gang.min_count(pg) or 0):
                self._set_condition(pg, gang.SCHEDULED, "")  # a write lost after the last bind
            elif pg is not None and g.error:
                self._set_condition(pg, gang.SCHEDULER_ERROR, g.error)
                self._park(key)
            elif g.wait:
                log.info("podgroup %s/%s: %s", ns, name, g.wait)
            return "waiting"
        shared = gang.shared_claims(pg)
        if shared.wait:
            # The claim controller makes the group's template claims; its status write brings
            # the PodGroup back here. Said on the PodGroup meanwhile (a missing template, ...).
            return self._unschedulable(pg, g.pending, shared.wait, key)
        claims_view = self.s.cluster.view("claims")
        shared_objs: list[Obj] = []
        for k in shared.keys:
            claim = claims_view.get(k)
            if claim is None or ob.deleting(claim):
                return self._unschedulable(pg, g.pending, f'PodGroup claim "{ob.split_key(k)[1]}" ' + ("not found" if claim is None else "is being deleted"), key)
            shared_objs.append(dict(claim))
        nodes = self.s.nodes.store.by_key()  # a Node's key is its name
        used = self.s.used_resources()
        allowed = gang.domain_nodes(nodes.values(), gang.topology_key(pg), g.bound)
        group_pods: list[pb.GroupPod] = []
        gathered_by_pod: dict[str, logic.Gathered] = {}
        for pod in g.pending:
            entries = gang.pod_shared_entries(pod, shared)
            gathered = logic.gather_claims(gang.without_entries(pod, entries), claims_view)
            if gathered.wait:
                if gathered.being_created:
                    return "waiting"
                return self._unschedulable(pg, g.pending, f"pod {ob.key(pod)}: {gathered.wait}", key)
            gathered_by_pod[ob.key(pod)] = gathered
            filtered = logic.filter_nodes(pod, nodes.values(), used=used, claims=gathered.claims)
            candidates = [n for n in filtered.candidates if allowed is None or n in allowed]
            requests = logic.pod_requests(pod)
            group_pods.append(Client.group_pod(
                ob.key(pod), [c.claim for c in gathered.to_allocate], shared_claims=sorted(set(entries.values())),
                nodes=candidates, cpu_millis=gang.cpu_millis(requests), memory_bytes=gang.memory_bytes(requests),
            ))
        try:
            resp = self.s.solver.schedule_group(
                pod_group=ob.key(pg), pods=group_pods, shared_claims=[json.dumps(c, separators=(",", ":")).encode() for c in shared_objs],
                min_count=g.quorum, topology_key=gang.topology_key(pg),
                rooms=[pb.NodeRoom(node=r.node, cpu_millis=r.cpu_millis, memory_bytes=r.memory_bytes, pods=r.pods)
                       for r in gang.rooms(nodes.values(), used)],
            )
        except SolverError as err:
            if err.code in PERMANENT_CODES:
                self._set_condition(pg, gang.SCHEDULER_ERROR, f"the solver rejected the group: {err.message}")
                self._park(key)
                return "unschedulable"
            raise self.s.solver_retry(err, f"podgroup {ob.key(pg)}") from err
        if not resp.placed:
            summary = resp.explanation.summary or resp.reason or "the group does not fit"
            return self._unschedulable(pg, g.pending, summary, key, by_solver=True)
        return self._commit(pg, g, key, resp, gathered_by_pod, shared_objs, nodes)

    def _commit(self, pg: Obj, g: gang.Gate, key: str, resp: pb.ScheduleGroupResponse, gathered_by_pod: Mapping[str, logic.Gathered],
                shared_objs: Sequence[Obj], nodes: Mapping[str, Obj]) -> str:
        reservation = resp.reservation.id
        by_key = {ob.key(p): p for p in g.pending}
        shared_alloc = {a.claim: json.loads(a.allocation) for a in resp.shared_claims if a.allocation}
        placed: list[tuple[Obj, str, dict[str, Obj]]] = []
        for pp in resp.pods:
            pod = by_key[pp.name]
            placed.append((pod, pp.node, {a.claim: json.loads(a.allocation) for a in pp.claims if a.allocation}))
        everything: dict[str, Obj] = dict(shared_alloc)
        for _, _, allocs in placed:
            everything.update(allocs)
        pod_keys = [ob.key(pod) for pod, _, _ in placed]
        try:
            self.s.assume(key, [PlacedPod(pod, node, gathered_by_pod[ob.key(pod)]) for pod, node, _ in placed], everything, nodes)
        except AttemptFailed as err:
            self.s.release_reservation(reservation)
            raise Retry(f"podgroup {ob.key(pg)}: {err}") from err
        written: list[Written] = []
        shared_written: list[Written] = []
        bound: set[str] = set()
        try:
            # An allocated group claim keeps its allocation: only the reservation is written
            # (even when it is there already: the write checks the claim is still allocated).
            fresh = {ob.key(c) for c in shared_objs if ob.allocation(c) is None}
            self.s.write_claims(pg, [logic.PodClaim(ob.key(c), c, reserved=False) for c in shared_objs],
                                {k: a for k, a in shared_alloc.items() if k in fresh}, shared_written,
                                reference=gang.podgroup_reference(pg))
            for pod, _node, allocs in placed:
                self.s.write_claims(pod, gathered_by_pod[ob.key(pod)].claims, allocs, written)
            for pod, _node, _ in placed:
                current = self.s.kube.get_pod(ob.namespace(pod), ob.name(pod))
                if ob.uid(current) != ob.uid(pod) or ob.deleting(current) or ob.pod_node(current):
                    raise AttemptFailed(f"pod {ob.key(pod)} changed during the attempt")
            for pod, node, _ in placed:
                self.s.bind(pod, node)
                bound.add(ob.key(pod))
        except Exception as err:
            if bound:
                # Binds cannot be undone: keep what is bound (the other pods' claims stay
                # allocated for them) and place the rest in the next attempt.
                log.info("podgroup %s: a bind failed after the first: %s; retrying the rest", ob.key(pg), err)
                self.s.hold_reservation(reservation, everything)
                self.s.settle(key, everything, unbound=[k for k in pod_keys if k not in bound])
                raise Retry(f"podgroup {ob.key(pg)}: {err}") from err
            self.s.undo(key, reservation, [
                *((pod, [r for r in written if r.key in gathered_keys(gathered_by_pod[ob.key(pod)])]) for pod, _, _ in reversed(placed)),
                (pg, shared_written),
            ], pods=pod_keys)
            log.info("podgroup %s: attempt rolled back: %s", ob.key(pg), err)
            if isinstance(err, kube.NotFound):
                return "error"
            raise
        self.s.settle(key, everything)
        self.s.pending.scheduled(key)
        self.s.hold_reservation(reservation, everything)
        for pod, node, _ in placed:
            self.s.metrics.bindings.inc()
            self.s.events.emit(pod, "Pod", type_="Normal", reason="Scheduled", message=f"Successfully assigned {ob.key(pod)} to {node}")
        self._set_condition(pg, gang.SCHEDULED, "")
        log.info("podgroup %s: %d pods bound%s", ob.key(pg), len(placed), f" in {resp.domain.key}={resp.domain.value}" if resp.domain.key else "")
        return "scheduled"

    # --- outcome ------------------------------------------------------------------------------

    def _unschedulable(self, pg: Obj, pods: Sequence[Obj], message: str, key: str, *, by_solver: bool = False) -> str:
        full = f"pod group is unschedulable: {message}"
        self._set_condition(pg, gang.UNSCHEDULABLE, full)
        for pod in pods:
            patch = logic.unschedulable_patch(pod, full, now=self.s.clock())
            if patch is None:
                continue
            try:
                self.s.pods.store.assume(self.s.kube.patch_pod_status(ob.namespace(pod), ob.name(pod), patch))
            except kube.ApiError as err:
                log.info("pod %s: cannot record PodScheduled=False: %s", ob.key(pod), err)
            self.s.events.emit(pod, "Pod", type_="Warning", reason="FailedScheduling", message=full)
        self._park(key, by_solver=by_solver)
        log.info("podgroup %s: unschedulable: %s", ob.key(pg), message)
        return "unschedulable"

    def _park(self, key: str, *, by_solver: bool = False) -> None:
        verdict = self.s.pending.unschedulable(key, by_solver=by_solver)
        if verdict.retry_after is not None:
            self.s.queue.add_after(key, verdict.retry_after)

    def _set_condition(self, pg: Obj, reason: str, message: str) -> None:
        patch = gang.condition_patch(pg, reason=reason, message=message, now=self.s.clock())
        if patch is None:
            return
        try:
            updated = self.s.kube.patch_pod_group_status(ob.namespace(pg), ob.name(pg), patch)
            self.groups.store.assume(updated)
        except kube.Conflict:
            # Stale: the informer brings the newer PodGroup; the next attempt writes again.
            self.s.queue.add_rate_limited(gang.group_key(ob.namespace(pg), ob.name(pg)))
        except kube.ApiError as err:
            log.info("podgroup %s: cannot record %s: %s", ob.key(pg), gang.CONDITION, err)


def gathered_keys(gathered: logic.Gathered) -> set[str]:
    return {c.key for c in gathered.claims}
