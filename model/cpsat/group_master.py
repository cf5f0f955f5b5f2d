"""The aggregated path: which sets of pods fit one node, per node class; then a small master.

API:
- ``pattern_table(problem, *, cap) -> PatternTable | None``: per node class, every multiset
  of pod classes that fits one node of it (``Pattern``: pods per class, FirstAvailable score,
  whole units it newly touches); each is one per-node solve on the class's first node, and a
  multiset is only extended when it fits (supersets of one that does not fit never do). None
  when a class has more than ``cap`` patterns (the joint model is used then).
- ``shared_by_domain(problem) -> dict[domain, AllocationOutcome]``: the open shared claims
  allocated together on the domain's first node (exact under the conditions below).
- ``solve_master(problem, table, shared, *, domains, min_count, policy) -> MasterAnswer``:
  integer ``w[k, pattern]`` (nodes of class k that get that pattern), one domain ``y[d]``,
  pods placed per class, the group objective (``model.group_request.GroupObjective``) in
  stages (``model.cpsat.group_solve``); ``min_count=None`` drops the quorum (explanations).
- ``disaggregate(problem, answer, table) -> list[(node, [pod index])]``: nodes of each class
  in name order take the chosen patterns, pods of each class in name order fill them.

Exact when (``aggregation_exact``): every device a pod's own claims may use is local to the
pod's node (its pool belongs to that node alone), the shared claims' devices are in other
pools, and within each domain every node sees the same devices for the shared claims. Then
nodes do not interact except through the shared claims, which every node of the domain
reaches: a node's verdict depends only on the multiset of pods it gets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome
from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat.group_problem import (
    GroupProblem,
    PodInfo,
    level_spans,
    policy_levels,
    room_fits,
)
from dra_solver.model.cpsat.group_solve import Level, solve_stages, stages_of
from dra_solver.model.group_request import GroupPod, NodeRoom
from dra_solver.model.stats import SolveStats

TRIVIAL = SolveStats(allocator="cpsat", status="TRIVIAL", wall_seconds=0.0)

MAX_PATTERNS = 64
"""Patterns per node class before the aggregated path gives way to the joint model."""


@dataclass(frozen=True, slots=True)
class Pattern:
    counts: tuple[int, ...]
    """Pods per pod class on one node."""
    score: int
    touched: int
    """Whole units newly in use on the node."""

    @property
    def pods(self) -> int:
        return sum(self.counts)


@dataclass
class PatternTable:
    patterns: dict[int, list[Pattern]] = field(default_factory=dict)
    """Node class -> its patterns (the empty one left out)."""

    def __len__(self) -> int:
        """Distinct patterns (classes alike in several domains share theirs)."""
        return sum(len(p) for p in {id(p): p for p in self.patterns.values()}.values())


@dataclass
class MasterAnswer:
    status: str
    domain: str = ""
    counts: dict[tuple[int, int], int] = field(default_factory=dict)
    """(node class, pattern index) -> nodes that get it."""
    pods: int = 0
    score: int = 0
    levels: tuple[int, ...] = ()
    gap: float = 0.0
    solves: int = 0
    variables: int = 0
    constraints: int = 0


def _pods_of(problem: GroupProblem, counts: Sequence[int]) -> list[PodInfo]:
    out: list[PodInfo] = []
    for c, n in enumerate(counts):
        out.extend(problem.pods[i] for i in problem.pod_classes[c][:n])
    return out


def _room_ok(pods: Sequence[PodInfo], room: NodeRoom) -> bool:
    total = GroupPod(
        name="",
        cpu_millis=sum(p.pod.cpu_millis for p in pods),
        memory_bytes=sum(p.pod.memory_bytes for p in pods),
    )
    return room_fits(total, room, count=1) and (room.pods is None or room.pods >= len(pods))


def pattern_table(problem: GroupProblem, *, cap: int = MAX_PATTERNS, classes: Iterable[int] | None = None) -> PatternTable | None:
    table = PatternTable()
    sizes = [len(members) for members in problem.pod_classes]
    wanted = range(len(problem.node_classes)) if classes is None else classes
    known: dict[tuple[object, ...], list[Pattern]] = {}
    for k in wanted:
        node = problem.node_classes[k][0]
        same = known.get(problem.solve_keys[node])
        if same is not None:
            table.patterns[k] = same  # a class alike in another domain: same patterns
            continue
        room = problem.nodes[node].room
        alone = [c for c, members in enumerate(problem.pod_classes) if problem.fits(problem.pods[members[0]], node).fits]
        found: list[Pattern] = []
        stack: list[tuple[tuple[int, ...], int]] = [(tuple(0 for _ in sizes), 0)]
        while stack:
            counts, start = stack.pop()
            for c in alone:
                if c < start or counts[c] >= sizes[c]:
                    continue
                grown = tuple(n + 1 if i == c else n for i, n in enumerate(counts))
                pods = _pods_of(problem, grown)
                if not _room_ok(pods, room):
                    continue
                claims = [claim for p in pods for claim in p.pod.claims]
                outcome = problem.solve_on(node, claims)
                if not outcome.allocated:
                    continue
                found.append(Pattern(grown, outcome.score, problem.units_in_use_after(node, outcome.results)))
                if len(found) > cap:
                    return None
                stack.append((grown, c))
        table.patterns[k] = known[problem.solve_keys[node]] = sorted(found, key=lambda p: (-p.pods, p.counts))
    return table


def aggregation_exact(problem: GroupProblem) -> bool:
    """The conditions of the module docstring, checked on the prepared per-node problems of
    every pod class and of the open shared claims on one node per domain and device shape."""
    index = problem.index
    pod_pools: set[tuple[str, str]] = set()
    reps = problem.shapes()
    for c, members in enumerate(problem.pod_classes):
        pod = problem.pods[members[0]]
        if not pod.pod.claims:
            continue
        for node in reps:
            if node not in pod.nodes:
                continue
            for cand in problem.candidates(node, pod.pod.claims, key=("pod", c, node)):
                pool = (cand.driver, cand.pool)
                if index.pool_node.get(pool) != node:
                    return False
                pod_pools.add(pool)
    claims = [claim for _, claim in problem.open_shared]
    if not claims:
        return True
    seen: dict[str, frozenset[DeviceID]] = {}
    for node in reps:
        ids = frozenset(problem.candidates(node, claims, key=("shared", node)))
        if any((d.driver, d.pool) in pod_pools or (d.driver, d.pool) in index.pool_node for d in ids):
            return False
        if seen.setdefault(problem.nodes[node].domain, ids) != ids:
            return False
    return True


def shared_by_domain(problem: GroupProblem, domains: Iterable[str]) -> dict[str, AllocationOutcome]:
    claims = [c for _, c in problem.open_shared]
    out: dict[str, AllocationOutcome] = {}
    for d in domains:
        nodes = problem.domains.get(d) or []
        if not nodes:
            continue
        out[d] = problem.solve_on(nodes[0], claims) if claims else AllocationOutcome(True, (), 0, TRIVIAL)
    return out


def solve_master(
    problem: GroupProblem,
    table: PatternTable,
    shared: Mapping[str, AllocationOutcome],
    *,
    domains: Sequence[str],
    min_count: int | None,
    policy: str,
) -> MasterAnswer:
    model = cp_model.CpModel()
    keyed = bool(problem.request.topology_key)
    usable = [d for d in domains if d in shared and shared[d].allocated]
    if not usable:
        return MasterAnswer("INFEASIBLE")
    # One domain is chosen.
    y = {d: model.new_bool_var(f"y[{d}]") for d in usable}
    model.add_exactly_one(y.values())
    # w[k, j]: how many nodes of class k get pattern j (at most the class, in the chosen domain).
    w: dict[tuple[int, int], cp_model.IntVar] = {}
    for k, patterns in sorted(table.patterns.items()):
        members = problem.node_classes[k]
        domain = problem.nodes[members[0]].domain
        if domain not in y or not patterns:
            continue
        for j, _ in enumerate(patterns):
            w[(k, j)] = model.new_int_var(0, len(members), f"w[{k},{j}]")
        model.add(sum(w[(k, j)] for j in range(len(patterns))) <= len(members) * y[domain])
    # Pods placed per class: at most the class.
    placed_terms: list[Any] = []
    for c, pod_members in enumerate(problem.pod_classes):
        terms = [table.patterns[k][j].counts[c] * var for (k, j), var in w.items() if table.patterns[k][j].counts[c]]
        if terms:
            model.add(sum(terms) <= len(pod_members))
            placed_terms.extend(terms)
    pods_placed = sum(placed_terms)
    if min_count is not None:
        model.add(pods_placed >= min_count)
    score: Any = sum(table.patterns[k][j].score * var for (k, j), var in w.items() if table.patterns[k][j].score)
    score += sum(shared[d].score * y[d] for d in usable if shared[d].score)
    # The placement levels (model.cpsat.group_problem.policy_levels).
    touched = sum(table.patterns[k][j].touched * var for (k, j), var in w.items())
    idle_of = {k: problem.nodes[problem.node_classes[k][0]].idle_units for k in table.patterns}
    opened = sum(var for (k, _), var in w.items() if problem.nodes[problem.node_classes[k][0]].untouched)
    used = sum(w.values())
    used_idle = sum(idle_of[k] * var for (k, _), var in w.items())
    domain_idle = sum(problem.domain_idle(d) * y[d] for d in usable)
    domain_rank = sum(problem.domain_rank(d) * y[d] for d in usable)
    levels = policy_levels(
        policy, keyed=keyed, domain_idle=domain_idle, opened_idle=opened, used=used, used_idle=used_idle, touched=touched,
        domain_rank=domain_rank,
    )
    spans = level_spans(
        policy, keyed=keyed, domain_units=max((problem.domain_idle(d) for d in usable), default=0),
        node_units=problem.max_node_units, nodes=sum(len(problem.node_classes[k]) for k in table.patterns),
        pods=len(problem.pods), domains=len(problem.domains),
    )
    stages = [Level(pods_placed, "max"), Level(score, "max")]
    if levels:
        stages.extend(stages_of([Level(lv, "min", span) for lv, span in zip(levels, spans, strict=True)]))
    staged = solve_stages(model, stages, time_left=problem.time_left, hints=[*y.values(), *w.values()])
    proto = model.proto
    answer = MasterAnswer(staged.status, solves=staged.solves, variables=len(proto.variables), constraints=len(proto.constraints), gap=staged.gap)
    if staged.solver is None:
        return answer
    answer.domain = next(d for d in usable if staged.value(y[d]))
    answer.counts = {key: staged.value(var) for key, var in w.items() if staged.value(var)}
    answer.pods = staged.value(pods_placed)
    answer.score = staged.value(score)
    answer.levels = tuple(staged.value(lv) for lv in levels)
    return answer


def disaggregate(problem: GroupProblem, answer: MasterAnswer, table: PatternTable) -> list[tuple[str, list[int]]]:
    """Nodes and the pods they get (pod indices), nodes in class then name order."""
    next_pod = [0 for _ in problem.pod_classes]
    out: list[tuple[str, list[int]]] = []
    for k in sorted({k for k, _ in answer.counts}):
        nodes = iter(problem.node_classes[k])
        for j, pattern in enumerate(table.patterns[k]):
            for _ in range(answer.counts.get((k, j), 0)):
                node = next(nodes)
                pods: list[int] = []
                for c, n in enumerate(pattern.counts):
                    members = problem.pod_classes[c]
                    pods.extend(members[next_pod[c] : next_pod[c] + n])
                    next_pod[c] += n
                out.append((node, pods))
    return out


def placed_claims(problem: GroupProblem, pods: Sequence[int]) -> list[o.ResourceClaim]:
    return [claim for i in pods for claim in problem.pods[i].pod.claims]
