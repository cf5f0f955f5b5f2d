"""Conversions between the engine's answers and ``drasolver.v1`` protobuf messages.

Kubernetes objects go out as compact JSON of their API form (camelCase, unset fields omitted),
exactly what a client in any language decodes with its own resource.k8s.io/v1 types.
"""

from __future__ import annotations

import json
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
from dra_solver.service.quoting import clip, shown
from dra_solver.service.reservations import Reservation


def to_json(model: o.K8sModel) -> bytes:
    return json.dumps(model.to_api(), separators=(",", ":"), sort_keys=True).encode()


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


def stats(s: SolveStats | None) -> pb.SolverStats:
    if s is None:
        return pb.SolverStats()
    out = pb.SolverStats(
        allocator=s.allocator,
        status=s.status,
        wall_seconds=s.wall_seconds,
        variables=s.variables,
        constraints=s.constraints,
        steps=s.steps,
        policy=s.policy,
        parameters={str(k): str(v) for k, v in s.parameters.items()},
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


def schedule_response(a: e.ScheduleAnswer, *, now: float) -> pb.ScheduleResponse:
    s = a.stats
    return pb.ScheduleResponse(
        node=a.node,
        claims=claims(a.claims),
        score=a.score,
        nodes=[pb.NodeVerdict(node=v.node, verdict=_VERDICTS[v.verdict], score=v.score, reason=v.reason) for v in a.verdicts],
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
