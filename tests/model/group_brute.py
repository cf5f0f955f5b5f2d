"""A brute-force reference for gang placement on tiny clusters.

Enumerates every map of pods to nodes (or unplaced) inside one domain and every way to
allocate the open shared claim (each set of devices it could get: the claim allocated on each
node with every other device marked in use), allocates each node's pods with the per-node
allocator, and keeps the best ``GroupObjective``. Per-pod devices must be node-local (then the
nodes of one map are independent); the policy levels come from the same definition the
models use (``policy_levels``) but every figure is recomputed from the results here.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from dra_solver import model
from dra_solver.model import objects as o
from dra_solver.model.cpsat.group_problem import policy_levels


@dataclass(frozen=True)
class Best:
    feasible: bool
    objective: model.GroupObjective | None = None


def _state(results: Sequence[o.AllocationResult]) -> model.AllocatedState:
    return model.AllocatedState.from_claims(o.ResourceClaim(status=o.ResourceClaimStatus(allocation=r)) for r in results)


def _request(req: model.GroupRequest, node: str, claims: Sequence[o.ResourceClaim], extra: model.AllocatedState) -> model.AllocationRequest:
    idx = req.index
    return model.AllocationRequest(
        claims=tuple(claims),
        node=idx.nodes_by_name[node],
        inventory=idx.node_inventory(node, req.in_flight.merge(extra)),
        gates=req.gates,
        policy=req.policy,
        time_limit=None,
    )


def _units(req: model.GroupRequest, node: str) -> model.NodeUnits:
    view = req.index.view(node)
    return model.NodeUnits.of([s for s in view.slices if s.spec.node_name == node] if view else [])


def shared_options(req: model.GroupRequest) -> list[o.AllocationResult | None]:
    """Every distinct allocation of the (at most one) open shared claim."""
    open_shared = [c for c in req.shared_claims if not c.allocated]
    if not open_shared:
        return [None]
    assert len(open_shared) == 1, "the brute force handles one open shared claim"
    claim = open_shared[0]
    count = sum((r.exactly.count or 1) for r in claim.spec.devices.requests or [] if r.exactly)
    devices = sorted(
        model.DeviceID(s.spec.driver, s.spec.pool.name, d.name) for s in req.index.inventory.slices for d in s.spec.devices or []
    )
    seen: dict[frozenset[model.DeviceID], o.AllocationResult] = {}
    for host in sorted(req.index.nodes_by_name):
        for chosen in itertools.combinations(devices, count):
            others = frozenset(d for d in devices if d not in chosen)
            extra = model.AllocatedState(devices=others)
            outcome = model.allocate(_request(req, host, [claim], extra), validate=False)
            if outcome.allocated:
                got = frozenset(_state(outcome.results).devices)
                seen.setdefault(got, outcome.results[0])
    return list(seen.values())


def brute_force(req: model.GroupRequest) -> Best:
    _CACHE.clear()
    idx = req.index
    key = req.topology_key
    domains: dict[str, list[str]] = {}
    for name, node in sorted(idx.nodes_by_name.items()):
        labels = node.metadata.labels or {}
        if key and key not in labels:
            continue
        domains.setdefault(labels.get(key, "") if key else "", []).append(name)
    fixed = {c.ref: c.status.allocation for c in req.shared_claims if c.allocated and c.status}
    open_refs = [c.ref for c in req.shared_claims if not c.allocated]
    best: model.GroupObjective | None = None
    options = shared_options(req)
    for rank, domain in enumerate(sorted(domains)):
        nodes = domains[domain]
        choices = [[None, *[n for n in nodes if p.nodes is None or n in p.nodes]] for p in req.pods]
        for assignment in itertools.product(*choices):
            placed = sum(1 for n in assignment if n is not None)
            if placed < req.min_count:
                continue
            if not _room_ok(req, assignment):
                continue
            for shared in options:
                results = {ref: shared for ref in open_refs}
                results.update(fixed)  # type: ignore[arg-type]
                found = _evaluate(req, assignment, results, shared, domain=domain, nodes=nodes, rank=rank)
                if found is not None and (best is None or found.key() > best.key()):
                    best = found
    return Best(best is not None, best)


_CACHE: dict[tuple[object, ...], model.AllocationOutcome] = {}


def _solve_cached(req: model.GroupRequest, node: str, claims: Sequence[o.ResourceClaim], extra: model.AllocatedState) -> model.AllocationOutcome:
    key = (id(req), node, tuple(id(c) for c in claims), extra.devices, extra.shared)
    found = _CACHE.get(key)
    if found is None:
        if len(_CACHE) > 20_000:
            _CACHE.clear()
        found = _CACHE[key] = model.allocate(_request(req, node, claims, extra), validate=False)
    return found


def _room_ok(req: model.GroupRequest, assignment: Sequence[str | None]) -> bool:
    for node in {n for n in assignment if n is not None}:
        pods = [p for p, n in zip(req.pods, assignment, strict=True) if n == node]
        room = req.rooms.get(node)
        if room is None:
            continue
        if room.pods is not None and len(pods) > room.pods:
            return False
        if room.cpu_millis is not None and sum(p.cpu_millis for p in pods) > room.cpu_millis:
            return False
        if room.memory_bytes is not None and sum(p.memory_bytes for p in pods) > room.memory_bytes:
            return False
    return True


def _evaluate(
    req: model.GroupRequest,
    assignment: Sequence[str | None],
    shared_results: dict[str, o.AllocationResult | None],
    shared: o.AllocationResult | None,
    *,
    domain: str,
    nodes: Sequence[str],
    rank: int,
) -> model.GroupObjective | None:
    idx = req.index
    for pod, node in zip(req.pods, assignment, strict=True):
        if node is None:
            continue
        for ref in pod.shared:
            result = shared_results.get(ref)
            if result is not None and result.node_selector is not None and not model.node_selector_matches(result.node_selector, idx.nodes_by_name[node]):
                return None
    extra = _state([shared]) if shared is not None else model.AllocatedState()
    score = model.first_available_score([c for c in req.shared_claims if not c.allocated], [shared] if shared is not None else [])
    touched_total = 0
    used = 0
    opened = 0
    used_idle = 0
    placed_results: dict[str, list[o.AllocationResult]] = {}
    for node in sorted({n for n in assignment if n is not None}):
        claims = [c for p, n in zip(req.pods, assignment, strict=True) if n == node for c in p.claims]
        units = _units(req, node)
        before = units.touched(idx.in_use(node).merge(req.in_flight))
        used += 1
        opened += 0 if before else 1
        used_idle += int(units.total) - len(before)
        if not claims:
            continue
        outcome = _solve_cached(req, node, claims, extra)
        if not outcome.allocated:
            return None
        score += outcome.score
        placed_results[node] = list(outcome.results)
    for node in nodes:
        units = _units(req, node)
        before_state = idx.in_use(node).merge(req.in_flight)
        before = units.touched(before_state)
        after = units.touched(before_state.merge(extra).merge(_state(placed_results.get(node, []))))
        touched_total += len(after - before)
    domain_idle = 0
    for node in nodes:
        units = _units(req, node)
        domain_idle += int(units.total) - len(units.touched(idx.in_use(node).merge(req.in_flight)))
    levels = policy_levels(
        req.policy, keyed=bool(req.topology_key), domain_idle=domain_idle, opened_idle=opened, used=used,
        used_idle=used_idle, touched=touched_total, domain_rank=rank,
    )
    return model.GroupObjective(sum(1 for n in assignment if n is not None), score, tuple(levels))
