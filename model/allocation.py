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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from dra_solver.model import objects as o
from dra_solver.model.features import FeatureGates

if TYPE_CHECKING:
    from dra_solver.model.pools import DeviceParseCache
    from dra_solver.model.quantity import Quantity

AllocatorName = Literal["cpsat", "backtracking"]
ALLOCATORS: tuple[AllocatorName, ...] = ("cpsat", "backtracking")


@dataclass(frozen=True, slots=True, order=True)
class DeviceID:
    """A device's identity across the cluster: driver, pool, device name."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class AllocatedState:
    """Devices already in use, as upstream's allocator receives them.

    ``devices``: allocated exclusively (no adminAccess, no shareID). ``shared``: (device, shareID)
    pairs of devices allocated with allowMultipleAllocations. ``capacity``: consumable capacity
    already consumed per device, summed over all its shares.
    """

    devices: frozenset[DeviceID] = frozenset()
    shared: frozenset[tuple[DeviceID, str]] = frozenset()
    capacity: Mapping[DeviceID, Mapping[str, Quantity]] = field(default_factory=dict)

    def merge(self, other: AllocatedState) -> AllocatedState:
        capacity: dict[DeviceID, dict[str, Quantity]] = {k: dict(v) for k, v in self.capacity.items()}
        for dev, amounts in other.capacity.items():
            mine = capacity.setdefault(dev, {})
            for name, amount in amounts.items():
                mine[name] = mine[name].add(amount) if name in mine else amount
        return AllocatedState(
            devices=self.devices | other.devices,
            shared=self.shared | other.shared,
            capacity=capacity,
        )

    @staticmethod
    def from_claims(claims: Iterable[o.ResourceClaim]) -> AllocatedState:
        """In-use state from allocated claims, the way the scheduler gathers it."""
        from dra_solver.model.quantity import (
            parse_quantity,  # local: keeps import cost off module load
        )

        devices: set[DeviceID] = set()
        shared: set[tuple[DeviceID, str]] = set()
        capacity: dict[DeviceID, dict[str, Quantity]] = {}
        for claim in claims:
            allocation = claim.status.allocation if claim.status else None
            if allocation is None or allocation.devices is None:
                continue
            for result in allocation.devices.results or []:
                dev = DeviceID(result.driver, result.pool, result.device)
                if result.admin_access:
                    continue
                if result.share_id is not None:
                    shared.add((dev, result.share_id))
                else:
                    devices.add(dev)
                for name, text in (result.consumed_capacity or {}).items():
                    amount = parse_quantity(text)
                    mine = capacity.setdefault(dev, {})
                    mine[name] = mine[name].add(amount) if name in mine else amount
        return AllocatedState(frozenset(devices), frozenset(shared), capacity)


@dataclass(frozen=True, slots=True)
class Inventory:
    """One consistent snapshot of the cluster objects an allocation reads."""

    classes: tuple[o.DeviceClass, ...] = ()
    slices: tuple[o.ResourceSlice, ...] = ()
    taint_rules: tuple[o.DeviceTaintRule, ...] = ()
    nodes: tuple[o.Node, ...] = ()
    claims: tuple[o.ResourceClaim, ...] = ()
    """Known claims; those with ``status.allocation`` hold their devices."""
    extra_allocated: AllocatedState = field(default_factory=AllocatedState)
    """In-use state not expressed as claims (reservations in flight, test harnesses)."""

    @classmethod
    def from_objects(cls, objects: Iterable[o.TypedObject]) -> Inventory:
        classes: list[o.DeviceClass] = []
        slices: list[o.ResourceSlice] = []
        rules: list[o.DeviceTaintRule] = []
        nodes: list[o.Node] = []
        claims: list[o.ResourceClaim] = []
        for obj in objects:
            if isinstance(obj, o.DeviceClass):
                classes.append(obj)
            elif isinstance(obj, o.ResourceSlice):
                slices.append(obj)
            elif isinstance(obj, o.DeviceTaintRule):
                rules.append(obj)
            elif isinstance(obj, o.Node):
                nodes.append(obj)
            elif isinstance(obj, o.ResourceClaim):
                claims.append(obj)
        return cls(tuple(classes), tuple(slices), tuple(rules), tuple(nodes), tuple(claims))

    def allocated_state(self) -> AllocatedState:
        return AllocatedState.from_claims(c for c in self.claims if c.allocated).merge(self.extra_allocated)

    def device_class(self, name: str) -> o.DeviceClass | None:
        for cls_ in self.classes:
            if cls_.name == name:
                return cls_
        return None

    def node(self, name: str) -> o.Node:
        """The Node object of that name, or a bare Node without labels."""
        for node in self.nodes:
            if node.name == name:
                return node
        return o.Node(api_version="v1", kind="Node", metadata=o.ObjectMeta(name=name))

    def node_names(self) -> list[str]:
        """Nodes known from Node objects and from node-local slices, sorted."""
        names = {n.name for n in self.nodes if n.name}
        names.update(s.spec.node_name for s in self.slices if s.spec.node_name)
        for s in self.slices:
            for d in s.spec.devices or []:
                if d.node_name:
                    names.add(d.node_name)
        return sorted(names)


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
class SolveStats:
    allocator: str
    status: str
    """cpsat: OPTIMAL/FEASIBLE/INFEASIBLE/UNKNOWN/MODEL_INVALID/TRIVIAL; backtracking: FOUND/EXHAUSTED/DEADLINE."""
    wall_seconds: float
    variables: int = 0
    constraints: int = 0
    steps: int = 0
    """Backtracking: upstream's allocateOne invocation count."""
    objective: float | None = None
    best_bound: float | None = None
    gap: float | None = None
    policy: str = ""
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AllocationOutcome:
    allocated: bool
    results: tuple[o.AllocationResult, ...]
    """One per claim in request order when allocated; empty otherwise."""
    score: int
    """The scheduler's FirstAvailable score of ``results`` (0 when not allocated)."""
    stats: SolveStats
    reason: str = ""
