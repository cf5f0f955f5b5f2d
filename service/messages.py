"""Conversions between the engine's answers and ``drasolver.v1`` protobuf messages.

Kubernetes objects go out as compact JSON of their API form (camelCase, unset fields omitted),
exactly what a client in any language decodes with its own resource.k8s.io/v1 types.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from dra_solver.model import (
    ALLOCATORS,
    VALIDATION_MODES,
    AllocatorName,
    ExplainAnswer,
    InvalidInput,
    Restriction,
    SolveStats,
    ValidationMode,
)
from dra_solver.model import objects as o
from dra_solver.service import engine as e
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.groups import GroupAnswer
from dra_solver.service.quoting import clip, shown
from dra_solver.service.reservations import Reservation


def to_json(model: o.K8sModel) -> bytes:
    """The object's API JSON, fields in the API's order (as an API server writes them)."""
    return model.model_dump_json(by_alias=True, exclude_none=True).encode()


def solve_options(msg: pb.SolveOptions) -> e.SolveOptions:
    allocator = _ALLOCATORS.get(msg.allocator or "cpsat")
    if allocator is None:
        supported = ", ".join(f'"{a}"' for a in ALLOCATORS)
        raise InvalidInput("", ("options", "allocator"), f"Unsupported value: {shown(msg.allocator)}: supported values: {supported}")
    return e.SolveOptions(allocator=allocator, policy=msg.policy, feature_gates=msg.feature_gates, validate=_validation(msg.validate))


def _validation(text: str) -> ValidationMode:
    """``options.validate``: kubectl's ``--validate`` values; empty means strict."""
    for mode in VALIDATION_MODES:
        if text == mode:
            return mode
    if not text:
        return "strict"
    supported = ", ".join(f'"{m}"' for m in VALIDATION_MODES)
    raise InvalidInput("", ("options", "validate"), f"Unsupported value: {shown(text)}: supported values: {supported}")


_ALLOCATORS: dict[str, AllocatorName] = {a: a for a in ALLOCATORS}


class _Recent:
    """The messages of the last few statistics objects, by identity (each held): an answer
    reused on other nodes carries the same statistics object call after call."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._entries: OrderedDict[int, tuple[SolveStats, pb.SolverStats]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, s: SolveStats) -> pb.SolverStats | None:
        with self._lock:
            hit = self._entries.get(id(s))
            return hit[1] if hit is not None and hit[0] is s else None

    def put(self, s: SolveStats, message: pb.SolverStats) -> None:
        with self._lock:
            self._entries[id(s)] = (s, message)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


_RECENT_STATS = _Recent()


def stats(s: SolveStats | None) -> pb.SolverStats:
    """The message of ``s`` (shared for a reused answer's statistics: copied wherever it is set)."""
    if s is None:
        return pb.SolverStats()
    if s.reused:
        known = _RECENT_STATS.get(s)
        if known is not None:
            return known
    out = _stats(s)
    if s.reused:
        _RECENT_STATS.put(s, out)
    return out


def _stats(s: SolveStats) -> pb.SolverStats:
    out = pb.SolverStats(
        allocator=s.allocator,
        status=s.status,
        wall_seconds=s.wall_seconds,
        variables=s.variables,
        constraints=s.constraints,
        steps=s.steps,
        policy=s.policy,
        parameters={str(k): str(v) for k, v in s.parameters.items()},
        reused=s.reused,
    )
    if s.objective is not None:
        out.objective = float(s.objective)
    if s.best_bound is not None:
        out.best_bound = float(s.best_bound)
    if s.gap is not None:
        out.gap = float(s.gap)
    return out


def claims(answers: tuple[e.ClaimAnswer, ...]) -> list[pb.ClaimAllocation]:
    out = []
    for a in answers:
        msg = pb.ClaimAllocation(claim=a.claim.ref, uid=a.claim.metadata.uid or "")
        if a.result is not None:
            msg.status = pb.CLAIM_STATUS_ALLOCATED
            msg.allocation = to_json(a.result)
        else:
            msg.status = pb.CLAIM_STATUS_UNSATISFIABLE
        out.append(msg)
    return out


def reservation(r: Reservation | None, *, now: float) -> pb.Reservation | None:
    if r is None:
        return None
    return pb.Reservation(
        id=r.id,
        node=r.node,
        claims=list(r.claim_refs),
        expires_in_seconds=max(0.0, r.expires_at - now),
        pod=r.pod,
        nodes=list(r.nodes),
        pod_group=r.pod_group,
    )


def allocate_response(a: e.AllocateAnswer, *, now: float) -> pb.AllocateResponse:
    return pb.AllocateResponse(
        allocated=a.allocated,
        claims=claims(a.claims),
        score=a.score,
        reason=a.reason,
        stats=stats(a.stats),
        node=a.node,
        reservation=reservation(a.reservation, now=now),
        inventory_generation=a.generation,
    )


_VERDICTS = {
    "feasible": pb.VERDICT_FEASIBLE,
    "unschedulable": pb.VERDICT_UNSCHEDULABLE,
    "not-evaluated": pb.VERDICT_NOT_EVALUATED,
}


def schedule_response(a: e.ScheduleAnswer, *, now: float, chosen_verdict_only: bool = False) -> pb.ScheduleResponse:
    s = a.stats
    verdicts = [v for v in a.verdicts if v.node == a.node] if chosen_verdict_only and a.node else a.verdicts
    return pb.ScheduleResponse(
        node=a.node,
        claims=claims(a.claims),
        score=a.score,
        nodes=[pb.NodeVerdict(node=v.node, verdict=_VERDICTS[v.verdict], score=v.score, reason=v.reason) for v in verdicts],
        schedule_stats=pb.ScheduleStats(
            nodes_total=s.nodes_total,
            nodes_evaluated=s.nodes_evaluated,
            nodes_pruned=s.nodes_pruned,
            nodes_feasible=s.nodes_feasible,
            groups=s.groups,
            solves=s.solves,
            cache_hits=s.cache_hits,
            wall_seconds=s.wall_seconds,
        ),
        stats=stats(a.solve_stats),
        reservation=reservation(a.reservation, now=now),
        reason=a.reason,
        inventory_generation=a.generation,
    )


def explain_response(x: ExplainAnswer) -> pb.ExplainResponse:
    def reason(r: Restriction) -> pb.Reason:
        return pb.Reason(kind=r.kind, claim=r.claim, request=r.request, devices=list(r.devices), message=r.message)

    return pb.ExplainResponse(
        allocatable=x.allocatable,
        reasons=[reason(r) for r in x.reasons],
        fixes=[reason(r) for r in x.fixes],
        summary=x.summary,
        node=x.node,
        minimal=x.minimal,
        stats=stats(x.stats),
        no_fix=x.no_fix,
        limit=x.limit,
    )


def inventory_response(status: dict[str, Any]) -> pb.GetInventoryResponse:
    return pb.GetInventoryResponse(
        source=status["source"],
        ready=status["ready"],
        generation=status["generation"],
        objects=status["objects"],
        nodes=status["nodes"],
        reservations=status["reservations"],
        invalid_pools=[
            pb.InvalidPool(driver=clip(d, 256), pool=clip(p, 256), reason=clip(reason, 512))
            for (d, p), reason in sorted(status.get("invalid_pools", {}).items())
        ],
        problems=[
            pb.InventoryProblem(
                source=clip(x.source, 256),
                kind=x.kind,
                name=x.name,
                detail=x.detail,
                invalid_pool=f"{x.pool[0]}/{x.pool[1]}" if x.pool else "",
            )
            for x in status.get("problems", ())
        ],
        problem_count=status.get("problem_count", 0),
    )


MAX_TEXT = 4096
"""Characters of one explanation text in a ScheduleGroup answer."""


def _domain(key: str, value: str | None) -> pb.TopologyDomain | None:
    return pb.TopologyDomain(key=key, value=value) if key and value is not None else None


def group_response(a: GroupAnswer, *, now: float) -> pb.ScheduleGroupResponse:
    """``ScheduleGroup``'s answer: each placed pod's node and claims, the shared claims, the
    domain; when not placed, the group-level explanation."""
    request, outcome = a.request, a.outcome
    pods = {p.name: p for p in request.pods}
    s = outcome.stats
    out = pb.ScheduleGroupResponse(
        placed=outcome.placed,
        score=outcome.score,
        pods_placed=outcome.pods_placed,
        reason=clip(outcome.reason, MAX_TEXT),
        inventory_generation=a.generation,
        stats=pb.SolverStats(allocator="cpsat", status=s.status, wall_seconds=s.wall_seconds, variables=s.variables,
                             constraints=s.constraints, policy=request.policy, gap=float(s.gap)),
        group_stats=pb.ScheduleGroupStats(
            domains_total=s.domains_total, domains_evaluated=s.domains_evaluated, domains_feasible=s.domains_feasible,
            node_classes=s.node_classes, pod_classes=s.pod_classes, patterns=s.patterns, path=s.path, solves=s.solves,
            wall_seconds=s.wall_seconds,
        ),
    )
    domain = _domain(request.topology_key, outcome.domain)
    if domain is not None and outcome.placed:
        out.domain.CopyFrom(domain)
    for placed in outcome.pods:
        msg = pb.PodPlacement(name=placed.name, node=placed.node, score=placed.score)
        for claim, result in zip(pods[placed.name].claims, placed.results, strict=True):
            msg.claims.append(pb.ClaimAllocation(claim=claim.ref, uid=claim.metadata.uid or "", status=pb.CLAIM_STATUS_ALLOCATED, allocation=to_json(result)))
        out.pods.append(msg)
    if outcome.placed:
        for claim, result in zip(request.shared_claims, outcome.shared, strict=True):
            out.shared_claims.append(pb.ClaimAllocation(claim=claim.ref, uid=claim.metadata.uid or "", status=pb.CLAIM_STATUS_ALLOCATED, allocation=to_json(result)))
    x = outcome.explanation
    if x is not None:
        ex = pb.GroupExplanation(pods_placeable=x.pods_placeable, min_count=x.min_count, summary=clip(x.summary, MAX_TEXT))
        closest = _domain(request.topology_key, x.closest)
        if closest is not None:
            ex.closest.CopyFrom(closest)
        for r in x.reasons:
            ex.reasons.append(pb.Reason(kind=r.kind, claim=r.claim, message=clip(r.message, MAX_TEXT)))
        for d in x.domains:
            ex.domains.append(pb.DomainVerdict(value=d.value, nodes=d.nodes, pods_placeable=d.pods_placeable, reason=clip(d.reason, MAX_TEXT)))
        out.explanation.CopyFrom(ex)
    held = reservation(a.reservation, now=now)
    if held is not None:
        out.reservation.CopyFrom(held)
    return out
