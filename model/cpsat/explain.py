"""Why claims cannot be allocated on a node, asked of the allocation model itself.

API:
- ``find_reasons(problem, *, key_of, fixable, tiers, time_limit=5.0, remaining=None, budget=400)
  -> Reasons``:
  ``problem`` is a relaxed problem (``prepare_problem(..., relaxed=True)``); its
  ``AllocationModel`` guards every rule instance with a switch literal ("this rule instance
  holds"). ``key_of(rule)`` names each instance for the caller (instances with the same name
  are one switch; names also fix the order in which switches are tried, so the answer is
  deterministic); ``fixable(rule)`` says whether a user could lift it (a request's count is
  what the claim wants, never a fix); ``tiers`` are the subsets of rules to try first, in order.
- ``Reasons``: ``allocatable`` (every rule on and still feasible), ``reasons`` (an irreducible
  set of rule instances that together make the claims infeasible), ``fixes`` (a minimum set
  whose removal makes them fit), ``no_fix`` (proven: turning off every fixable rule still
  leaves the claims infeasible, so no change a user can make lets them fit), ``minimal`` (reasons
  and fixes both proven), ``limit`` (why not minimal: ``deadline`` or ``budget``; "" when
  minimal), ``solves``, ``status``.

How: with every switch assumed on, the model is infeasible exactly when the claims do not fit.
CP-SAT's ``sufficient_assumptions_for_infeasibility`` gives an infeasible subset of the
switches; deletion-based shrinking (drop one, solve again, keep it out if still infeasible)
makes it irreducible. Before that, each tier is tried on its own: if the claims would not fit
even with only the rules of a tier (what the claims ask and what the node is, before its
current state), the reasons come from that tier. The fixes are the fewest fixable switches to
turn off, by optimisation over the same model; when even turning off every fixable switch
leaves the model infeasible, that is proven (``no_fix``), not a failure to find fixes. Single
worker, fixed seed: the same problem gives the same explanation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from dra_solver.model.cpsat.model import AllocationModel
from dra_solver.model.cpsat.problem import Problem, Rule


@dataclass(frozen=True, slots=True)
class Reasons:
    allocatable: bool
    reasons: tuple[Rule, ...]
    fixes: tuple[Rule, ...]
    minimal: bool
    """Reasons proven irreducible and fixes proven minimum (no time or budget ran out)."""
    solves: int
    status: str
    no_fix: bool = False
    """Proven: with every fixable rule off the claims still do not fit (``fixes`` is empty)."""
    limit: str = ""
    """Why the answer is not proven minimal: ``deadline`` (a solve ran out of time) or
    ``budget`` (the number of solves); "" when it is minimal."""


def find_reasons(
    problem: Problem,
    *,
    key_of: Callable[[Rule], str],
    fixable: Callable[[Rule], bool],
    tiers: Sequence[Callable[[Rule], bool]] = (),
    priority: Callable[[Rule], int] = lambda rule: 0,
    time_limit: float = 5.0,
    remaining: Callable[[], float] | None = None,
    budget: int = 400,
) -> Reasons:
    """Reasons (irreducible) and fixes (minimum) for a relaxed ``problem``.

    ``time_limit`` bounds each solve and ``remaining()`` (the caller's deadline: seconds left,
    None for no deadline) all of them together; ``budget`` bounds the number of solves (large
    in-use sets shrink one switch at a time). Exhausting either gives a correct but possibly
    non-minimal answer with ``minimal=False`` and ``limit`` saying which ran out.
    """
    assert problem.relaxed, "explain needs a relaxed problem"
    built = AllocationModel(problem)
    model = built.model
    if built.infeasible:
        return Reasons(False, (), (), False, 0, "INFEASIBLE")
    # One switch per name: instances the caller names alike move together.
    switch: dict[str, cp_model.IntVar] = {}
    first: dict[str, Rule] = {}
    for rule, var in built.switches.items():
        name = key_of(rule)
        if name in switch:
            model.add(var == switch[name])
        else:
            switch[name], first[name] = var, rule
    keys = sorted(switch, key=lambda k: (priority(first[k]), k))
    solves = 0
    limit = ""

    def seconds() -> float | None:
        """This solve's time limit; None once the deadline has passed."""
        left = time_limit if remaining is None else min(time_limit, remaining())
        return left if left > 0 else None

    def feasible_with(active: Sequence[str]) -> tuple[bool | None, list[str]]:
        nonlocal solves, limit
        allowed = seconds()
        if allowed is None:
            limit = "deadline"
            return None, list(active)
        solves += 1
        model.clear_assumptions()
        model.add_assumptions([switch[k] for k in active])
        solver = _solver(allowed)
        status = solver.solve(model)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return True, []
        if status == cp_model.INFEASIBLE:
            core_idx = set(solver.sufficient_assumptions_for_infeasibility())
            core = [k for k in active if switch[k].index in core_idx]
            return False, core or list(active)
        limit = "deadline"
        return None, list(active)

    ok, core = feasible_with(keys)
    if ok:
        return Reasons(True, (), (), True, solves, "FEASIBLE")
    minimal = ok is False
    # Prefer reasons about what the claims ask and what the node is over reasons about its
    # current state: if the claims would not fit even on an empty, untainted node, say that.
    for tier in tiers:
        subset = [k for k in keys if tier(first[k])]
        ok_tier, core_tier = feasible_with(subset)
        if ok_tier is False:
            core = core_tier
            break
    # Shrink the core: a switch stays only if the rest is no longer infeasible without it.
    kept: list[str] = list(core)
    i = 0
    while i < len(kept):
        if solves >= budget:
            minimal = False
            limit = limit or "budget"
            break
        trial = kept[:i] + kept[i + 1 :]
        ok, smaller = feasible_with(trial)
        if ok is False:
            kept = [k for k in trial if k in set(smaller)] if smaller else trial
        else:
            if ok is None:
                minimal = False
            i += 1
    fixes = _Fixes([], False, False)
    allowed = seconds()
    if allowed is None:
        limit = "deadline"
    else:
        fixes = _minimum_fixes(model, switch, first, fixable, time_limit=allowed)
        solves += 1
        if not fixes.proven:
            limit = limit or "deadline"
    minimal = minimal and fixes.proven
    return Reasons(
        False,
        tuple(first[k] for k in kept),
        tuple(first[k] for k in fixes.off),
        minimal,
        solves,
        "INFEASIBLE",
        no_fix=fixes.none_exists,
        limit="" if minimal else (limit or "deadline"),
    )


@dataclass(frozen=True, slots=True)
class _Fixes:
    off: list[str]
    """The fixable switches to turn off (fewest, when ``proven``)."""
    proven: bool
    """``off`` is proven minimum, or proven not to exist (``none_exists``)."""
    none_exists: bool
    """Even with every fixable switch off the claims do not fit."""


def _minimum_fixes(
    model: cp_model.CpModel,
    switch: dict[str, cp_model.IntVar],
    first: dict[str, Rule],
    fixable: Callable[[Rule], bool],
    *,
    time_limit: float,
) -> _Fixes:
    model.clear_assumptions()
    keys = sorted(switch)
    for k in keys:
        if not fixable(first[k]):
            model.add_bool_and([switch[k]])
    soft = [switch[k] for k in keys if fixable(first[k])]
    # Fewest switches off; among equally few, those earliest in name order (so the answer
    # depends on the rules, not on the solver's path): a switch's rank weighs less than one
    # switch more kept on.
    tie_break = len(soft) * (len(soft) + 1) // 2 + 1
    model.maximize(sum(tie_break * var for var in soft) + sum(rank * var for rank, var in enumerate(soft, start=1)))
    solver = _solver(time_limit)
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:
        # What no user can change (a request's count: more devices than the node has, say)
        # blocks the claims on its own: there is no fix, and that is proven, not timed out.
        return _Fixes([], True, True)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _Fixes([], False, False)
    off = [k for k in keys if fixable(first[k]) and not solver.boolean_value(switch[k])]
    return _Fixes(off, status == cp_model.OPTIMAL, False)


def _solver(seconds: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # assumptions and cores need the single-worker search
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    return solver
