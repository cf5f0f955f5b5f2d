"""The cluster state an allocation attempt reads: one snapshot of objects and what is in use.

API:
- ``DeviceID(driver, pool, device)``: a device's identity across the cluster.
- ``AllocatedState``: devices in use (exclusively, as shares, consumed capacity), as upstream's
  allocator receives them; ``AllocatedState.from_claims(claims)`` gathers it from allocated
  claims the way the scheduler does; ``merge`` adds another state.
- ``Inventory``: DeviceClasses, ResourceSlices, DeviceTaintRules, Nodes and claims of one
  consistent snapshot, plus in-use state not expressed as claims (``extra_allocated``).

Why its own module: pools, matching and the node index read these types, and the front-door
types (``model.allocation``) are built on top of pools; keeping the data here keeps the layers
acyclic.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.quantity import Quantity, parse_quantity


@dataclass(frozen=True, slots=True, order=True)
class DeviceID:
    """A device's identity across the cluster: driver, pool, device name."""

    driver: str
    pool: str
    device: str
    _hash: int = field(init=False, repr=False, compare=False)
    """The hash of the three names, computed once: IDs are hashed in every set and dict of
    devices in use, and the generated ``__hash__`` builds a tuple on every call."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.driver, self.pool, self.device)))

    def __hash__(self) -> int:
        return self._hash

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

    def ids(self) -> frozenset[DeviceID]:
        """Every device with anything in use: allocated exclusively, shared, or consumed from."""
        return self.devices.union(self.capacity, (d for d, _ in self.shared))

    def merge(self, other: AllocatedState) -> AllocatedState:
        # States are immutable: merging with an empty one is the other one (a node's in-use
        # state is merged with empty ones on every solve of a Schedule).
        if not (other.devices or other.shared or other.capacity):
            return self
        if not (self.devices or self.shared or self.capacity):
            return other
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
    def union(states: Iterable[AllocatedState]) -> AllocatedState:
        """All of ``states`` as one (consumed capacity summed), built in one pass: merging them
        pairwise would copy the growing sum once per state."""
        parts = list(states)
        if len(parts) == 1:
            return parts[0]
        devices: set[DeviceID] = set()
        shared: set[tuple[DeviceID, str]] = set()
        capacity: dict[DeviceID, dict[str, Quantity]] = {}
        for state in parts:
            devices.update(state.devices)
            shared.update(state.shared)
            for dev, amounts in state.capacity.items():
                mine = capacity.setdefault(dev, {})
                for name, amount in amounts.items():
                    mine[name] = mine[name].add(amount) if name in mine else amount
        return AllocatedState(frozenset(devices), frozenset(shared), capacity)

    def restricted_to(self, pools: Collection[tuple[str, str]]) -> AllocatedState:
        """Only what is in use in ``pools`` ((driver, pool) pairs)."""

        def mine(d: DeviceID) -> bool:
            return (d.driver, d.pool) in pools

        return AllocatedState(
            frozenset(d for d in self.devices if mine(d)),
            frozenset((d, s) for d, s in self.shared if mine(d)),
            {d: a for d, a in self.capacity.items() if mine(d)},
        )

    @staticmethod
    def from_claims(claims: Iterable[o.ResourceClaim]) -> AllocatedState:
        """In-use state from allocated claims, the way the scheduler gathers it."""
        return AllocatedState.from_results(claim.status.allocation if claim.status else None for claim in claims)

    @staticmethod
    def from_results(allocations: Iterable[o.AllocationResult | None]) -> AllocatedState:
        """In-use state from claims' allocations (None: a claim not allocated)."""
        devices: set[DeviceID] = set()
        shared: set[tuple[DeviceID, str]] = set()
        capacity: dict[DeviceID, dict[str, Quantity]] = {}
        for allocation in allocations:
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
        # By exact type first: a service rebuilds its inventory from every object on each change,
        # and a chain of isinstance checks per object was most of this function's time.
        lists: dict[type, list[Any]] = {o.DeviceClass: classes, o.ResourceSlice: slices, o.DeviceTaintRule: rules, o.Node: nodes, o.ResourceClaim: claims}
        for obj in objects:
            found = lists.get(type(obj))
            if found is not None:
                found.append(obj)
                continue
            for kind, into in lists.items():
                if isinstance(obj, kind):
                    into.append(obj)
                    break
        return cls(tuple(classes), tuple(slices), tuple(rules), tuple(nodes), tuple(claims))

    def allocated_state(self) -> AllocatedState:
        if not self.claims:
            return self.extra_allocated  # a node's reduced inventory (NodeIndex.node_inventory)
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
