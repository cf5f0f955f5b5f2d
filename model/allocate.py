"""The core's front door: allocate claims on one node with the allocator the caller chose.

API:
- ``allocate(request, *, cel=None, validate=True) -> AllocationOutcome``

Contract (``model.allocation`` states it for every allocator; upstream's ``Allocator``
interface is the model):

- returns ``AllocationOutcome(allocated=True, results=...)``: one result per claim, in claim
  order, each a valid allocation (``model.check`` agrees);
- returns ``AllocationOutcome(allocated=False, reason="cannot allocate all claims...")``: the
  claims do not fit on this node; not an error, the caller may try another node;
- raises ``InvalidInputs``/``InvalidInput``: an object fails the API server's validation (run
  first, over the claims to allocate, the classes, slices, taint rules and the node; an
  unknown allocator or policy is an ``InvalidInput`` too);
- raises ``AllocationError``: input that stops the attempt on every node, with upstream's
  wording (unknown DeviceClass, CEL runtime error, disabled feature requested, fatal pool
  problem). An error upstream only reports for this node ("invalid resource pools were
  encountered") carries ``node_local = True``;
- raises ``SolveTimeout``: ``request.time_limit`` passed without an answer.

``cel`` is the CEL environment to evaluate selectors with; by default one is built with the
CEL features the request's feature gates imply. Reuse one environment across calls to keep
its compile and match caches warm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dra_solver.model.allocation import ALLOCATORS, AllocationOutcome, AllocationRequest
from dra_solver.model.errors import InvalidInput, clip_lines, quote

if TYPE_CHECKING:
    from dra_solver.model.cel import CelEnvironment


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
        from dra_solver.model.backtracking import allocate_backtracking

        return allocate_backtracking(request, cel=cel)
    from dra_solver.model.cpsat import allocate_cpsat

    return allocate_cpsat(request, cel=cel)


def default_cel(request: AllocationRequest) -> CelEnvironment:
    """A CEL environment with the optional CEL features the request's gates turn on."""
    from dra_solver.model.cel import CelEnvironment, CelFeatures

    gates = request.gates
    return CelEnvironment(
        features=CelFeatures(
            consumable_capacity=gates.consumable_capacity,
            list_type_attributes=gates.list_type_attributes,
        )
    )


def _validate(request: AllocationRequest, cel: CelEnvironment) -> None:
    """API-server validation of everything the attempt reads (``model.validation``)."""
    try:
        from dra_solver.model import validation
    except ImportError:  # pragma: no cover - hook while validation is being written
        return
    inventory = request.inventory
    validation.validate_objects(
        [
            *request.claims,
            *inventory.classes,
            *inventory.slices,
            *inventory.taint_rules,
            request.node,
        ],
        **_selector_check(cel),
    )


def _selector_check(cel: CelEnvironment) -> dict[str, Any]:
    """Compile selectors for validation with the caller's environment when it has every CEL
    feature on (as the API server validates), so its compile cache is reused across calls;
    otherwise let validation build its own all-features environment."""
    from dra_solver.model.cel import CEL_SELECTOR_EXPRESSION_MAX_COST, CelCompileError, CelFeatures
    from dra_solver.model.validation import CEL_COST_EXCEEDED

    if cel.features != CelFeatures() or cel.cost_limit != CEL_SELECTOR_EXPRESSION_MAX_COST:
        return {}

    def check(expression: str) -> str | None:
        try:
            compiled = cel.compile(expression)
        except CelCompileError as err:
            message = clip_lines(str(err))
            return message if message.startswith("compilation failed") else f"compilation failed: {message}"
        return CEL_COST_EXCEEDED if compiled.max_cost > CEL_SELECTOR_EXPRESSION_MAX_COST else None

    return {"selector_check": check}
