"""Why claims cannot be allocated on a node: a CP-SAT relaxation with one switch per restriction.

The allocation problem of one node is rebuilt in a relaxed form where every restriction that
can block a claim (a request's count, a selector, a taint, a device in use, a shared counter, a
constraint, a device's consumable capacity) is guarded by an assumption literal: "this
restriction holds". With every restriction on, the model is infeasible exactly when the claims
do not fit. Then:

- **reasons**: CP-SAT's ``sufficient_assumptions_for_infeasibility`` gives an infeasible subset
  of the restrictions; deletion-based shrinking (drop one, solve again, keep it out if still
  infeasible) makes it irreducible: every reason listed is needed for the claims to fail.
- **fixes**: the fewest restrictions whose removal makes the claims fit (a minimum correction
  set), found by optimisation over the same model; request counts are never "fixed" away.

The input is a prepared :class:`Problem` (devices, requests, and which restrictions block which
request/device pair); building it from API objects is the caller's job, so this module stays
small and pure. Single worker, fixed seed: the same problem gives the same explanation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model


@dataclass(frozen=True, slots=True)
class Restriction:
    """One thing that can block the claims, in words."""

    key: str
    """Unique id, e.g. ``selector|claim|request|0``."""
    kind: str
    """request, selector, class-selector, taint, in-use, reserved, counter, constraint, capacity, pool."""
    message: str
    claim: str = ""
    request: str = ""
    devices: tuple[str, ...] = ()
    fixable: bool = True
    """False for restrictions a user cannot lift (a request's count is what the claim wants)."""


@dataclass(frozen=True, slots=True)
class ExplainRequest:
    """A request (or one subrequest of a FirstAvailable request) to allocate."""

    key: str
    """``claim|request`` or ``claim|request/subrequest``."""
    claim: str
    request: str
    count: int
    """Devices wanted (ExactCount); ignored when ``all_devices``."""
    all_devices: bool = False
    """allocationMode All: every device that passes the selectors, at least one."""
    group: str = ""
    """FirstAvailable: subrequests of one request share a group; exactly one is used."""
    admin_access: bool = False
    count_restriction: str = ""
    """Key of the restriction enforcing the count (the request itself)."""


@dataclass(frozen=True, slots=True)
class ExplainDevice:
    id: str
    """``driver/pool/device``."""
    multiple: bool = False
    """allowMultipleAllocations: may be given to several requests."""
    in_use: str = ""
    """Key of the restriction saying the device is in use (exclusive), or ""."""


@dataclass(frozen=True, slots=True)
class CounterLimit:
    restriction: str
    available: int
    """What is left after devices already in use (may be negative)."""
    consumption: tuple[tuple[str, int], ...]
    """(device id, amount) for each device drawing on the counter."""


@dataclass(frozen=True, slots=True)
class CapacityLimit:
    restriction: str
    device: str
    available: int
    demand: tuple[tuple[str, int], ...]
    """(request key, amount) the request would consume from the device."""


@dataclass(frozen=True, slots=True)
class AttributeConstraint:
    restriction: str
    match: bool
    """True: matchAttribute (one common value); False: distinctAttribute."""
    requests: tuple[str, ...]
    values: tuple[tuple[str, str], ...]
    """(device id, value as text); devices without the attribute are absent."""


@dataclass
class Problem:
    restrictions: dict[str, Restriction] = field(default_factory=dict)
    requests: list[ExplainRequest] = field(default_factory=list)
    devices: list[ExplainDevice] = field(default_factory=list)
    blocks: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    """(request key, device id) -> restrictions that each forbid the pair. Pairs absent from
    ``candidates`` are impossible whatever is relaxed (another driver, another node)."""
    candidates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """request key -> device ids it could use at all."""
    all_members: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """request key (allocationMode All) -> devices that pass its selectors (all must be taken)."""
    counters: list[CounterLimit] = field(default_factory=list)
    capacities: list[CapacityLimit] = field(default_factory=list)
    constraints: list[AttributeConstraint] = field(default_factory=list)

    def add(self, restriction: Restriction) -> str:
        self.restrictions.setdefault(restriction.key, restriction)
        return restriction.key


@dataclass(frozen=True, slots=True)
class Explanation:
    allocatable: bool
    reasons: tuple[Restriction, ...]
    fixes: tuple[Restriction, ...]
    minimal: bool
    """Reasons proven irreducible and fixes proven minimum (no time ran out)."""
    solves: int
    status: str


class _Model:
    """The relaxed model: constraints → variables per (request, device), guarded by literals."""

    def __init__(self, problem: Problem) -> None:
        self.p = problem
        m = self.model = cp_model.CpModel()
        self.on = {key: m.new_bool_var(f"on[{key}]") for key in sorted(problem.restrictions)}
        self.x: dict[tuple[str, str], cp_model.IntVar] = {}
        for req in problem.requests:
            for dev in problem.candidates.get(req.key, ()):
                self.x[req.key, dev] = m.new_bool_var(f"x[{req.key},{dev}]")
        self._add_blocks()
        self._add_counts()
        self._add_exclusivity()
        self._add_counters()
        self._add_capacity()
        self._add_attribute_constraints()

    def _add_blocks(self) -> None:
        # A restriction that forbids a pair: when it holds, the request does not get the device.
        for (req, dev), keys in sorted(self.p.blocks.items()):
            var = self.x.get((req, dev))
            if var is None:
                continue
            for key in keys:
                self.model.add_implication(self.on[key], var.Not())

    def _add_counts(self) -> None:
        # Each request gets its count; of a FirstAvailable request exactly one subrequest is used.
        m = self.model
        groups: dict[str, list[ExplainRequest]] = {}
        for req in self.p.requests:
            groups.setdefault(req.group or req.key, []).append(req)
        for members in groups.values():
            active = {r.key: m.new_bool_var(f"active[{r.key}]") for r in members}
            m.add_exactly_one(active.values())
            for r in members:
                chosen = [self.x[r.key, d] for d in self.p.candidates.get(r.key, ()) if (r.key, d) in self.x]
                for var in chosen:
                    m.add_implication(var, active[r.key])
                guard = [active[r.key]] + ([self.on[r.count_restriction]] if r.count_restriction else [])
                if r.all_devices:
                    members_all = [self.x[r.key, d] for d in self.p.all_members.get(r.key, ()) if (r.key, d) in self.x]
                    for var in members_all:
                        m.add_bool_and([var]).only_enforce_if(guard)
                    m.add(sum(chosen) >= 1).only_enforce_if(guard)
                else:
                    m.add(sum(chosen) == r.count).only_enforce_if(guard)

    def _add_exclusivity(self) -> None:
        # A device goes to one request at most, unless it allows multiple allocations; a device
        # in use goes to none (admin access may still use it).
        m = self.model
        by_dev: dict[str, list[tuple[ExplainRequest, cp_model.IntVar]]] = {}
        reqs = {r.key: r for r in self.p.requests}
        for (rkey, dev), var in self.x.items():
            by_dev.setdefault(dev, []).append((reqs[rkey], var))
        for device in self.p.devices:
            users = by_dev.get(device.id, [])
            if not users:
                continue
            if not device.multiple:
                m.add_at_most_one(var for _, var in users)
            if device.in_use:
                for req, var in users:
                    if not req.admin_access:
                        m.add_implication(self.on[device.in_use], var.Not())

    def _used(self, dev: str) -> cp_model.IntVar | None:
        vars_ = [v for (_, d), v in self.x.items() if d == dev]
        if not vars_:
            return None
        used = self.model.new_bool_var(f"used[{dev}]")
        self.model.add_max_equality(used, vars_)
        return used

    def _add_counters(self) -> None:
        # Devices drawing on a shared counter stay within what is left of it.
        used_cache: dict[str, cp_model.IntVar | None] = {}
        for limit in self.p.counters:
            terms = []
            for dev, amount in limit.consumption:
                if dev not in used_cache:
                    used_cache[dev] = self._used(dev)
                used = used_cache[dev]
                if used is not None and amount:
                    terms.append(amount * used)
            if terms:
                self.model.add(sum(terms) <= limit.available).only_enforce_if(self.on[limit.restriction])

    def _add_capacity(self) -> None:
        # Requests sharing a device stay within its remaining consumable capacity.
        for limit in self.p.capacities:
            terms = [amount * self.x[req, limit.device] for req, amount in limit.demand if (req, limit.device) in self.x]
            if terms:
                self.model.add(sum(terms) <= limit.available).only_enforce_if(self.on[limit.restriction])

    def _add_attribute_constraints(self) -> None:
        # matchAttribute: all chosen devices share one value; distinctAttribute: all differ.
        # A device without the attribute cannot be chosen by a constrained request.
        m = self.model
        for c in self.p.constraints:
            on = self.on[c.restriction]
            value_of = dict(c.values)
            pairs = [(req, dev, var) for (req, dev), var in self.x.items() if req in c.requests or req.split("/")[0] in c.requests]
            for _, dev, var in pairs:
                if dev not in value_of:
                    m.add_implication(on, var.Not())
            values = sorted({value_of[dev] for _, dev, _ in pairs if dev in value_of})
            if c.match:
                pick = {v: m.new_bool_var(f"value[{c.restriction},{v}]") for v in values}
                if pick:
                    m.add_at_most_one(pick.values())
                for _, dev, var in pairs:
                    if dev in value_of:
                        m.add_bool_or([pick[value_of[dev]], var.Not(), on.Not()])
            else:
                for v in values:
                    same = [var for _, dev, var in pairs if value_of.get(dev) == v]
                    if len(same) > 1:
                        m.add(sum(same) <= 1).only_enforce_if(on)


def _solver(seconds: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # assumptions and cores need the single-worker search
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    return solver


def explain(problem: Problem, *, time_limit: float = 5.0, budget: int = 400) -> Explanation:
    """Reasons (irreducible) and fixes (minimum) for ``problem``; see the module docstring.

    ``time_limit`` bounds each solve; ``budget`` bounds the number of solves (large in-use sets
    shrink one literal at a time). Exhausting either gives a correct but possibly non-minimal
    answer with ``minimal=False``.
    """
    relaxed = _Model(problem)
    keys = sorted(problem.restrictions)
    solves = 0

    def feasible_with(active: Sequence[str]) -> tuple[bool | None, list[str]]:
        nonlocal solves
        solves += 1
        relaxed.model.clear_assumptions()
        relaxed.model.add_assumptions([relaxed.on[k] for k in active])
        solver = _solver(time_limit)
        status = solver.solve(relaxed.model)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return True, []
        if status == cp_model.INFEASIBLE:
            core_idx = set(solver.sufficient_assumptions_for_infeasibility())
            core = [k for k in active if relaxed.on[k].index in core_idx]
            return False, core or list(active)
        return None, list(active)

    ok, core = feasible_with(keys)
    if ok:
        return Explanation(True, (), (), True, solves, "FEASIBLE")
    minimal = ok is False
    # Prefer reasons about what the claims ask and what the node is over reasons about its
    # current state: if the claims would not fit even on an empty, untainted node, say that.
    for tier in _TIERS[:-1]:
        subset = [k for k in keys if problem.restrictions[k].kind in tier]
        ok_tier, core_tier = feasible_with(subset)
        if ok_tier is False:
            core = core_tier
            break
    # Shrink the core: a restriction stays only if the rest is no longer infeasible without it.
    kept: list[str] = list(core)
    i = 0
    while i < len(kept):
        if solves >= budget:
            minimal = False
            break
        trial = kept[:i] + kept[i + 1 :]
        ok, smaller = feasible_with(trial)
        if ok is False:
            kept = [k for k in trial if k in set(smaller)] if smaller else trial
        else:
            if ok is None:
                minimal = False
            i += 1
    fixes, fixes_minimal = _minimum_fixes(relaxed, problem, time_limit=time_limit)
    solves += 1
    reasons = tuple(problem.restrictions[k] for k in _ordered(kept, problem))
    return Explanation(False, reasons, tuple(problem.restrictions[k] for k in _ordered(fixes, problem)), minimal and fixes_minimal, solves, "INFEASIBLE")


def _minimum_fixes(relaxed: _Model, problem: Problem, *, time_limit: float) -> tuple[list[str], bool]:
    m = relaxed.model
    m.clear_assumptions()
    fixed = [relaxed.on[k] for k, r in problem.restrictions.items() if not r.fixable]
    for var in fixed:
        m.add_bool_and([var])
    soft = [relaxed.on[k] for k in sorted(problem.restrictions) if problem.restrictions[k].fixable]
    m.maximize(sum(soft))
    solver = _solver(time_limit)
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return [], False
    off = [k for k in sorted(problem.restrictions) if problem.restrictions[k].fixable and not solver.boolean_value(relaxed.on[k])]
    return off, status == cp_model.OPTIMAL


_STRUCTURAL = frozenset({"request", "pool", "class-selector", "selector", "constraint", "counter", "capacity"})
_TIERS = (_STRUCTURAL, _STRUCTURAL | {"taint"}, None)
"""Restriction kinds tried in order when looking for reasons: the claims and the hardware,
then taints, then devices in use or reserved (the last tier, everything, is the full model)."""

_KIND_ORDER = {k: i for i, k in enumerate(("request", "pool", "class-selector", "selector", "taint", "constraint", "counter", "capacity", "in-use", "reserved"))}


def _ordered(keys: Sequence[str], problem: Problem) -> list[str]:
    return sorted(keys, key=lambda k: (_KIND_ORDER.get(problem.restrictions[k].kind, 99), k))
