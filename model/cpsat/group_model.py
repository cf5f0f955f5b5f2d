"""The joint group model: nodes, pods, devices and the topology domain in one CP-SAT model.

API:
- ``JointModel(problem, *, domains, min_count, policy)``: built in one pass over the
  prepared ``GroupProblem``; ``solve() -> JointAnswer`` (domain, each placed pod's node and
  results, the shared claims' results, the objective, status and gap).

The translation (variables keyed by domain names: pod index, node name, claim):
- ``y[d]``: the group uses domain ``d`` (exactly one);
- ``x[p, n]``: pod ``p`` goes to node ``n``, only where the pod alone fits the node (its
  filter, room and claims, ``GroupProblem.fits``); each pod goes to at most one node and at
  least ``min_count`` pods are placed; ``x[p, n] <= y[domain(n)]``;
- per ``x[p, n]``, one instance of the per-node allocation model for ``p``'s claims on ``n``
  (``AllocationModel`` over a ``SharedBuild``), switched on by ``x[p, n]``: every claim-scoped
  DRA rule exactly as for one node;
- per open shared claim, one instance per distinct host (nodes that see the same eligible
  devices for it share one), exactly one host active: the claim is allocated once;
- the device-scoped rules (exclusive use, counters, capacity, device symmetry) once over all
  instances (``AllocationModel.device_rules``): pods on one node, a shared claim's node-local
  devices and devices several nodes reach are all constrained together;
- reach: a pod that uses a shared claim goes only to nodes that reach every device the claim
  got (per reach set ``R`` of its devices, ``x[p, n] + uses[s, R] <= 1`` for ``n`` outside ``R``);
- room: per node, the pods' CPU, memory and count within what is left;
- symmetry: identical pods fill ordered slots (placed first, then nondecreasing node); of
  identical nodes, the used come first; each node class keeps only as many nodes as pods
  could use (exact: the rest are interchangeable and unused);
- objective in stages (``model.cpsat.group_solve``): pods placed, the FirstAvailable score
  (shared claims counted once), then the policy's placement levels
  (``model.cpsat.group_problem.policy_levels``) over whole units (``model.node_load``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ortools.sat.python import cp_model

from dra_solver.model import objects as o
from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat import results_of
from dra_solver.model.cpsat.group_problem import GroupProblem, level_spans, policy_levels
from dra_solver.model.cpsat.group_solve import Level, Staged, solve_stages, stages_of
from dra_solver.model.cpsat.model import AllocationModel, SharedBuild
from dra_solver.model.cpsat.problem import Choices, Problem, request_of
from dra_solver.model.node_load import Slot
from dra_solver.model.score import first_available_score, subrequest_weight


@dataclass
class JointAnswer:
    status: str
    domain: str = ""
    pods: dict[int, tuple[str, tuple[o.AllocationResult, ...], int]] = field(default_factory=dict)
    """Pod index -> (node, results, score)."""
    shared: dict[int, o.AllocationResult] = field(default_factory=dict)
    """Shared claim index (in the request) -> its result."""
    score: int = 0
    levels: tuple[int, ...] = ()
    gap: float = 0.0
    solves: int = 0
    variables: int = 0
    constraints: int = 0


class JointModel:
    def __init__(self, problem: GroupProblem, *, domains: Sequence[str], min_count: int | None, policy: str) -> None:
        self.problem = problem
        self.policy = policy
        self.build = SharedBuild()
        self.model = self.build.model
        m = self.model
        keyed = bool(problem.request.topology_key)
        # --- nodes: per class, only as many as pods could use --------------------------------
        self.nodes: list[str] = []
        for d in domains:
            per_class: dict[int, list[str]] = defaultdict(list)
            for name in problem.domains.get(d, ()):
                per_class[problem.nodes[name].cls].append(name)
            for cls in sorted(per_class):
                members = per_class[cls]
                rep = members[0]
                usable = sum(1 for p in problem.pods if problem.fits(p, rep).fits)
                hosts = 1 if problem.open_shared else 0
                self.nodes.extend(members[: max(usable, hosts)])
        self.position = {n: i + 1 for i, n in enumerate(self.nodes)}
        # --- domains and pod placement ------------------------------------------------------
        self.y = {d: m.new_bool_var(f"y[{d}]") for d in domains if any(problem.nodes[n].domain == d for n in self.nodes)}
        if self.y:
            m.add_exactly_one(self.y.values())
        self.x: dict[tuple[int, str], cp_model.IntVar] = {}
        for p in problem.pods:
            for n in self.nodes:
                if problem.fits(p, n).fits:
                    var = self.x[(p.index, n)] = m.new_bool_var(f"x[{p.index},{n}]")
                    m.add_implication(var, self.y[problem.nodes[n].domain])
        by_pod: dict[int, list[cp_model.IntVar]] = defaultdict(list)
        for (i, _), var in self.x.items():
            by_pod[i].append(var)
        self.placed = {p.index: sum(by_pod.get(p.index, ())) for p in problem.pods}
        for expr in self.placed.values():
            if not isinstance(expr, int):
                m.add(expr <= 1)
        self.pods_placed: Any = sum(self.placed.values())
        if min_count is not None:
            m.add(self.pods_placed >= min_count)
        # --- instances: each pod's claims on each node it may go to -------------------------
        self.instances: dict[tuple[int, str], AllocationModel] = {}
        plans: list[Any] = []
        for count, ((i, n), var) in enumerate(self.x.items()):
            pod = problem.pods[i]
            if not pod.pod.claims:
                continue
            if count % 64 == 0:
                problem.time_left()  # a big model may not finish building before the deadline
            prepared = problem.prepare(n, pod.pod.claims, key=("instance", i, n))
            built = AllocationModel(prepared, policy=policy, shared=self.build, scope=f"p{i}@{n}", active=var)
            if built.infeasible:
                m.add(var == 0)
                continue
            self.instances[(i, n)] = built
            plans.extend(prepared.plans)
        # --- shared claims: allocated once, from one host --------------------------------------
        self.hosts: dict[tuple[int, str], tuple[AllocationModel, cp_model.IntVar]] = {}
        for s, claim in problem.open_shared:
            seen: set[frozenset[DeviceID]] = set()
            active: list[cp_model.IntVar] = []
            for n in self.nodes:
                prepared = problem.prepare(n, [claim], key=("shared", s, n))
                ids = frozenset(c.id for opt in prepared.all_options() for c in opt.candidates)
                if ids in seen:
                    continue
                seen.add(ids)
                act = m.new_bool_var(f"host[{s},{n}]")
                built = AllocationModel(prepared, policy=policy, shared=self.build, scope=f"s{s}@{n}", active=act)
                if built.infeasible:
                    m.add(act == 0)
                    continue
                m.add_implication(act, self.y[problem.nodes[n].domain])
                self.hosts[(s, n)] = (built, act)
                active.append(act)
                plans.extend(prepared.plans)
            m.add_bool_or(active)  # allocated once: from exactly one host
            m.add_at_most_one(active)
        # --- device rules, once over every instance -------------------------------------------
        some = next(iter(self.instances.values()), None) or next((b for b, _ in self.hosts.values()), None)
        self.rules: AllocationModel | None = None
        if some is not None:
            allocated = problem.index.allocated.merge(problem.request.in_flight)
            context = Problem(some.problem.request, plans, [], [], [], allocated, in_use_before=allocated.ids())
            self.rules = AllocationModel.device_rules(self.build, context)
        self.used = {n: m.new_bool_var(f"used[{n}]") for n in self.nodes}
        for n in self.nodes:
            on = [v for (_, node), v in self.x.items() if node == n]
            if on:
                m.add_max_equality(self.used[n], on)
            else:
                m.add(self.used[n] == 0)
        self._add_reach()
        self._add_room()
        self._add_symmetry()
        # --- objective ----------------------------------------------------------------------------
        self.score: Any = 0
        for built in [*self.instances.values(), *(b for b, _ in self.hosts.values())]:
            for key, var in built.selected.items():
                if key.subrequest is not None:
                    self.score += subrequest_weight(key.subrequest) * var
        touched = self._touched_units()
        infos = problem.nodes
        opened = sum(self.used[n] for n in self.nodes if infos[n].untouched)
        used = sum(self.used.values())
        used_idle = sum(infos[n].idle_units * self.used[n] for n in self.nodes if infos[n].idle_units)
        domain_idle = sum(problem.domain_idle(d) * var for d, var in self.y.items())
        domain_rank = sum(problem.domain_rank(d) * var for d, var in self.y.items())
        self.levels = policy_levels(
            policy, keyed=keyed, domain_idle=domain_idle, opened_idle=opened, used=used, used_idle=used_idle, touched=touched,
            domain_rank=domain_rank,
        )
        self.spans = level_spans(
            policy, keyed=keyed, domain_units=max((problem.domain_idle(d) for d in self.y), default=0),
            node_units=problem.max_node_units, nodes=len(self.nodes), pods=len(problem.pods), domains=len(problem.domains),
        )

    # --- rules across instances -------------------------------------------------------------

    def _add_reach(self) -> None:
        """A pod using a shared claim only goes where every device the claim got is reachable."""
        m = self.model
        problem = self.problem
        for s, claim in problem.open_shared:
            users = problem.pods_using(claim.ref)
            if not users:
                continue
            uses: dict[DeviceID, list[Any]] = defaultdict(list)
            for (shared_index, _), (built, _) in self.hosts.items():
                if shared_index != s:
                    continue
                for cand in built.choices.candidates():
                    for _, var in self._uses_in(built, cand.id):
                        uses[cand.id].append(var)
            by_reach: dict[frozenset[str], list[Any]] = defaultdict(list)
            for dev, lits in sorted(uses.items()):
                reach = frozenset(n for n in self.nodes if dev in problem.reachable(n))
                by_reach[reach].extend(lits)
            for reach, lits in sorted(by_reach.items(), key=lambda kv: sorted(kv[0])):
                outside = [(p, n) for p in users for n in self.nodes if n not in reach and (p.index, n) in self.x]
                if not outside:
                    continue
                any_use = m.new_bool_var(f"reach[{s},{len(reach)}]")
                m.add_max_equality(any_use, lits)
                for p, n in outside:
                    m.add(self.x[(p.index, n)] + any_use <= 1)

    @staticmethod
    def _uses_in(built: AllocationModel, device: DeviceID) -> list[tuple[Any, Any]]:
        return [(opt, var) for opt, var in built.choices.of_device(device)]

    def _add_room(self) -> None:
        m = self.model
        for n in self.nodes:
            room = self.problem.nodes[n].room
            here = [(self.problem.pods[i], v) for (i, node), v in self.x.items() if node == n]
            if len(here) < 2:
                continue
            pods = [p for p, _ in here]
            if room.pods is not None and len(here) > room.pods:
                m.add(sum(v for _, v in here) <= room.pods)
            if room.cpu_millis is not None and sum(p.pod.cpu_millis for p in pods) > room.cpu_millis:
                m.add(sum(p.pod.cpu_millis * v for p, v in here) <= room.cpu_millis)
            if room.memory_bytes is not None and sum(p.pod.memory_bytes for p in pods) > room.memory_bytes:
                m.add(sum(p.pod.memory_bytes * v for p, v in here) <= room.memory_bytes)

    def _add_symmetry(self) -> None:
        """Identical pods fill ordered slots; identical nodes are used in name order."""
        m = self.model
        problem = self.problem
        for members in problem.pod_classes:
            for a, b in pairwise(members):
                pa, pb = self.placed[a], self.placed[b]
                if isinstance(pb, int):
                    continue
                m.add(pa >= pb)
                where_a = sum(self.position[n] * v for (i, n), v in self.x.items() if i == a)
                where_b = sum(self.position[n] * v for (i, n), v in self.x.items() if i == b)
                m.add(where_a <= where_b).only_enforce_if(_as_literal(m, pb))
        by_class: dict[int, list[str]] = defaultdict(list)
        for n in self.nodes:
            by_class[problem.nodes[n].cls].append(n)
        for names in by_class.values():
            for first, second in pairwise(names):
                m.add(self.used[first] >= self.used[second])

    def _touched_units(self) -> Any:
        """Whole units newly in use (a literal per unit, at least any device on it used)."""
        if self.rules is None:
            return 0
        m = self.model
        index = self.problem.index
        lits: dict[tuple[str, Slot], list[Any]] = defaultdict(list)
        for cand in self.rules.choices.candidates():
            owner = index.pool_node.get((cand.id.driver, cand.id.pool))
            if owner is None or owner not in self.position:
                continue
            info = self.problem.nodes[owner]
            used = self.rules.used_literal(cand)
            if isinstance(used, int):
                continue
            for unit in info.units.units_of((cand.id.driver, cand.id.pool, cand.id.device)):
                if unit not in info.touched:
                    lits[(owner, unit)].append(used)
        total: Any = 0
        for key in sorted(lits):
            new = m.new_bool_var(f"unit[{key[0]},{key[1][2]}]")
            for used in lits[key]:
                m.add(new >= used)
            total += new
        return total

    # --- solving ---------------------------------------------------------------------------------

    def solve(self) -> JointAnswer:
        stages = [Level(self.pods_placed, "max"), Level(self.score, "max")]
        if self.levels:
            stages.extend(stages_of([Level(lv, "min", span) for lv, span in zip(self.levels, self.spans, strict=True)]))
        hints = [*self.y.values(), *self.x.values()]
        staged = solve_stages(self.model, stages, time_left=self.problem.time_left, hints=hints)
        proto = self.model.proto
        answer = JointAnswer(staged.status, gap=staged.gap, solves=staged.solves, variables=len(proto.variables), constraints=len(proto.constraints))
        if staged.solver is None:
            return answer
        self._decode(staged, answer)
        return answer

    def _decode(self, staged: Staged, answer: JointAnswer) -> None:
        solver = staged.solver
        assert solver is not None
        answer.domain = next((d for d, v in self.y.items() if staged.value(v)), "")
        for (i, n), var in sorted(self.x.items()):
            if not solver.boolean_value(var):
                continue
            built = self.instances.get((i, n))
            if built is None:
                answer.pods[i] = (n, (), 0)
                continue
            results = _results(built, solver)
            claims = self.problem.pods[i].pod.claims
            answer.pods[i] = (n, tuple(results), first_available_score(claims, results))
        for (s, _), (built, act) in sorted(self.hosts.items()):
            if solver.boolean_value(act):
                answer.shared[s] = _results(built, solver)[0]
        answer.score = staged.value(self.score)
        answer.levels = tuple(staged.value(lv) for lv in self.levels)


def _results(built: AllocationModel, solver: cp_model.CpSolver) -> list[o.AllocationResult]:
    selected = {request_of(key): key for key, var in built.selected.items() if solver.boolean_value(var)}
    return results_of(built.problem, Choices(selected, built.choices.extract(solver)))


def _as_literal(model: cp_model.CpModel, expr: Any) -> Any:
    """A literal equal to ``expr`` (a literal, or a sum of literals at most one of which holds)."""
    if isinstance(expr, cp_model.IntVar):
        return expr
    var = model.new_bool_var("")
    model.add(var == expr)
    return var

