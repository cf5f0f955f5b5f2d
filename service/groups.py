"""Gang placement in the service: ``ScheduleGroup`` decoded, solved, verified and reserved.

API:
- ``GroupSpec``: the caller's group, decoded (pods with their claims, shared claims, quorum,
  topology key, rooms, path); ``decode_group(engine, msg) -> GroupSpec``.
- ``schedule_group(engine, spec, *, objects=(), opts, reserve, ttl, deadline, caller)``: on the
  server's inventory (with every reservation in flight counted) or an inline one.
- ``place_offline(resolved, typed, bound, ...)``: a resolved PodGroup on objects alone (the
  offline CLI and the gang comparison).
- ``run_group(engine, snap, build, *, inline, reserve, ttl, deadline, caller) -> GroupAnswer``:
  the one path both ``ScheduleGroup`` and the offline CLI (``dra-solver schedule --group``)
  take: ``build(snapshot, in_flight)`` makes the core's ``GroupRequest``; the core places the
  group (``model.schedule_group``, with the engine's per-node solves and CEL environments);
  ``model.check_group`` verifies the answer against the same snapshot (a violation withholds
  it: ``CheckFailed``); with ``reserve`` every device of the answer is held under one
  reservation (``ReservationStore.reserve_group``), and a conflict with a concurrent caller
  solves again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dra_solver import model
from dra_solver.model import (
    GROUP_PATHS,
    AllocatedState,
    GroupOutcome,
    GroupPath,
    GroupPod,
    GroupRequest,
    InvalidInput,
    NodeRoom,
    SolveTimeout,
)
from dra_solver.model import objects as o
from dra_solver.service import engine as e
from dra_solver.service.admission import check_admin_access
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.inventory import Snapshot, StaticSource
from dra_solver.service.metrics import Metrics
from dra_solver.service.quoting import shown
from dra_solver.service.reservations import Reservation, ReservationConflict, ReservationStore

MAX_GROUP_PODS = model.MAX_GROUP_PODS


@dataclass(frozen=True, slots=True)
class GroupSpec:
    pod_group: str
    pods: tuple[GroupPod, ...]
    shared_claims: tuple[o.ResourceClaim, ...]
    min_count: int
    topology_key: str = ""
    rooms: dict[str, NodeRoom] | None = None
    path: GroupPath = "auto"


@dataclass(frozen=True, slots=True)
class GroupAnswer:
    request: GroupRequest
    outcome: GroupOutcome
    generation: int
    reservation: Reservation | None = None


def decode_group(engine: e.Engine, msg: pb.ScheduleGroupRequest, *, opts: e.SolveOptions, max_pods: int = MAX_GROUP_PODS) -> GroupSpec:
    if not msg.pods:
        raise InvalidInput("", ("pods",), "Required value: at least one pod")
    if len(msg.pods) > max_pods:
        raise e.LimitExceeded(f"pods: Too many: {len(msg.pods)}: must have at most {max_pods} items")
    if msg.min_count < 1:
        raise InvalidInput("", ("minCount",), f"Invalid value: {msg.min_count}: must be greater than zero")
    path = msg.path or "auto"
    if path not in GROUP_PATHS:
        raise InvalidInput("", ("path",), f"Unsupported value: {shown(path)}: supported values: {', '.join(GROUP_PATHS)}")
    shared = engine.decode_claims(list(msg.shared_claims), field_name="sharedClaims", allow_allocated=True, validate=opts.validate) if msg.shared_claims else ()
    seen = {c.ref: "sharedClaims" for c in shared}
    pods: list[GroupPod] = []
    names: set[str] = set()
    for i, p in enumerate(msg.pods):
        where = f"pods[{i}]"
        if not p.name:
            raise InvalidInput("", ("pods", i, "name"), "Required value")
        if p.name in names:
            raise InvalidInput("", ("pods", i, "name"), f"Duplicate value: {shown(p.name)}")
        names.add(p.name)
        claims = engine.decode_claims(list(p.claims), field_name=f"{where}.claims", validate=opts.validate) if p.claims else ()
        for claim in claims:
            if claim.ref in seen:
                raise InvalidInput(claim.describe(), ("metadata", "name"), f"Duplicate value: {shown(claim.ref)}: also in {seen[claim.ref]}", source=f"{where}.claims")
            seen[claim.ref] = where
        for j, ref in enumerate(p.shared_claims):
            if ref not in {c.ref for c in shared}:
                raise InvalidInput("", ("pods", i, "sharedClaims", j), f"Not found: {shown(ref)}: not one of sharedClaims")
        if p.cpu_millis < 0 or p.memory_bytes < 0:
            raise InvalidInput("", ("pods", i), "Invalid value: cpuMillis and memoryBytes must not be negative")
        nodes = tuple(p.nodes) if (p.nodes or p.nodes_given) else None
        pods.append(GroupPod(p.name, claims, tuple(p.shared_claims), nodes, p.cpu_millis, p.memory_bytes))
    rooms: dict[str, NodeRoom] = {}
    for room in msg.nodes:
        rooms[room.node] = NodeRoom(
            room.cpu_millis if room.HasField("cpu_millis") else None,
            room.memory_bytes if room.HasField("memory_bytes") else None,
            room.pods if room.HasField("pods") else None,
        )
    return GroupSpec(msg.pod_group, tuple(pods), tuple(shared), msg.min_count, msg.topology_key, rooms, path)


def schedule_group(
    engine: e.Engine,
    spec: GroupSpec,
    *,
    objects: Sequence[bytes] = (),
    opts: e.SolveOptions | None = None,
    reserve: bool = False,
    ttl: float = 0.0,
    deadline: float | None = None,
    caller: str = "",
) -> GroupAnswer:
    opts = opts or e.SolveOptions()
    inline = bool(objects)
    if inline and reserve:
        raise InvalidInput("", ("reserve",), "Forbidden: cannot reserve against an inline inventory")
    snap = engine.inline_snapshot(objects, validate=opts.validate) if inline else engine.current()
    gates = engine.gates_for(opts.feature_gates)
    everything = [*spec.shared_claims, *(c for p in spec.pods for c in p.claims)]

    def build(snapshot: Snapshot, in_flight: AllocatedState) -> GroupRequest:
        check_admin_access(everything, snapshot.namespaces)
        return GroupRequest(
            name=spec.pod_group,
            pods=spec.pods,
            index=snapshot.index,
            shared_claims=spec.shared_claims,
            min_count=spec.min_count,
            topology_key=spec.topology_key,
            rooms=spec.rooms or {},
            in_flight=in_flight,
            gates=gates,
            policy=opts.policy,
            path=spec.path,
        )

    return run_group(engine, snap, build, inline=inline, reserve=reserve, ttl=ttl, deadline=deadline, caller=caller)


def place_offline(
    resolved: model.ResolvedGroup, typed: Sequence[o.TypedObject], bound: Sequence[dict[str, Any]], *, min_count: int, policy: str,
    gates: str, timeout: float, path: GroupPath = "auto",
) -> GroupAnswer:
    """A resolved PodGroup placed on a snapshot of ``typed`` objects alone (no server, nothing
    reserved): ``dra-solver schedule --group`` and the gang comparison's same-state answers.
    ``bound``: Pods already on nodes (they use up their node's room)."""
    source = StaticSource(typed, name="files")
    source.start()
    engine = e.Engine(source=source, reservations=ReservationStore(), metrics=Metrics())
    feature_gates = engine.gates_for(gates)

    def build(snap: Snapshot, in_flight: AllocatedState) -> GroupRequest:
        return model.podgroup_request(
            resolved, index=snap.index, nodes=snap.inventory.nodes, bound=bound, in_flight=in_flight, gates=feature_gates,
            policy=policy, path=path, min_count=min_count,
        )

    return run_group(engine, engine.current(), build, inline=True, deadline=engine.clock() + timeout)


def run_group(
    engine: e.Engine,
    snap: Snapshot,
    build: Callable[[Snapshot, AllocatedState], GroupRequest],
    *,
    inline: bool,
    reserve: bool = False,
    ttl: float = 0.0,
    deadline: float | None = None,
    caller: str = "",
) -> GroupAnswer:
    for attempt in range(engine.limits.reserve_retries + 1):
        version = engine.reservations.version
        in_flight = AllocatedState() if inline else engine.reservations.state()
        request = build(snap, in_flight)
        request = replace(request, time_limit=_search_seconds(engine.time_limit(deadline)), device_cache=None if inline else engine.device_cache())
        try:
            outcome = model.schedule_group(request, cel=engine.cel_for(request.gates), solve=engine.solve, clock=engine.clock)
        except SolveTimeout as err:
            raise e.DeadlineExceeded(str(err)) from None
        verify(engine, request, outcome)
        if not reserve or not outcome.placed:
            return GroupAnswer(request, outcome, snap.generation)
        try:
            reservation = _reserve(engine, request, outcome, ttl=ttl, solved_at=version, caller=caller)
        except ReservationConflict:
            if attempt == engine.limits.reserve_retries:
                raise
            snap = engine.current()
            continue
        return GroupAnswer(request, outcome, snap.generation, reservation)
    raise AssertionError("unreachable")


def _search_seconds(limit: float) -> float:
    """The group search's share of the call's time: a tenth (at most 1 s) is kept for turning
    the answer into claims and checking it with the validator, which at thousands of nodes
    and dozens of pods takes a few hundred milliseconds."""
    return limit - min(1.0, 0.1 * limit)


def verify(engine: e.Engine, request: GroupRequest, outcome: GroupOutcome) -> None:
    """``model.check_group`` on the answer; any violation withholds it (fail closed)."""
    try:
        problems = model.check_group(request, outcome, cel=engine.cel_for(request.gates))
    except Exception as err:
        raise e.CheckFailed(f"group placement failed independent validation: {err}") from err
    if problems:
        raise e.CheckFailed("; ".join(str(p) for p in problems))


def results_of(request: GroupRequest, outcome: GroupOutcome) -> list[tuple[o.ResourceClaim, o.AllocationResult]]:
    """Every claim the answer allocates, with its result: pods' claims, then open shared ones."""
    pods = {p.name: p for p in request.pods}
    out: list[tuple[o.ResourceClaim, o.AllocationResult]] = []
    for placed in outcome.pods:
        out.extend(zip(pods[placed.name].claims, placed.results, strict=True))
    for claim, result in zip(request.shared_claims, outcome.shared, strict=True):
        if not claim.allocated:
            out.append((claim, result))
    return out


def _reserve(engine: e.Engine, request: GroupRequest, outcome: GroupOutcome, *, ttl: float, solved_at: int, caller: str) -> Reservation:
    pairs = results_of(request, outcome)
    state = AllocatedState.from_claims(c.model_copy(update={"status": o.ResourceClaimStatus(allocation=r)}) for c, r in pairs)
    for claim, _ in pairs:
        if len(claim.ref) > e.MAX_POD_REF or len(claim.metadata.uid or "") > 128:
            raise InvalidInput(claim.describe()[:100], ("metadata",), "Invalid value: name, namespace or uid too long to reserve")
    if len(request.name) > e.MAX_POD_REF:
        raise InvalidInput("", ("podGroup",), f"Too long: may not be more than {e.MAX_POD_REF} bytes")

    def validate(others: AllocatedState) -> None:
        # Still valid with every other allocation in flight counted.
        try:
            verify(engine, replace(request, in_flight=others), outcome)
        except e.CheckFailed as err:
            raise ReservationConflict(f"the group's allocation conflicts with one in flight: {err}") from err

    return engine.reservations.reserve_group(
        pod_group=request.name,
        nodes=[p.node for p in outcome.pods],
        claims=[(c.ref, c.metadata.uid or "") for c, _ in pairs],
        state=state,
        taken=request.index.allocated,
        latest_taken=lambda: engine.source.snapshot().index.allocated,
        ttl=ttl,
        validate=validate,
        solved_at=solved_at,
        caller=caller,
    )
