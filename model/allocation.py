"""The core's front-door types: what an allocation attempt takes and what it returns.

Contract (the same for every allocator, as upstream's ``Allocator`` interface defines it):

- ``AllocationOutcome(allocated=True, results=...)``: every claim got a result, in claim order.
- ``AllocationOutcome(allocated=False)``: the claims do not fit on this node. Not an error; the
  caller tries another node. ``reason`` says why when the allocator knows.
- ``AllocationError`` (raised): bad input that stops the attempt on every node (unknown
  DeviceClass, CEL runtime error, a requested feature that is disabled, fatal pool problem).
- ``InvalidInput`` (raised): an object fails API validation.
- ``SolveTimeout`` (raised): the time limit passed without an answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dra_solver.model import objects as o
from dra_solver.model.cluster import AllocatedState, DeviceID, Inventory
from dra_solver.model.features import FeatureGates
from dra_solver.model.pools import DeviceParseCache
from dra_solver.model.stats import SolveStats

__all__ = [
    "ALLOCATORS",
    "AllocatedState",
    "AllocationOutcome",
    "AllocationRequest",
    "AllocatorName",
    "DeviceID",
    "Inventory",
    "SolveStats",
]

AllocatorName = Literal["cpsat", "backtracking"]
ALLOCATORS: tuple[AllocatorName, ...] = ("cpsat", "backtracking")


@dataclass(frozen=True, slots=True)
class AllocationRequest:
    """Allocate ``claims`` together on ``node`` (upstream ``Allocate(node, claims)``)."""

    claims: tuple[o.ResourceClaim, ...]
    node: o.Node
    inventory: Inventory
    gates: FeatureGates = field(default_factory=FeatureGates)
    allocator: AllocatorName = "cpsat"
    time_limit: float | None = 10.0
    """Seconds the search may take; derived from the caller's deadline."""
    policy: str = ""
    """Quality objective after the FirstAvailable score ("" = allocator default)."""
    device_cache: DeviceParseCache | None = field(default=None, compare=False, repr=False)
    """Parsed devices a long-lived caller keeps across requests (``model.pools``)."""


@dataclass(frozen=True, slots=True)
class AllocationOutcome:
    allocated: bool
    results: tuple[o.AllocationResult, ...]
    """One per claim in request order when allocated; empty otherwise."""
    score: int
    """The scheduler's FirstAvailable score of ``results`` (0 when not allocated)."""
    stats: SolveStats
    reason: str = ""
