"""The CP-SAT allocator: upstream's semantics, solved exactly and optimally.

API:
- ``prepare_problem(request, *, cel) -> Problem`` (``model.cpsat.problem``): upstream's
  pre-search phases and the eligible devices of every request and subrequest.
- ``solve_problem(problem, *, policy, start, clock=time.monotonic, fast_path=True) ->
  AllocationOutcome``: the rest, with the contract of ``model.allocation`` (allocated / not
  allocated / ``NodeLocalError`` / ``SolveTimeout``); ``start`` is the ``clock`` reading the
  attempt began at (``request.time_limit`` counts from it).
- ``warm_up() -> None``: import OR-Tools and solve a trivial model once.
- ``results_of(problem, choices) -> list[AllocationResult]``: upstream-shaped results for
  what a model chose (the group model decodes each of its instances with it).

The front door (``model.allocators.allocate_cpsat``) runs the phases in order:
1. prepare (``model.cpsat.problem``): pools, upstream's pre-search checks and errors, and the
   eligible devices of every request and subrequest;
2. deferred errors (a step of the front door, not of this package): when a selector failed on
   some device, or an ``All`` request sits under a claim constraint, the faithful backtracking
   port decides whether upstream's search would have stopped with an error;
3. fast paths: first-fit when requests do not interact beyond exclusive use
   (``model.cpsat.greedy``); the model's optimum found candidate by candidate when the claims
   take exactly one device (``model.cpsat.single``: partitioned GPUs, one slice per pod);
4. model and solve (``model.cpsat.model``, ``model.cpsat.solve``): status mapping OPTIMAL and
   FEASIBLE → allocated (FEASIBLE reports its gap), INFEASIBLE → not allocated (or, like
   upstream, "invalid resource pools were encountered" when a pool was invalid), UNKNOWN →
   ``SolveTimeout``;
5. results (``model.results``): upstream-shaped ``AllocationResult`` per claim.

OR-Tools (with numpy and pandas) takes about 0.4 s to import and its first solve carries a
one-time set-up of a few milliseconds. Neither is part of an attempt's reported time: the
OR-Tools half (``model.cpsat.model``, ``model.cpsat.solve``) is imported on first use, so a
one-shot CLI call that the fast path answers never pays for it, and the time the first use
spends importing and warming up (``warm_up``) is taken out of ``SolveStats.wall_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, SolveStats
from dra_solver.model.cpsat.greedy import greedy
from dra_solver.model.cpsat.problem import Choices, Problem, prepare_problem
from dra_solver.model.cpsat.single import NothingFits, single_device
from dra_solver.model.errors import AllocationError, NodeLocalError, SolveTimeout
from dra_solver.model.policy import Policy
from dra_solver.model.results import ChosenDevice, build_result
from dra_solver.model.score import first_available_score, subrequest_weight

__all__ = ["prepare_problem", "results_of", "solve_problem", "warm_up"]

ALLOCATOR_NAME = "cpsat"

_warm = False


def warm_up() -> None:
    """Import OR-Tools and run its one-time set-up (a trivial solve), once per process."""
    global _warm
    if _warm:
        return
    # lazy import: OR-Tools (~0.4 s with numpy and pandas), only when a model is solved
    from dra_solver.model.cpsat.solve import solve_trivial

    solve_trivial()
    _warm = True


def solve_problem(
    problem: Problem,
    *,
    policy: Policy,
    start: float,
    clock: Callable[[], float] = time.monotonic,
    fast_path: bool = True,
) -> AllocationOutcome:
    """Phases 3-5 (see the module docstring) for a prepared problem.

    ``fast_path=False`` always builds and solves the model (tests and benchmarks use it to
    exercise the model on simple inputs).
    """
    request = problem.request
    policy = Policy(policy)
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
        return _outcome(problem, quick, trivial)
    in_time = request.time_limit is None or request.time_limit > clock() - start
    one = single_device(problem, policy) if fast_path and in_time else None
    if isinstance(one, NothingFits):
        # Proven infeasible by looking at every candidate (model.cpsat.single).
        return _not_allocated(problem, SolveStats(allocator=ALLOCATOR_NAME, status="INFEASIBLE", wall_seconds=clock() - start, policy=policy), "")
    if one is not None:
        score = float(sum(subrequest_weight(k.subrequest) for k in one.selected.values() if k.subrequest is not None))
        # Proven optimal by looking at every candidate (model.cpsat.single).
        exact = SolveStats(
            allocator=ALLOCATOR_NAME,
            status="OPTIMAL",
            wall_seconds=clock() - start,
            policy=policy,
            objective=score,
            best_bound=score,
            gap=0.0,
        )
        return _outcome(problem, one, exact)

    if not _warm:
        paused = clock()
        warm_up()
        start += clock() - paused  # imports and one-time set-up are not this attempt's time
    # lazy import: OR-Tools (~0.4 s), loaded by warm_up above; see the module docstring
    from dra_solver.model.cpsat.model import AllocationModel
    from dra_solver.model.cpsat.solve import SolverConfig, solve  # lazy import: OR-Tools, as above

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

    left = None if request.time_limit is None else request.time_limit - (clock() - start)
    if left is not None and left <= 0:
        raise _timeout(problem, clock() - start, variables, constraints, policy)
    config = SolverConfig.for_model(variables, time_limit=left)
    solution = solve(built, config)

    def stats(status: str) -> SolveStats:
        return SolveStats(
            allocator=ALLOCATOR_NAME,
            status=status,
            wall_seconds=clock() - start,
            variables=variables,
            constraints=constraints,
            objective=float(solution.score) if solution.choices.selected or solution.choices.devices_of else None,
            best_bound=float(solution.score_bound) if solution.score_bound is not None else None,
            gap=solution.gap,
            policy=policy,
            parameters=config.parameters(),
        )

    if solution.status in ("OPTIMAL", "FEASIBLE"):
        return _outcome(problem, solution.choices, stats(solution.status))
    if solution.status == "INFEASIBLE":
        return _not_allocated(problem, stats("INFEASIBLE"), "")
    if solution.status == "UNKNOWN":
        raise _timeout(problem, clock() - start, variables, constraints, policy, stats("UNKNOWN"))
    raise RuntimeError(f"cpsat: the solver rejected the model ({solution.status})")


def results_of(problem: Problem, choices: Choices) -> list[o.AllocationResult]:
    """Upstream-shaped results, one per claim of ``problem``, for what a model chose."""
    request = problem.request
    results: list[o.AllocationResult] = []
    for plan in problem.plans:
        picks: list[ChosenDevice] = []
        selected: dict[int, int] = {}
        for req in plan.requests:
            key = choices.selected_option(plan.index, req.index)
            if req.first_available:
                selected[req.index] = key.subrequest or 0
            option = problem.option(key)
            for candidate in choices.devices(key):
                consumed = option.consumed.get(candidate.id) if candidate.multi else None
                picks.append(ChosenDevice(option.view, candidate.device, candidate.multi, consumed or None))
        try:
            results.append(
                build_result(plan, picks, node_name=request.node.name, gates=request.gates, selected=selected)
            )
        except AllocationError as err:
            raise AllocationError(f"create NodeSelector for claim {plan.claim.name}: {err}") from err
    return results


def _outcome(problem: Problem, choices: Choices, stats: SolveStats) -> AllocationOutcome:
    results = results_of(problem, choices)
    return AllocationOutcome(
        allocated=True,
        results=tuple(results),
        score=first_available_score(problem.request.claims, results),
        stats=stats,
    )


def _not_allocated(problem: Problem, stats: SolveStats, detail: str) -> AllocationOutcome:
    if problem.has_invalid_pool:
        # Upstream: not a fatal error, other nodes may still work.
        raise NodeLocalError("invalid resource pools were encountered", stats=stats)
    reason = "cannot allocate all claims"
    if detail:
        reason += f": {detail}"
    return AllocationOutcome(allocated=False, results=(), score=0, stats=stats, reason=reason)


def _timeout(
    problem: Problem,
    elapsed: float,
    variables: int,
    constraints: int,
    policy: str,
    stats: SolveStats | None = None,
) -> SolveTimeout:
    return SolveTimeout(
        f"cpsat allocator: time limit of {problem.request.time_limit}s reached without an answer "
        f"({variables} variables, {constraints} constraints)",
        stats=stats
        or SolveStats(
            allocator=ALLOCATOR_NAME,
            status="UNKNOWN",
            wall_seconds=elapsed,
            variables=variables,
            constraints=constraints,
            policy=policy,
        ),
    )
