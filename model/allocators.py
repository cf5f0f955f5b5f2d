"""The core's front door for one node: allocate claims with the allocator the caller chose.

API (re-exported by ``dra_solver.model``):
- ``allocate(request, *, cel=None, validate=True) -> AllocationOutcome``
- ``allocate_cpsat(request, *, cel, clock=time.monotonic, fast_path=True) -> AllocationOutcome``:
  the CP-SAT allocator in its phases (below), without API validation.
- ``default_cel(request) -> CelEnvironment``
- ``warm_up()``: import and set up what the first CP-SAT solve would otherwise pay for.

Contract (``model.allocation`` states it for every allocator; upstream's ``Allocator``
interface is the model):

- returns ``AllocationOutcome(allocated=True, results=...)``: one result per claim, in claim
  order, each a valid allocation (``model.check`` agrees);
- returns ``AllocationOutcome(allocated=False, reason="cannot allocate all claims...")``: the
  claims do not fit on this node; not an error, the caller may try another node;
- raises ``InvalidInputs``/``InvalidInput``: an object fails the API server's validation (run
  first, over the claims to allocate, the classes, slices, taint rules and the node; an
  unknown allocator or policy is an ``InvalidInput`` too);
- raises ``NodeLocalError``: an error upstream only reports for this node ("invalid resource
  pools were encountered"); other nodes may still fit;
- raises ``AllocationError``: input that stops the attempt on every node, with upstream's
  wording (unknown DeviceClass, CEL runtime error, disabled feature requested, fatal pool
  problem);
- raises ``SolveTimeout``: ``request.time_limit`` passed without an answer.

The CP-SAT allocator's phases, in order:
1. prepare (``model.cpsat.prepare_problem``): pools, upstream's pre-search checks and errors,
   the eligible devices of every request and subrequest;
2. settle deferred errors (here): a selector that failed on some device, or an ``All``
   request under a claim constraint, makes upstream's verdict depend on its search order; the
   faithful search (``model.backtracking``) decides whether upstream would have stopped with
   an error, with half the remaining time;
3. solve (``model.cpsat.solve_problem``): the fast path, else the model; results.

``cel`` is the CEL environment to evaluate selectors with; by default one is built with the
CEL features the request's feature gates imply. Reuse one environment across calls to keep
its compile and match caches warm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from dra_solver.model import cpsat, validation
from dra_solver.model.allocation import ALLOCATORS, AllocationOutcome, AllocationRequest
from dra_solver.model.backtracking import allocate_backtracking
from dra_solver.model.cel import CelEnvironment, CelFeatures
from dra_solver.model.cpsat.problem import Problem
from dra_solver.model.errors import InvalidInput, NodeLocalError, SolveTimeout, quote
from dra_solver.model.policy import checked_policy

DEFERRED_CHECK_SHARE = 0.5
"""Share of the time limit the faithful search may use to settle deferred errors."""


def allocate(
    request: AllocationRequest,
    *,
    cel: CelEnvironment | None = None,
    validate: bool = True,
) -> AllocationOutcome:
    """Allocate ``request.claims`` together on ``request.node`` (see the module contract)."""
    if request.allocator not in ALLOCATORS:
        raise InvalidInput(
            "",
            ("allocator",),
            f"Unsupported value: {quote(request.allocator)}: supported values: {', '.join(ALLOCATORS)}",
        )
    if cel is None:
        cel = default_cel(request)
    if validate:
        _validate(request, cel)
    if request.allocator == "backtracking":
        return allocate_backtracking(request, cel=cel)
    return allocate_cpsat(request, cel=cel)


def allocate_cpsat(
    request: AllocationRequest,
    *,
    cel: CelEnvironment,
    clock: Callable[[], float] = time.monotonic,
    fast_path: bool = True,
) -> AllocationOutcome:
    """The CP-SAT allocator: ``request.claims`` on ``request.node`` with the best FirstAvailable
    score, then the policy's preference (phases in the module docstring).

    ``fast_path=False`` always builds and solves the model (tests and benchmarks use it to
    exercise the model on simple inputs).
    """
    start = clock()
    policy = checked_policy(request.policy)
    problem = cpsat.prepare_problem(request, cel=cel)
    if problem.deferred_errors or problem.search_dependent:
        budget = None if request.time_limit is None else request.time_limit - (clock() - start)
        settle_deferred_errors(problem, cel=cel, budget=budget, clock=clock)
    return cpsat.solve_problem(problem, policy=policy, start=start, clock=clock, fast_path=fast_path)


def settle_deferred_errors(
    problem: Problem,
    *,
    cel: CelEnvironment,
    budget: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Raise the error upstream would stop with, if its search reaches a failing pair."""
    limit = budget * DEFERRED_CHECK_SHARE if budget is not None else None
    try:
        allocate_backtracking(replace(problem.request, time_limit=limit), cel=cel, clock=clock)
    except NodeLocalError:
        return  # the search ended without meeting one of them: our own verdict stands
    except SolveTimeout:
        # Unknown whether upstream would get there; a selector that fails on a candidate is
        # reported (first in search order), an order-dependent constraint is left to the model.
        if problem.deferred_errors:
            raise problem.deferred_errors[0] from None


def default_cel(request: AllocationRequest) -> CelEnvironment:
    """A CEL environment with the optional CEL features the request's gates turn on."""
    gates = request.gates
    return CelEnvironment(
        features=CelFeatures(
            consumable_capacity=gates.consumable_capacity,
            list_type_attributes=gates.list_type_attributes,
        )
    )


def warm_up() -> None:
    """Import OR-Tools and run its one-time set-up now rather than in the first solve
    (``compare`` and the benchmarks call it before they time anything). Reported solve times
    never include either (``model.cpsat``); this moves the wait itself. The service does not
    call it: a server whose answers never leave the fast path never loads OR-Tools (~80 MiB)."""
    cpsat.warm_up()


def _validate(request: AllocationRequest, cel: CelEnvironment) -> None:
    """API-server validation of everything the attempt reads (``model.validation``)."""
    inventory = request.inventory
    validation.validate_objects(
        [
            *request.claims,
            *inventory.classes,
            *inventory.slices,
            *inventory.taint_rules,
            request.node,
        ],
        selector_check=validation.selector_check_for(cel),
    )
