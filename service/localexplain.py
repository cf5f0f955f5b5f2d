"""Explain in this process, without a server: on the objects of files or of a live cluster.

API:
- ``holders(inventory) -> dict[DeviceID, str]``: who holds each device in use ("claim ns/name"),
  as the service words it.
- ``explain_on_node(request, *, cel, held_by=None, validate=True) -> ExplainAnswer``: the
  allocator decides first (the request's allocator, CP-SAT by default; it checks the objects
  as the API server would unless ``validate`` is False, raising ``InvalidInput(s)``); when it
  cannot allocate, ``model.explain_node`` says why, all within ``request.time_limit``.
  ``held_by``: who holds each device in use (default: ``holders(request.inventory)``).
- ``why_not(request, outcome, *, cel) -> str``: the one line ``dra-solver allocate`` prints
  when claims do not fit: ``cannot allocate all claims on node N: <the first blocking reason>``
  (``model.headline``); the allocator's own reason when the explanation cannot say more.

The gRPC service explains the same way (``service.engine``), with its reservations as holders
too; these are the shells that have no service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from dra_solver.model import (
    AllocationOutcome,
    AllocationRequest,
    CelEnvironment,
    DeviceID,
    DraSolverError,
    ExplainAnswer,
    Inventory,
    allocate,
    explain_node,
    headline,
)

UNSATISFIABLE = "cannot allocate all claims"
"""How every "does not fit" message starts (``dra-solver allocate``'s stderr contract)."""

WHY_NOT_SECONDS = 5.0
"""The explanation ``allocate`` adds to "does not fit" takes at most this long."""


def holders(inventory: Inventory) -> dict[DeviceID, str]:
    out: dict[DeviceID, str] = {}
    for claim in inventory.claims:
        allocation = claim.status.allocation if claim.status else None
        if allocation is None or allocation.devices is None:
            continue
        for r in allocation.devices.results or []:
            out.setdefault(DeviceID(r.driver, r.pool, r.device), f"claim {claim.ref}")
    return out


def explain_on_node(
    request: AllocationRequest,
    *,
    cel: CelEnvironment,
    held_by: Mapping[DeviceID, str] | None = None,
    validate: bool = True,
) -> ExplainAnswer:
    def solve(r: AllocationRequest) -> AllocationOutcome:
        return allocate(r, cel=cel, validate=validate)

    who = holders(request.inventory) if held_by is None else held_by
    return explain_node(request, cel=cel, holders=who, solve=solve)


def why_not(request: AllocationRequest, outcome: AllocationOutcome, *, cel: CelEnvironment) -> str:
    node = request.node.name
    fallback = outcome.reason or UNSATISFIABLE
    limit = min(request.time_limit or WHY_NOT_SECONDS, WHY_NOT_SECONDS)
    try:
        answer = explain_node(replace(request, time_limit=limit), cel=cel, holders=holders(request.inventory))
    except DraSolverError:
        return fallback  # the allocator answered; an explanation that cannot be made adds nothing
    if answer.allocatable or not answer.reasons:
        return fallback
    return f"{UNSATISFIABLE} on node {node}: {headline(answer.reasons)}"
