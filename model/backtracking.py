"""The upstream allocator's first-fit backtracking search, ported faithfully.

API:
- ``allocate_backtracking(request, *, cel, clock=time.monotonic) -> AllocationOutcome``

What "faithful" means here (the experimental tier of k8s.io/dynamic-resource-allocation, which
with ListTypeAttributes off behaves exactly as the incubating tier):

- Pools come from ``model.pools.gather_pools`` (driver, pool order; binding-condition pools
  last; slices by name; devices in slice order). The pre-search checks and their error texts are
  ``model.matching.prepare_claims``.
- Depth-first over claim → request → (subrequest, tried in order) → device. Devices of one
  request are tried as combinations in pool order (each next device after the previous one);
  different requests and claims start from the first device again. The first complete
  solution wins. ``All`` requests take their precomputed device list or fail.
- Constraints are added when a device is tentatively allocated and removed on backtracking,
  with upstream v0.37.2's state handling: a distinctAttribute constraint compares a new value
  with every device already in it (also devices of the same request) and forgets the latest one
  on removal; a matchAttribute list intersection is kept as a stack, so removing a device
  widens it again. A device rejected after some of its state was taken (counters, constraints,
  in-use mark, capacity) gives all of it back, in reverse order. Shared counters are tracked
  per pool (driver and pool name). Older upstream releases differed in all four points (README
  "Where upstream deviates"); the deviations v0.37.2 still has (README 5-7) are reproduced.
- Exceeding 32 devices in a claim backtracks aggressively like upstream's
  ``errAllocationResultMaxSizeExceeded``.
- ``stats.steps`` counts invocations of the search step exactly like upstream's
  ``NumAllocateOneInvocations`` (tests compare them with upstream's pinned numbers).

Outcomes: ``allocated=True`` (status FOUND) with results in claim order; ``allocated=False``
(status EXHAUSTED) when the search space is exhausted; ``AllocationError`` for fatal input
problems. When no solution exists and some pool is invalid, upstream returns
"invalid resource pools were encountered" as an error that only fails this node; we raise
``NodeLocalError`` with that text. When the deadline (``request.time_limit`` seconds, measured
with ``clock``) passes, ``SolveTimeout`` is raised; its ``stats`` carry the steps so far
(status DEADLINE).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from dra_solver.model import objects as o
from dra_solver.model.allocation import (
    AllocatedState,
    AllocationOutcome,
    AllocationRequest,
    DeviceID,
    SolveStats,
)
from dra_solver.model.capacity import all_zero, capacity_fits, consumed_capacity, zero
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.errors import AllocationError, NodeLocalError, SolveTimeout
from dra_solver.model.features import FeatureGates
from dra_solver.model.matching import (
    ALLOCATION_RESULTS_MAX_SIZE,
    ClaimPlan,
    ConstraintSpec,
    Matcher,
    RequestView,
    claim_label,
    lookup_attribute,
    prepare_claims,
)
from dra_solver.model.pools import Pool, PoolDevice, gather_pools
from dra_solver.model.quantity import Quantity
from dra_solver.model.results import ChosenDevice, build_result
from dra_solver.model.score import first_available_score
from dra_solver.model.taints import taint_prevents_allocation

ALLOCATOR_NAME = "backtracking"


class _ResultLimit(Exception):
    """Upstream's errAllocationResultMaxSizeExceeded: a claim would get more than 32 devices."""


class _Deadline(Exception):
    pass


def allocate_backtracking(
    request: AllocationRequest,
    *,
    cel: CelEnvironment,
    clock: Callable[[], float] = time.monotonic,
) -> AllocationOutcome:
    """Allocate ``request.claims`` on ``request.node`` exactly as upstream's allocator would."""
    start = clock()
    inventory = request.inventory
    gates = request.gates
    allocated = inventory.allocated_state()
    pools = gather_pools(
        inventory.slices,
        request.node,
        gates=gates,
        taint_rules=inventory.taint_rules,
        parsed=request.device_cache,
    )
    matcher = Matcher(cel, gates=gates, node=request.node, memo=request.device_cache)
    plans = prepare_claims(
        request.claims,
        pools,
        inventory=inventory,
        gates=gates,
        matcher=matcher,
        allocated=allocated,
    )
    deadline = start + request.time_limit if request.time_limit is not None else None
    search = _Search(
        plans,
        pools,
        gates=gates,
        matcher=matcher,
        allocated=allocated,
        clock=clock,
        deadline=deadline,
    )

    def stats(status: str) -> SolveStats:
        return SolveStats(
            allocator=ALLOCATOR_NAME,
            status=status,
            wall_seconds=clock() - start,
            steps=search.steps,
        )

    try:
        with _recursion_room(plans):
            done = search.run()
    except _Deadline:
        raise SolveTimeout(
            f"backtracking allocator: time limit of {request.time_limit}s reached after {search.steps} search steps",
            stats=stats("DEADLINE"),
        ) from None

    if not done:
        if any(pool.invalid for pool in pools):
            raise NodeLocalError("invalid resource pools were encountered")
        return AllocationOutcome(
            allocated=False,
            results=(),
            score=0,
            stats=stats("EXHAUSTED"),
            reason="cannot allocate all claims",
        )

    results = [
        build_result(
            plan,
            [ChosenDevice(p.view, p.device, p.shared, p.consumed) for p in search.results[plan.index]],
            node_name=request.node.name,
            gates=gates,
            selected={r: s for (c, r), s in search.selected.items() if c == plan.index},
        )
        for plan in plans
    ]
    return AllocationOutcome(
        allocated=True,
        results=tuple(results),
        score=first_available_score(request.claims, results),
        stats=stats("FOUND"),
    )


class _recursion_room:
    """Make sure deep (but bounded) searches do not hit Python's recursion limit.

    The limit is only ever raised, never lowered again: lowering it while another thread is
    deep in its own search would break that search.
    """

    def __init__(self, plans: list[ClaimPlan]) -> None:
        depth = 50
        for plan in plans:
            depth += 2
            for req in plan.requests:
                depth += 3 + max((v.num_devices for v in req.options), default=0)
        self._needed = depth * 2 + 200

    def __enter__(self) -> None:
        if self._needed > sys.getrecursionlimit():
            sys.setrecursionlimit(self._needed)

    def __exit__(self, *exc: object) -> None:
        return None


# --- constraints ------------------------------------------------------------------------------

_AttrSet = tuple[str, frozenset[object]]


def _attribute_as_set(attr: o.DeviceAttribute) -> _AttrSet | None:
    """Upstream ``attributeAsSet``: non-empty lists first, then scalars; else unknown (None)."""
    if attr.ints:
        return ("int", frozenset(attr.ints))
    if attr.bools:
        return ("bool", frozenset(attr.bools))
    if attr.strings:
        return ("string", frozenset(attr.strings))
    if attr.versions:
        return ("version", frozenset(attr.versions))
    if attr.int_ is not None:
        return ("int", frozenset((attr.int_,)))
    if attr.bool_ is not None:
        return ("bool", frozenset((attr.bool_,)))
    if attr.string is not None:
        return ("string", frozenset((attr.string,)))
    if attr.version is not None:
        return ("version", frozenset((attr.version,)))
    return None


def _intersects(a: _AttrSet, b: _AttrSet) -> bool:
    return a[0] == b[0] and bool(a[1] & b[1])


def _scalar_kind(attr: o.DeviceAttribute) -> str:
    if attr.string is not None:
        return "string"
    if attr.int_ is not None:
        return "int"
    if attr.bool_ is not None:
        return "bool"
    if attr.version is not None:
        return "version"
    return ""


def _scalar(attr: o.DeviceAttribute, kind: str) -> object:
    return {"string": attr.string, "int": attr.int_, "bool": attr.bool_, "version": attr.version}[
        kind
    ]


class _MatchAttribute:
    """matchAttribute: every device of the constrained requests has the same value."""

    def __init__(self, spec: ConstraintSpec, *, list_types: bool) -> None:
        self.spec = spec
        self.list_types = list_types
        self.first: o.DeviceAttribute | None = None
        # With list-type attributes: the intersection after each added device, so that removing
        # the latest device restores the intersection the earlier ones had.
        self.intersections: list[_AttrSet] = []
        self.count = 0

    def add(self, base: str, sub: str, device: PoolDevice) -> bool:
        if not self.spec.applies_to(base, sub):
            return True
        attr = lookup_attribute(device, self.spec.attribute)
        if attr is None:
            return False
        if self.count == 0:
            if self.list_types:
                first = _attribute_as_set(attr)
                if first is None:
                    return False
                self.intersections.append(first)
            else:
                self.first = attr
            self.count = 1
            return True
        if self.list_types:
            new = _attribute_as_set(attr)
            current = self.intersections[self.count - 1]
            if new is None or not _intersects(current, new):
                return False
            self.intersections.append((new[0], current[1] & new[1]))
        else:
            kind = _scalar_kind(attr)
            if not kind or self.first is None:
                return False
            mine = _scalar(self.first, kind)
            if mine is None or mine != _scalar(attr, kind):
                return False
        self.count += 1
        return True

    def remove(self, base: str, sub: str, device: PoolDevice) -> None:
        if not self.spec.applies_to(base, sub):
            return
        self.count -= 1
        if self.list_types:
            del self.intersections[self.count :]


class _DistinctAttribute:
    """distinctAttribute: devices of the constrained requests have pairwise different values.

    Every added device's value is kept (devices are removed in reverse order of adding), and a
    new value is compared with all of them, including those of the same request.
    """

    def __init__(self, spec: ConstraintSpec, *, list_types: bool) -> None:
        self.spec = spec
        self.list_types = list_types
        self.values: list[o.DeviceAttribute] = []

    def add(self, base: str, sub: str, device: PoolDevice) -> bool:
        if not self.spec.applies_to(base, sub):
            return True
        attr = lookup_attribute(device, self.spec.attribute)
        if attr is None or not self._distinct(attr):
            return False
        self.values.append(attr)
        return True

    def _distinct(self, attr: o.DeviceAttribute) -> bool:
        if self.list_types:
            new = _attribute_as_set(attr)
            if new is None:
                return False
            for existing in self.values:
                have = _attribute_as_set(existing)
                if have is not None and _intersects(new, have):
                    return False
            return True
        kind = _scalar_kind(attr)
        for existing in self.values:
            if not kind:
                # Upstream cannot compare a value without a scalar; it refuses once there is
                # something to compare with.
                return False
            mine = _scalar(existing, kind)
            if mine is not None and mine == _scalar(attr, kind):
                return False
        return True

    def remove(self, base: str, sub: str, device: PoolDevice) -> None:
        if not self.spec.applies_to(base, sub):
            return
        self.values.pop()


_Constraint = _MatchAttribute | _DistinctAttribute


# --- the search ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pick:
    view: RequestView
    device: PoolDevice
    shared: bool
    consumed: dict[str, Quantity] | None


_Counters = dict[str, dict[str, Quantity]]


class _Search:
    """Per-attempt scratch state of the search (upstream's ``allocator`` struct).

    Devices are addressed by their position ("slot") in the search order so that the hot path
    works on lists and small ints instead of hashing device IDs.
    """

    def __init__(
        self,
        plans: list[ClaimPlan],
        pools: list[Pool],
        *,
        gates: FeatureGates,
        matcher: Matcher,
        allocated: AllocatedState,
        clock: Callable[[], float],
        deadline: float | None,
    ) -> None:
        self.plans = plans
        self.gates = gates
        self.matcher = matcher
        self.allocated = allocated
        self.clock = clock
        self.deadline = deadline
        self.steps = 0
        self.candidates: list[PoolDevice] = []
        self.pool_of: list[Pool] = []
        for pool in pools:
            if not pool.usable:
                continue
            for device in pool.devices:
                self.candidates.append(device)
                self.pool_of.append(pool)
        self.slot_of = {id(device): slot for slot, device in enumerate(self.candidates)}
        self.committed = [device.id in allocated.devices for device in self.candidates]
        self.committed_capacity = [allocated.capacity.get(device.id) for device in self.candidates]
        self.allocating: list[set[int]] = [set() for _ in self.candidates]
        self.allocating_capacity: dict[int, dict[str, Quantity]] = {}
        self.selectable_cache: dict[int, list[int]] = {}
        self.constraints: list[list[_Constraint]] = [
            [
                _MatchAttribute(spec, list_types=gates.list_type_attributes)
                if spec.kind == "match"
                else _DistinctAttribute(spec, list_types=gates.list_type_attributes)
                for spec in plan.constraints
            ]
            for plan in plans
        ]
        self.results: list[list[_Pick]] = [[] for _ in plans]
        self.selected: dict[tuple[int, int], int] = {}
        self.available_counters: dict[str, _Counters] = {}
        self.consumed_counters: dict[str, _Counters] = {}
        self.shared_ids = {dev for dev, _ in allocated.shared}

    def run(self) -> bool:
        return self.allocate_one(0, 0, 0, 0, False, 0)

    # The step: one device for one (sub)request, or moving on to the next request/claim.
    def allocate_one(self, c: int, r: int, s: int, d: int, in_sub: bool, start: int) -> bool:
        self.steps += 1
        if self.deadline is not None and self.clock() > self.deadline:
            raise _Deadline
        if c >= len(self.plans):
            return True
        plan = self.plans[c]
        if r >= len(plan.requests):
            try:
                return self.allocate_one(c + 1, 0, 0, 0, False, 0)
            except _ResultLimit:
                # Another choice in earlier claims may let a later subrequest need fewer devices.
                return False
        request = plan.requests[r]
        if not in_sub and request.first_available:
            all_exceeded = True
            for index in range(len(request.options)):
                try:
                    ok = self.allocate_one(c, r, index, d, True, 0)
                except _ResultLimit:
                    continue
                all_exceeded = False
                if ok:
                    self.selected[(c, r)] = index
                    return True
            if all_exceeded:
                raise _ResultLimit
            return False

        view = request.options[s]
        if view.is_all and not view.all_devices:
            return False
        if d >= view.num_devices:
            return self.allocate_one(c, r + 1, 0, 0, False, 0)
        if len(self.results[c]) + view.num_devices - d > ALLOCATION_RESULTS_MAX_SIZE:
            raise _ResultLimit

        if view.is_all:
            assert view.all_devices is not None
            slot = self.slot_of[id(view.all_devices[d])]
            undo = self.allocate_device(c, view, slot, must=True)
            if undo is None:
                return False
            try:
                done = self.allocate_one(c, r, s, d + 1, in_sub, 0)
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done

        admin = view.admin_access
        capacity = self.gates.consumable_capacity
        allocating = self.allocating
        committed = self.committed
        cache = self.selectable_cache.get(id(view))
        if cache is None:
            cache = self.selectable_cache[id(view)] = [-1] * len(self.candidates)
        for slot in range(start, len(self.candidates)):
            if admin:
                if c in allocating[slot]:
                    continue
            elif committed[slot] or allocating[slot]:
                continue
            known = cache[slot]
            if known < 0:
                known = cache[slot] = int(self.matcher.selectable(view, self.candidates[slot]))
            if not known:
                continue
            if capacity and not self.capacity_ok(view, slot):
                continue
            undo = self.allocate_device(c, view, slot, must=False)
            if undo is None:
                continue
            try:
                done = self.allocate_one(c, r, s, d + 1, in_sub, slot + 1)
            except BaseException:
                undo()
                raise
            if done:
                return True
            undo()
        return False

    def in_use(self, slot: int) -> bool:
        return self.committed[slot] or bool(self.allocating[slot])

    def capacity_in_use(self, slot: int) -> bool:
        return self.committed_capacity[slot] is not None or slot in self.allocating_capacity

    def capacity_ok(self, view: RequestView, slot: int) -> bool:
        device = self.candidates[slot]
        if not device.capacity and not view.capacity_requests:
            return True
        return capacity_fits(
            view.capacity_requests,
            device.capacity,
            allocated=self.committed_capacity[slot],
            allocating=self.allocating_capacity.get(slot),
        )

    def allocate_device(
        self, c: int, view: RequestView, slot: int, *, must: bool
    ) -> Callable[[], None] | None:
        """Tentatively allocate; returns the undo function, or None if the device cannot be used.

        Like upstream v0.37.2, whatever a rejected device already took (counters, constraint
        entries, the in-use mark, capacity) is given back before it is refused.
        """
        gates = self.gates
        device = self.candidates[slot]
        multi = gates.consumable_capacity and device.allow_multiple_allocations
        admin = view.admin_access
        holders = self.allocating[slot]
        if not multi and admin and c in holders:
            return None
        if not admin and self.in_use(slot):
            return None
        if not gates.partitionable_devices and device.counters:
            return None
        base, sub = view.base_name, view.sub_name
        constraints = self.constraints[c]
        results = self.results[c]
        previous = len(results)
        # What this call has taken so far, undone in reverse order by ``rollback``.
        counters_taken = False
        constraints_added = 0
        marked = False
        consumed: dict[str, Quantity] = {}
        capacity_inserted = False
        capacity_entry_existed = False

        def rollback() -> None:
            del results[previous:]
            if capacity_inserted:
                self.release_capacity(slot, consumed, keep_entry=capacity_entry_existed)
            if marked:
                holders.discard(c)
            for constraint in reversed(constraints[:constraints_added]):
                constraint.remove(base, sub, device)
            if counters_taken:
                self.give_back_counters(slot)

        skip_counters = multi and self.capacity_in_use(slot)
        if not skip_counters and device.counters:
            if not self.take_counters(slot):
                return None
            counters_taken = True
        if gates.device_taints and taint_prevents_allocation(device.taints, view.tolerations):
            rollback()
            return None
        for constraint in constraints:
            if not constraint.add(base, sub, device):
                rollback()
                if must:
                    raise AllocationError(
                        f"claim {claim_label(self.plans[c].claim)}, request {view.name}: cannot add device "
                        f"{device.id} because a claim constraint would not be satisfied"
                    )
                return None
            constraints_added += 1

        if not multi:
            holders.add(c)
            marked = True
        if gates.consumable_capacity:
            if not self.capacity_ok(view, slot):
                # Cannot happen after the caller's check except for "All" devices listed before
                # other allocations used capacity.
                rollback()
                return None
            if multi:
                consumed = consumed_capacity(view.capacity_requests, device.capacity)
                mine = self.allocating_capacity.get(slot)
                capacity_entry_existed = mine is not None
                if mine is None:
                    self.allocating_capacity[slot] = dict(consumed)
                else:
                    for name, amount in consumed.items():
                        mine[name] = mine[name].add(amount) if name in mine else amount
                capacity_inserted = True
        results.append(_Pick(view, device, multi, consumed or None))
        return rollback

    def release_capacity(self, slot: int, consumed: dict[str, Quantity], *, keep_entry: bool) -> None:
        """Take one share's capacity off the device. An entry that becomes empty is dropped,
        unless an earlier share created it: it also marks the device as shared already."""
        mine = self.allocating_capacity.get(slot)
        if mine is not None:
            for name, amount in consumed.items():
                if name in mine:
                    mine[name] = mine[name].sub(amount)
            if all_zero(mine):
                del self.allocating_capacity[slot]
        if keep_entry and slot not in self.allocating_capacity:
            self.allocating_capacity[slot] = {}

    # --- shared counters ---------------------------------------------------------------------

    def _is_allocated(self, device: DeviceID) -> bool:
        return (
            device in self.allocated.devices
            or device in self.shared_ids
            or device in self.allocated.capacity
        )

    def _available(self, pool: Pool) -> _Counters:
        available = self.available_counters.get(pool.id)
        if available is not None:
            return available
        available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for device in (*pool.devices, *pool.other_devices):
            if not self._is_allocated(device.id):
                continue
            for consumption in device.counters:
                counter_set = available.get(consumption.counter_set)
                if counter_set is None:
                    continue
                for name, amount in consumption.counters.items():
                    if name in counter_set:
                        counter_set[name] = counter_set[name].sub(amount)
        self.available_counters[pool.id] = available
        return available

    def take_counters(self, slot: int) -> bool:
        device = self.candidates[slot]
        pool = self.pool_of[slot]
        available = self._available(pool)
        consumed = self.consumed_counters.setdefault(pool.id, {})
        for consumption in device.counters:
            counter_set = consumed.setdefault(consumption.counter_set, {})
            for name, amount in consumption.counters.items():
                counter_set[name] = counter_set[name].add(amount) if name in counter_set else amount
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for name, amount in counters.items():
                if amount.cmp(used.get(name, zero())) < 0:
                    self.give_back_counters(slot)
                    return False
        return True

    def give_back_counters(self, slot: int) -> None:
        device = self.candidates[slot]
        pool = self.pool_of[slot]
        consumed = self.consumed_counters.setdefault(pool.id, {})
        for consumption in device.counters:
            counter_set = consumed.setdefault(consumption.counter_set, {})
            for name, amount in consumption.counters.items():
                counter_set[name] = counter_set.get(name, zero()).sub(amount)
