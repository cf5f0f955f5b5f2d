"""The CP-SAT allocator: upstream's semantics, solved exactly and optimally.

API:
- ``allocate_cpsat(request, *, cel, clock=time.monotonic, fast_path=True) -> AllocationOutcome``
  with the contract of ``model.allocation`` (allocated / not allocated / ``AllocationError`` /
  ``SolveTimeout``).

Phases, in order:
1. prepare (``model.cpsat.problem``): pools, upstream's pre-search checks and errors, and the
   eligible devices of every request and subrequest;
2. deferred errors: when a selector failed on some device, or an ``All`` request sits under a
   claim constraint, ask the faithful backtracking port whether upstream's search would have
   stopped with an error (then upstream's error is ours);
3. fast path (``model.cpsat.greedy``): first-fit when requests do not interact beyond
   exclusive use;
4. model and solve (``model.cpsat.model``, ``model.cpsat.solve``): status mapping OPTIMAL and
   FEASIBLE → allocated (FEASIBLE reports its gap), INFEASIBLE → not allocated (or, like
   upstream, "invalid resource pools were encountered" when a pool was invalid), UNKNOWN →
   ``SolveTimeout``;
5. results (``model.results``): upstream-shaped ``AllocationResult`` per claim.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest, SolveStats
from dra_solver.model.cpsat.greedy import greedy
from dra_solver.model.cpsat.problem import (
    DEFAULT_POLICY,
    POLICIES,
    OptionKey,
    Problem,
    checked_policy,
    prepare_problem,
)
from dra_solver.model.errors import AllocationError, SolveTimeout
from dra_solver.model.results import ChosenDevice, build_result
from dra_solver.model.score import first_available_score

if TYPE_CHECKING:
    from dra_solver.model.cel import CelEnvironment

__all__ = ["DEFAULT_POLICY", "POLICIES", "allocate_cpsat"]

ALLOCATOR_NAME = "cpsat"
DEFERRED_CHECK_SHARE = 0.5
"""Share of the time limit the faithful search may use to settle deferred errors."""


def allocate_cpsat(
    request: AllocationRequest,
    *,
    cel: CelEnvironment,
    clock: Callable[[], float] = time.monotonic,
    fast_path: bool = True,
) -> AllocationOutcome:
    """Allocate ``request.claims`` on ``request.node`` with the best FirstAvailable score.

    ``fast_path=False`` always builds and solves the model (tests and benchmarks use it to
    exercise the model on simple inputs).
    """
    start = clock()
    policy = checked_policy(request.policy)

    def remaining() -> float | None:
        if request.time_limit is None:
            return None
        return request.time_limit - (clock() - start)

    problem = prepare_problem(request, cel=cel)
    if problem.deferred_errors or problem.search_dependent:
        _settle_deferred_errors(problem, request, cel=cel, budget=remaining(), clock=clock)

    quick = greedy(problem) if fast_path else None
    if quick is not None:
        trivial = SolveStats(
            allocator=ALLOCATOR_NAME,
            status="TRIVIAL",
            wall_seconds=clock() - start,
            policy=policy,
            objective=0.0,
            best_bound=0.0,
            gap=0.0,
        )
        return _outcome(problem, quick, {(c, r): 0 for c, r, _ in quick}, trivial)

    # Imported here: OR-Tools (with numpy and pandas) costs ~0.4 s to import, which a one-shot
    # CLI call that the fast path answers should not pay.
    from dra_solver.model.cpsat.model import AllocationModel
    from dra_solver.model.cpsat.solve import SolverConfig, solve

    built = AllocationModel(problem, policy=policy)
    variables, constraints = built.size()
    if built.infeasible:
        impossible = SolveStats(
            allocator=ALLOCATOR_NAME,
            status="INFEASIBLE",
            wall_seconds=clock() - start,
            variables=variables,
            constraints=constraints,
            policy=policy,
        )
        return _not_allocated(problem, impossible, built.infeasible)

    left = remaining()
    if left is not None and left <= 0:
        raise _timeout(request, clock() - start, variables, constraints, policy)
    config = SolverConfig.for_model(variables, time_limit=left)
    solution = solve(built, config)

    def stats(status: str) -> SolveStats:
        return SolveStats(
            allocator=ALLOCATOR_NAME,
            status=status,
            wall_seconds=clock() - start,
            variables=variables,
            constraints=constraints,
            objective=float(solution.score) if solution.chosen or solution.selected else None,
            best_bound=float(solution.score_bound) if solution.score_bound is not None else None,
            gap=solution.gap,
            policy=policy,
            parameters=config.parameters(),
        )

    if solution.status in ("OPTIMAL", "FEASIBLE"):
        selected = {(c, r): i for c, r, i in solution.selected}
        return _outcome(problem, solution.chosen, selected, stats(solution.status))
    if solution.status == "INFEASIBLE":
        return _not_allocated(problem, stats("INFEASIBLE"), "")
    if solution.status == "UNKNOWN":
        raise _timeout(request, clock() - start, variables, constraints, policy, stats("UNKNOWN"))
    raise RuntimeError(f"cpsat: the solver rejected the model ({solution.status})")


def _settle_deferred_errors(
    problem: Problem,
    request: AllocationRequest,
    *,
    cel: CelEnvironment,
    budget: float | None,
    clock: Callable[[], float],
) -> None:
    """Raise the error upstream would stop with, if its search reaches a failing pair."""
    from dataclasses import replace

    from dra_solver.model.backtracking import allocate_backtracking

    limit = budget * DEFERRED_CHECK_SHARE if budget is not None else None
    try:
        allocate_backtracking(replace(request, time_limit=limit), cel=cel, clock=clock)
    except AllocationError as err:
        if getattr(err, "node_local", False):
            return  # the search ended without meeting one of them: our own verdict stands
        raise
    except SolveTimeout:
        # Unknown whether upstream would get there; a selector that fails on a candidate is
        # reported (first in search order), an order-dependent constraint is left to the model.
        if problem.deferred_errors:
            raise problem.deferred_errors[0] from None


def _outcome(
    problem: Problem,
    chosen: dict[OptionKey, list[int]],
    selected: dict[tuple[int, int], int],
    stats: SolveStats,
) -> AllocationOutcome:
    request = problem.request
    results: list[o.AllocationResult] = []
    for c, plan in enumerate(problem.plans):
        picks: list[ChosenDevice] = []
        for r, req in enumerate(plan.requests):
            i = selected.get((c, r), 0)
            option = problem.options[c][r][i]
            for index in chosen.get((c, r, i), []):
                candidate = problem.candidates[index]
                consumed = option.consumed.get(index) if candidate.multi else None
                picks.append(ChosenDevice(option.view, candidate.device, candidate.multi, consumed or None))
            del req
        try:
            results.append(
                build_result(
                    plan,
                    picks,
                    node_name=request.node.name,
                    gates=request.gates,
                    selected={r: i for (cc, r), i in selected.items() if cc == c},
                )
            )
        except AllocationError as err:
            raise AllocationError(f"create NodeSelector for claim {plan.claim.name}: {err}") from err
    return AllocationOutcome(
        allocated=True,
        results=tuple(results),
        score=first_available_score(request.claims, results),
        stats=stats,
    )


def _not_allocated(problem: Problem, stats: SolveStats, detail: str) -> AllocationOutcome:
    if problem.has_invalid_pool:
        # Upstream: not a fatal error, other nodes may still work.
        err = AllocationError("invalid resource pools were encountered")
        err.node_local = True  # type: ignore[attr-defined]
        err.stats = stats  # type: ignore[attr-defined]
        raise err
    reason = "cannot allocate all claims"
    if detail:
        reason += f": {detail}"
    return AllocationOutcome(allocated=False, results=(), score=0, stats=stats, reason=reason)


def _timeout(
    request: AllocationRequest,
    elapsed: float,
    variables: int,
    constraints: int,
    policy: str,
    stats: SolveStats | None = None,
) -> SolveTimeout:
    err = SolveTimeout(
        f"cpsat allocator: time limit of {request.time_limit}s reached without an answer "
        f"({variables} variables, {constraints} constraints)"
    )
    err.stats = stats or SolveStats(  # type: ignore[attr-defined]
        allocator=ALLOCATOR_NAME,
        status="UNKNOWN",
        wall_seconds=elapsed,
        variables=variables,
        constraints=constraints,
        policy=policy,
    )
    return err
