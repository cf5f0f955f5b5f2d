"""Gang placement's front door: a PodGroup placed whole, in one topology domain, or not at all.

API (re-exported by ``dra_solver.model``):
- ``schedule_group(request, *, cel=None, solve=None, clock=time.monotonic) -> GroupOutcome``
  (types in ``model.group_request``).

Contract:
- returns ``GroupOutcome(placed=True)``: at least ``min_count`` pods (as many as fit) each on
  a node with every claim allocated there, the shared claims allocated once and reachable from
  every node that uses them, all in one domain of the topology key, best by the group
  objective (``GroupObjective``); ``stats.status`` FEASIBLE (with ``gap``) when the time limit
  cut the search short;
- returns ``GroupOutcome(placed=False, explanation=...)``: no such placement exists (or the
  group has fewer pods than ``min_count``); not an error;
- raises ``InvalidInput`` (bad request: duplicate pods, an unknown shared claim, minCount
  below 1, a topology key that is not a label key), ``AllocationError`` (input that stops
  every node, as for one node; prefixed with the node) or ``SolveTimeout`` (nothing found in
  time).

Paths (``GroupRequest.path``): ``aggregated`` when exact (``model.cpsat.group_master``: per
node class which pod multisets fit one node, then a master model of hundreds of variables),
else ``joint`` (``model.cpsat.group_model``: one CP-SAT model, identical nodes and pods
collapsed by symmetry). ``auto`` picks aggregated when its conditions hold and its pattern
table stays small. Both optimise the same objective over the same prepared problem
(``model.cpsat.group_problem``), which is what makes them interchangeable.

``solve`` is the per-node allocator (default ``model.allocate`` without API validation: the
caller validated the objects); the service passes its own (metrics, deadline). Every answer
should be checked with ``check_group`` (``model.check``); the service does, and fails closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest
from dra_solver.model.allocators import allocate
from dra_solver.model.cel import CelEnvironment, CelFeatures
from dra_solver.model.cluster import AllocatedState, DeviceID
from dra_solver.model.cpsat.group_master import (
    MasterAnswer,
    PatternTable,
    aggregation_exact,
    disaggregate,
    pattern_table,
    shared_by_domain,
    solve_master,
)
from dra_solver.model.cpsat.group_model import JointAnswer, JointModel
from dra_solver.model.cpsat.group_problem import GroupProblem, PodInfo, policy_levels
from dra_solver.model.errors import InvalidInput, SolveTimeout
from dra_solver.model.group_explain import explain_group, how_many
from dra_solver.model.group_request import (
    GROUP_PATHS,
    GroupObjective,
    GroupOutcome,
    GroupPod,
    GroupRequest,
    GroupStats,
    NodeRoom,
    PodPlacement,
)
from dra_solver.model.policy import checked_policy
from dra_solver.model.pools import DeviceParseCache
from dra_solver.model.score import best_possible_score, first_available_score
from dra_solver.model.validation import qualified_name_errors

SolveFn = Callable[[AllocationRequest], AllocationOutcome]


def group_cel(request: GroupRequest) -> CelEnvironment:
    gates = request.gates
    return CelEnvironment(
        features=CelFeatures(consumable_capacity=gates.consumable_capacity, list_type_attributes=gates.list_type_attributes)
    )


def schedule_group(
    request: GroupRequest,
    *,
    cel: CelEnvironment | None = None,
    solve: SolveFn | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> GroupOutcome:
    """Place the group (see the module contract)."""
    _validate(request)
    policy = checked_policy(request.policy).value
    env = cel or group_cel(request)

    def per_node(req: AllocationRequest) -> AllocationOutcome:
        return allocate(req, cel=env, validate=False)

    if request.device_cache is None:
        request = replace(request, device_cache=DeviceParseCache(4096))  # devices parsed once per call
    problem = GroupProblem(request, solve=solve or per_node, cel=env, clock=clock)
    stats = GroupStats(
        domains_total=len(problem.domains),
        node_classes=len(problem.node_classes),
        pod_classes=len(problem.pod_classes),
    )
    runner = _Runner(problem, policy, stats)
    if len(problem.pods) < request.min_count or not problem.domains:
        stats.status = "INFEASIBLE"
        return runner.not_placed()
    return runner.run()


@dataclass
class _Placed:
    domain: str
    pods: dict[int, tuple[str, tuple[o.AllocationResult, ...], int]]
    shared: dict[int, o.AllocationResult]
    score: int
    levels: tuple[int, ...]


class _Runner:
    def __init__(self, problem: GroupProblem, policy: str, stats: GroupStats) -> None:
        self.problem = problem
        self.policy = policy
        self.stats = stats
        self.table: PatternTable | None = None
        self.shared = {}  # type: dict[str, AllocationOutcome]
        self._capacities: dict[tuple[int, tuple[object, ...]], int] = {}

    def _path(self) -> str:
        wanted = self.problem.request.path
        if wanted == "joint":
            return "joint"
        exact = aggregation_exact(self.problem)
        if exact:
            self.problem.localize()
            self.stats.node_classes = len(self.problem.node_classes)
            self.table = pattern_table(self.problem)
        if wanted == "aggregated":
            if not exact or self.table is None:
                raise InvalidInput("", ("path",), "Invalid value: \"aggregated\": not exact for this group (per-pod devices shared between nodes, or shared claims on the pods' pools)")
            return "aggregated"
        return "aggregated" if self.table is not None else "joint"

    def run(self) -> GroupOutcome:
        """Domains most promising first (bounds: pods that can fit, the domain's own level),
        each solved alone; stop when no remaining domain can beat the best placement, or at
        the deadline (the best so far, FEASIBLE, with the gap to the best bound left)."""
        problem = self.problem
        if problem.split_by_shared_reach():
            self.stats.domains_total = len(problem.domains)
        path = self._path()
        self.stats.path = path
        if self.table is not None:
            self.stats.patterns = len(self.table)
        min_count = problem.request.min_count
        # The joint path's bounds (per-node solves in every domain) and model can take longer
        # than the deadline: a greedy placement first, in the domain with the most idle units
        # (the likeliest to fit), so that the deadline still finds an answer (anytime).
        fallback = self._first_greedy() if path == "joint" else None
        bounds: dict[str, tuple[int, ...]] = {}
        try:
            for d in problem.domains:
                problem.time_left()
                bounds[d] = self._bound(d)
        except SolveTimeout:
            if fallback is None:
                raise
            self.stats.status = "FEASIBLE"
            self.stats.gap = max(0.0, (len(problem.pods) - fallback[0].pods) / max(1, len(problem.pods)))
            placed = _from_joint(fallback[1])
            assert placed is not None
            return self._outcome(placed)
        order = sorted((d for d in problem.domains if bounds[d][0] >= min_count), key=lambda d: (tuple(-v for v in bounds[d]), problem.domain_rank(d)))
        best: tuple[GroupObjective, MasterAnswer | JointAnswer] | None = None
        left = order
        for n, d in enumerate(order):
            left = order[n:]
            if best is not None and bounds[d] < best[0].key()[: len(bounds[d])]:
                left = []
                break
            try:
                found = self._solve_domain(d)
            except SolveTimeout:
                if best is None:
                    if fallback is None:
                        raise
                    best = fallback
                    self.stats.status = "FEASIBLE"
                break
            self.stats.domains_evaluated += 1
            if found is not None:
                self.stats.domains_feasible += 1
                if best is None or found[0].key() > best[0].key():
                    best = found
            if self.stats.status == "FEASIBLE":
                break  # the time ran out inside this domain
        else:
            left = []
        if fallback is not None and (best is None or fallback[0].key() > best[0].key()):
            best = fallback  # the model's answer, cut short, was worse than the greedy one
            self.stats.status = "FEASIBLE"
        if best is None:
            self.stats.status = "INFEASIBLE"
            return self.not_placed()
        if left:
            self.stats.status = "FEASIBLE"
            top = max(bounds[d][0] for d in left)
            self.stats.gap = max(0.0, (top - best[0].pods) / max(1, top))
        elif self.stats.status != "FEASIBLE":
            self.stats.status = "OPTIMAL"
        answer = best[1]
        placed = self._from_master(answer) if isinstance(answer, MasterAnswer) else _from_joint(answer)
        assert placed is not None
        return self._outcome(placed)

    def _bound(self, domain: str) -> tuple[int, ...]:
        """An optimistic prefix of the objective key in ``domain``: pods that can fit there,
        the best possible score, and the domain's own placement level."""
        problem = self.problem
        nodes = problem.domains[domain]
        if self.table is not None:
            per_class = [0 for _ in problem.pod_classes]
            per_node = 0
            seen: dict[int, int] = {}
            for name in nodes:
                seen[problem.nodes[name].cls] = seen.get(problem.nodes[name].cls, 0) + 1
            for k, count in seen.items():
                patterns = self.table.patterns.get(k, [])
                if not patterns:
                    continue
                per_node += count * max(p.pods for p in patterns)
                for c in range(len(per_class)):
                    per_class[c] += count * max(p.counts[c] for p in patterns)
            pods = min(per_node, sum(min(len(m), per_class[c]) for c, m in enumerate(problem.pod_classes)))
        else:
            # Per pod class, how many fit together on each node alone (monotone: fewer fit
            # beside other pods), summed over the domain: an upper bound on the pods placed.
            pods = 0
            for c, members in enumerate(problem.pod_classes):
                first = problem.pods[members[0]]
                cap = 0
                for n in nodes:
                    if cap >= len(members):
                        break
                    if n in first.nodes:
                        cap += self._capacity(c, n)
                pods += min(cap, len(members))
        score = sum(best_possible_score(p.pod.claims) for p in problem.pods) + best_possible_score([c for _, c in problem.open_shared])
        levels = policy_levels(self.policy, keyed=bool(problem.request.topology_key), domain_idle=problem.domain_idle(domain),
                               opened_idle=0, used=0, used_idle=0, touched=0)
        if problem.request.topology_key and levels:
            return (pods, score, -levels[0])
        return (pods, score)

    def _first_greedy(self, tries: int = 3) -> tuple[GroupObjective, JointAnswer] | None:
        """The greedy placement in the first of the ``tries`` roomiest domains where it finds one."""
        problem = self.problem
        roomiest = sorted(problem.domains, key=lambda d: (-problem.domain_idle(d), problem.domain_rank(d)))
        for d in roomiest[:tries]:
            try:
                problem.time_left()
            except SolveTimeout:
                return None
            found = self._greedy(d)
            if found is not None:
                return found
        return None

    def _greedy(self, domain: str) -> tuple[GroupObjective, JointAnswer] | None:
        """Pods one at a time (most devices first) on the first node of ``domain`` where they
        fit beside the pods placed before them and the shared claims (allocated first, on the
        first node that can): a placement, not the best, or None."""
        problem = self.problem
        nodes = problem.domains[domain]
        answer = JointAnswer("FEASIBLE", domain=domain)
        taken = AllocatedState()
        score = 0
        reach_needed: frozenset[DeviceID] = frozenset()
        claims = [c for _, c in problem.open_shared]
        try:
            if claims:
                for n in nodes:
                    got = problem.solve_on(n, claims)
                    if got.allocated:
                        break
                else:
                    return None
                for (i, _claim), result in zip(problem.open_shared, got.results, strict=True):
                    answer.shared[i] = result
                taken = taken.merge(_state_of(claims, got.results))
                reach_needed = frozenset(taken.devices)
                score += got.score
            used: dict[str, list[GroupPod]] = {}

            def size(p: PodInfo) -> int:
                devices = 0
                for c in p.pod.claims:
                    for r in (c.spec.devices.requests if c.spec.devices else None) or []:
                        devices += (r.exactly.count or 1) if r.exactly is not None else 1
                return -devices

            for p in sorted(problem.pods, key=lambda p: (size(p), p.name)):
                for n in nodes:
                    if not problem.fits(p, n).fits or not _room_left(problem.nodes[n].room, [*used.get(n, []), p.pod]):
                        continue
                    if p.pod.shared and reach_needed and not reach_needed <= problem.reachable(n):
                        continue
                    got = problem.solve_on(n, p.pod.claims, taken)
                    if not got.allocated:
                        continue
                    answer.pods[p.index] = (n, got.results, got.score)
                    used.setdefault(n, []).append(p.pod)
                    taken = taken.merge(_state_of(p.pod.claims, got.results))
                    score += got.score
                    break
        except SolveTimeout:
            return None
        if len(answer.pods) < problem.request.min_count:
            return None
        answer.score = score
        return GroupObjective(len(answer.pods), score), answer

    def _capacity(self, c: int, node: str) -> int:
        """Pods of class ``c`` that fit together on ``node`` alone (cached per node kind)."""
        problem = self.problem
        key = (c, problem.solve_keys[node])
        known = self._capacities.get(key)
        if known is None:
            first = problem.pods[problem.pod_classes[c][0]]
            known = self._capacities[key] = how_many(problem, problem.pod_classes[c], node) if problem.fits(first, node).fits else 0
        return known

    def _solve_domain(self, domain: str) -> tuple[GroupObjective, MasterAnswer | JointAnswer] | None:
        problem = self.problem
        min_count = problem.request.min_count
        if self.table is not None:
            if domain not in self.shared:
                self.shared.update(shared_by_domain(problem, [domain]))
            master = solve_master(problem, self.table, self.shared, domains=[domain], min_count=min_count, policy=self.policy)
            self._count(master.status, master.gap, master.solves, master.variables, master.constraints)
            if master.status not in ("OPTIMAL", "FEASIBLE"):
                return None
            return GroupObjective(master.pods, master.score, master.levels), master
        joint = JointModel(problem, domains=[domain], min_count=min_count, policy=self.policy)
        answer = joint.solve()
        self._count(answer.status, answer.gap, answer.solves, answer.variables, answer.constraints)
        if answer.status not in ("OPTIMAL", "FEASIBLE"):
            return None
        return GroupObjective(len(answer.pods), answer.score, answer.levels), answer

    def _count(self, status: str, gap: float, solves: int, variables: int, constraints: int) -> None:
        if status == "FEASIBLE":
            self.stats.status = status
            self.stats.gap = max(self.stats.gap, gap)
        self.stats.solves += solves
        self.stats.variables = max(self.stats.variables, variables)
        self.stats.constraints = max(self.stats.constraints, constraints)
        if status == "UNKNOWN" or status == "MODEL_INVALID":
            if status == "MODEL_INVALID":
                raise RuntimeError(f"podgroup {self.problem.request.name}: the solver rejected the group model")
            raise SolveTimeout(f"podgroup {self.problem.request.name}: the time limit of {self.problem.request.time_limit}s passed before any placement was found")

    def _from_master(self, master: MasterAnswer) -> _Placed | None:
        if master.status not in ("OPTIMAL", "FEASIBLE"):
            return None
        assert self.table is not None
        problem = self.problem
        pods: dict[int, tuple[str, tuple[o.AllocationResult, ...], int]] = {}
        for node, members in disaggregate(problem, master, self.table):
            claims = [c for i in members for c in problem.pods[i].pod.claims]
            outcome = problem.solve_on(node, claims)
            if not outcome.allocated:
                raise RuntimeError(f"podgroup {problem.request.name}: node {node} refused the pods its class fits: {outcome.reason}")
            start = 0
            for i in members:
                mine = problem.pods[i].pod.claims
                results = tuple(outcome.results[start : start + len(mine)])
                start += len(mine)
                pods[i] = (node, results, first_available_score(mine, results))
        shared_results = self.shared[master.domain].results
        shared = {s: shared_results[n] for n, (s, _) in enumerate(problem.open_shared)}
        return _Placed(master.domain, pods, shared, master.score, master.levels)

    def _outcome(self, placed: _Placed) -> GroupOutcome:
        problem = self.problem
        request = problem.request
        pods = tuple(
            sorted(
                (PodPlacement(problem.pods[i].name, node, results, score) for i, (node, results, score) in placed.pods.items()),
                key=lambda p: p.name,
            )
        )
        shared: list[o.AllocationResult] = []
        for i, claim in enumerate(request.shared_claims):
            if i in placed.shared:
                shared.append(placed.shared[i])
            else:
                allocation = claim.status.allocation if claim.status else None
                assert allocation is not None
                shared.append(allocation)
        self.stats.solves += problem.solves
        self.stats.wall_seconds = problem.elapsed()
        return GroupOutcome(
            placed=True,
            domain=placed.domain if request.topology_key else None,
            pods=pods,
            shared=tuple(shared),
            score=placed.score,
            objective=GroupObjective(len(pods), placed.score, placed.levels),
            stats=self.stats,
        )

    def not_placed(self) -> GroupOutcome:
        problem = self.problem
        self.stats.status = self.stats.status or "INFEASIBLE"
        explanation = explain_group(problem, solve_domain=self._placeable)
        self.stats.solves += problem.solves
        self.stats.wall_seconds = problem.elapsed()
        return GroupOutcome(
            placed=False,
            domain=None,
            pods=(),
            shared=(),
            score=0,
            objective=GroupObjective(0, 0),
            stats=self.stats,
            reason=explanation.summary,
            explanation=explanation,
        )

    def _placeable(self, domain: str) -> int:
        """Pods that fit together in ``domain`` without the quorum (explanations)."""
        problem = self.problem
        try:
            if self.stats.path == "aggregated" and self.table is not None:
                shared = self.shared or shared_by_domain(problem, [domain])
                master = solve_master(problem, self.table, shared, domains=[domain], min_count=None, policy="score")
                return master.pods if master.status in ("OPTIMAL", "FEASIBLE") else 0
            joint = JointModel(problem, domains=[domain], min_count=None, policy="score")
            answer = joint.solve()
            return len(answer.pods) if answer.status in ("OPTIMAL", "FEASIBLE") else 0
        except SolveTimeout:
            return 0


def _from_joint(answer: JointAnswer) -> _Placed | None:
    if answer.status not in ("OPTIMAL", "FEASIBLE"):
        return None
    return _Placed(answer.domain, answer.pods, answer.shared, answer.score, answer.levels)


def _validate(request: GroupRequest) -> None:
    if request.path not in GROUP_PATHS:
        raise InvalidInput("", ("path",), f"Unsupported value: {request.path!r}: supported values: {', '.join(GROUP_PATHS)}")
    if request.min_count < 1:
        raise InvalidInput(request.name, ("minCount",), f"Invalid value: {request.min_count}: must be greater than zero")
    if request.topology_key:
        problems = qualified_name_errors(request.topology_key)
        if problems:
            raise InvalidInput(request.name, ("topologyKey",), f"Invalid value: {request.topology_key!r}: {problems[0]}")
    seen: set[str] = set()
    for i, pod in enumerate(request.pods):
        if not pod.name:
            raise InvalidInput(request.name, ("pods", i, "name"), "Required value")
        if pod.name in seen:
            raise InvalidInput(request.name, ("pods", i, "name"), f"Duplicate value: {pod.name!r}")
        seen.add(pod.name)
    shared = {c.ref for c in request.shared_claims}
    if len(shared) != len(request.shared_claims):
        raise InvalidInput(request.name, ("sharedClaims",), "Duplicate value: a shared claim is listed twice")
    for i, pod in enumerate(request.pods):
        for j, ref in enumerate(pod.shared):
            if ref not in shared:
                raise InvalidInput(request.name, ("pods", i, "sharedClaims", j), f"Not found: {ref!r}: not one of the group's shared claims")


def _state_of(claims: Sequence[o.ResourceClaim], results: Sequence[o.AllocationResult]) -> AllocatedState:
    return AllocatedState.from_claims(
        c.model_copy(update={"status": o.ResourceClaimStatus(allocation=r)}) for c, r in zip(claims, results, strict=True)
    )


def _room_left(room: NodeRoom, pods: Sequence[GroupPod]) -> bool:
    if room.pods is not None and len(pods) > room.pods:
        return False
    if room.cpu_millis is not None and sum(p.cpu_millis for p in pods) > room.cpu_millis:
        return False
    return room.memory_bytes is None or sum(p.memory_bytes for p in pods) <= room.memory_bytes
