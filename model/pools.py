"""Resource pools as one node sees them: which devices an allocation on that node may use.

API:
- ``gather_pools(slices, node, *, gates, taint_rules=()) -> list[Pool]``: upstream's
  ``GatherPools`` (experimental tier). Pools sorted by driver then pool name, pools that have
  devices with binding conditions last; inside a pool, slices by name and devices in slice
  order. Raises ``AllocationError`` ("gather pool information: ...") for a node selector that
  cannot be parsed.
- ``Pool``: one pool; ``incomplete`` (fewer slices than ``resourceSliceCount``) or
  ``invalid_reason`` (duplicate device names, duplicate counter sets, unknown counter
  set/counter) are recorded, not raised. ``devices`` are those of slices that target the node
  (in search order); ``other_devices`` those of the pool's other slices (they only matter for
  counters they consume while allocated); ``counter_sets`` the pool's shared counters.
- ``PoolDevice``: one device with everything the allocators read, parsed once: its
  ``DeviceID``, the API ``device`` and its ``slice``, ``capacity`` (``CapacitySpec`` per name),
  ``counters`` (consumed counters per counter set), a prebuilt ``cel`` view (``CelDevice``) or
  ``cel_error`` when an attribute cannot be represented, effective ``taints`` (slice +
  DeviceTaintRules), ``node_match`` (per-device node selection against this node).
- ``DeviceParseCache``: what parsing a device yields independently of node, request and
  taint rules (capacities, counter consumption, the CEL view), kept by a caller that allocates
  again and again on the same Device objects (the service) and passed as ``parsed=``; also
  the pools gathered per identity of their inputs (``gathered``), selector verdicts per device
  view (``selector_id``, ``selection``, for ``model.matching.Matcher``) and device sizes by
  counters (``counter_sizes``, for ``model.cpsat.amounts.device_sizes``) and exact counter
  amounts (``counter_terms``, for ``model.cpsat.single``). Every entry holds
  the objects its key names by identity.
- ``node_matches(node, *, node_name, all_nodes, selector) -> bool`` and
  ``node_selector_matches(selector, node) -> bool``: upstream ``NodeMatches`` and the
  component-helpers node affinity semantics (matchExpressions and matchFields
  ``metadata.name``). Raise ``NodeSelectorError`` when a selector cannot be parsed.

Why: every allocator and the validator must start from exactly the device set upstream
considers, with upstream's handling of stale generations and broken pools; doing it once here
keeps them in agreement.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.capacity import CapacitySpec
from dra_solver.model.cel import CelDevice
from dra_solver.model.cluster import DeviceID
from dra_solver.model.errors import AllocationError, quote
from dra_solver.model.features import FeatureGates
from dra_solver.model.quantity import Quantity, parse_quantity
from dra_solver.model.semver import parse_semver
from dra_solver.model.taints import effective_taints


class NodeSelectorError(ValueError):
    """A node selector that the scheduler's node affinity code would refuse to parse."""


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """Counters one device consumes from one counter set of its pool."""

    counter_set: str
    counters: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True, eq=False)
class PoolDevice:
    """One device of a pool, parsed once for the whole allocation attempt.

    Identity (``eq=False``): two entries are the same device only if they are the same object;
    use ``id`` to compare across pools gathered separately.
    """

    id: DeviceID
    device: o.Device
    slice: o.ResourceSlice
    capacity: Mapping[str, CapacitySpec]
    counters: tuple[CounterConsumption, ...]
    taints: tuple[o.DeviceTaint, ...]
    node_match: bool = True
    """False when the slice uses perDeviceNodeSelection and this device is not for the node."""
    cel: CelDevice | None = None
    cel_error: str = ""
    """Why the device cannot be shown to CEL (``attribute x: unsupported attribute value``)."""
    node_error: str = ""
    """Why this device's own node selector (perDeviceNodeSelection) cannot be parsed."""

    @property
    def name(self) -> str:
        return self.id.device

    @property
    def slice_name(self) -> str:
        return self.slice.name

    @property
    def allow_multiple_allocations(self) -> bool:
        return bool(self.device.allow_multiple_allocations)

    @property
    def binding_conditions(self) -> tuple[str, ...]:
        return tuple(self.device.binding_conditions or ())

    @property
    def binding_failure_conditions(self) -> tuple[str, ...]:
        return tuple(self.device.binding_failure_conditions or ())

    @property
    def binds_to_node(self) -> bool:
        return bool(self.device.binds_to_node)

    @property
    def per_device_node_selection(self) -> bool:
        return bool(self.slice.spec.per_device_node_selection)

    @property
    def node_name(self) -> str:
        """The node the device is local to ("" when it is not node-local)."""
        if self.per_device_node_selection:
            return self.device.node_name or ""
        return self.slice.spec.node_name or ""

    @property
    def node_selector(self) -> o.NodeSelector | None:
        if self.per_device_node_selection:
            return self.device.node_selector
        return self.slice.spec.node_selector

    @property
    def capacity_values(self) -> dict[str, Quantity]:
        return {name: spec.value for name, spec in self.capacity.items()}


@dataclass(frozen=True, slots=True, eq=False)
class Pool:
    """One resource pool (driver + pool name) as seen from one node."""

    driver: str
    name: str
    generation: int = 0
    incomplete: bool = False
    invalid_reason: str = ""
    devices: tuple[PoolDevice, ...] = ()
    other_devices: tuple[PoolDevice, ...] = ()
    counter_sets: Mapping[str, Mapping[str, Quantity]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def invalid(self) -> bool:
        return bool(self.invalid_reason)

    @property
    def usable(self) -> bool:
        return not self.incomplete and not self.invalid

    @property
    def has_binding_conditions(self) -> bool:
        return any(d.device.binding_conditions is not None for d in self.devices)


# --- node selection ---------------------------------------------------------------------------


def node_matches(
    node: o.Node | None,
    *,
    node_name: str | None,
    all_nodes: bool | None,
    selector: o.NodeSelector | None,
) -> bool:
    """Upstream ``NodeMatches``: nodeName, then allNodes, then the node selector."""
    if node_name:
        return node is not None and node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return node_selector_matches(selector, node)
    return False


def node_selector_matches(selector: o.NodeSelector, node: o.Node | None) -> bool:
    """Whether ``node`` satisfies ``selector`` (terms ORed, requirements ANDed).

    Every term is parsed first, as the scheduler's ``NewNodeSelector`` does, so a broken term
    is an error even if another term would match. A term without requirements matches nothing;
    ``matchFields`` only knows ``metadata.name`` and is ignored for a node without a name.
    """
    terms = [t for t in selector.node_selector_terms if t.match_expressions or t.match_fields]
    errors: list[str] = []
    for i, term in enumerate(selector.node_selector_terms):
        for j, req in enumerate(term.match_expressions or []):
            errors.extend(
                _label_requirement_errors(req, f"nodeSelectorTerms[{i}].matchExpressions[{j}]")
            )
        for j, req in enumerate(term.match_fields or []):
            errors.extend(
                _field_requirement_errors(req, f"nodeSelectorTerms[{i}].matchFields[{j}]")
            )
    if errors:
        raise NodeSelectorError("; ".join(errors))
    if node is None:
        return False
    labels = node.metadata.labels or {}
    for term in terms:
        if not all(_label_matches(req, labels) for req in term.match_expressions or []):
            continue
        if node.name and not all(_field_matches(req, node.name) for req in term.match_fields or []):
            continue
        return True
    return False


def _label_requirement_errors(req: o.NodeSelectorRequirement, path: str) -> list[str]:
    values = req.values or []
    op = req.operator
    if op in ("In", "NotIn"):
        if not values:
            return [
                f"{path}.values: Required value: for 'in', 'notin' operators, values set can't be empty"
            ]
    elif op in ("Exists", "DoesNotExist"):
        if values:
            return [
                f"{path}.values: Forbidden: values set must be empty for exists and does not exist"
            ]
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            return [
                f"{path}.values: Required value: for 'Gt', 'Lt' operators, exactly one value is required"
            ]
        if _parse_int64(values[0]) is None:
            return [
                f"{path}.values[0]: Invalid value: {json.dumps(values[0])}: for 'Gt', 'Lt' operators, the value must be an integer"
            ]
    else:
        return [f"{path}.operator: Invalid value: {json.dumps(op)}: not a valid selector operator"]
    return []


def _field_requirement_errors(req: o.NodeSelectorRequirement, path: str) -> list[str]:
    if req.key != "metadata.name":
        return [f"{path}.key: Invalid value: {json.dumps(req.key)}: not a valid field selector key"]
    if req.operator not in ("In", "NotIn"):
        return [
            f'{path}.operator: Unsupported value: {quote(req.operator)}: supported values: "In", "NotIn"'
        ]
    if len(req.values or []) != 1:
        return [f"{path}.values: Required value: must have one element"]
    return []


def _parse_int64(text: str) -> int | None:
    stripped = text[1:] if text[:1] in "+-" else text
    if not stripped.isdigit() or not stripped.isascii():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _label_matches(req: o.NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    values = req.values or []
    present = req.key in labels
    value = labels.get(req.key, "")
    match req.operator:
        case "In":
            return present and value in values
        case "NotIn":
            return not present or value not in values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt":
            if not present:
                return False
            have = _parse_int64(value)
            want = _parse_int64(values[0])
            if have is None or want is None:
                return False
            return have > want if req.operator == "Gt" else have < want
    return False


def _field_matches(req: o.NodeSelectorRequirement, node_name: str) -> bool:
    wanted = (req.values or [""])[0]
    return (node_name == wanted) if req.operator == "In" else (node_name != wanted)


def _describe_selector(selector: o.NodeSelector) -> str:
    return json.dumps(selector.to_api(), sort_keys=True, separators=(",", ":"))


# --- gathering --------------------------------------------------------------------------------


class DeviceParseCache:
    """Parsed device parts by device object identity. An entry holds its device, so the
    identity cannot be reused by another object while the entry lives. Bounded: beyond
    ``max_entries`` the least recently used entry goes (inline inventories of callers bring
    new Device objects on every call; the service's own stay in use and stay cached)."""

    def __init__(self, max_entries: int = 100_000, max_gathered: int = 1024) -> None:
        self._entries: OrderedDict[tuple[int, str], _ParsedDevice] = OrderedDict()
        self._max = max(1, max_entries)
        self._lock = threading.Lock()
        self._gathered: OrderedDict[tuple[int, int, int, FeatureGates], tuple[object, object, object, tuple[Pool, ...]]] = OrderedDict()
        self._max_gathered = max(0, max_gathered)
        self._selections: dict[tuple[int, int], tuple[CelDevice, bool]] = {}
        self.counter_sizes: dict[tuple[Pool, PoolDevice], int] = {}
        """Per (pool, device), both held (identity keys), the device's share of the counter sets
        it draws on (``model.cpsat.amounts.device_sizes``): pools are kept by ``gathered``."""
        self.counter_terms: dict[PoolDevice, tuple[tuple[tuple[str, str], Any], ...]] = {}
        """Per device object (held), its exact counter amounts by (counter set, counter)
        (``model.cpsat.single``)."""
        self.pool_counters: dict[Pool, tuple[dict[tuple[str, str], Any], dict[DeviceID, list[PoolDevice]]]] = {}
        """Per pool object (held), its exact counters and its devices by ID
        (``model.cpsat.single``)."""
        self.whole_capacity_fits: dict[PoolDevice, bool] = {}
        """Per device object (held), whether a request that names no capacity fits it while
        none of it is consumed (``model.cpsat.problem``)."""
        self.candidate_lists: dict[tuple[Any, ...], tuple[tuple[Pool, ...], tuple[Any, ...], Mapping[DeviceID, Any]]] = {}
        """Per (ConsumableCapacity gate, pool identities), the pools (held), their candidates
        in search order and by ID (``model.cpsat.problem``)."""
        self._selector_ids: dict[tuple[Any, ...], int] = {}
        self._next_selector_id = itertools.count()

    def selector_id(self, key: tuple[Any, ...]) -> int:
        """A number for ``key`` (the gates and the selectors of a request, ``model.matching``):
        the same while this cache lives, never reused for another key."""
        found = self._selector_ids.get(key)
        if found is None:
            with self._lock:
                if len(self._selector_ids) >= self._max:
                    self._selector_ids.clear()  # their numbers are never handed out again
                found = self._selector_ids.setdefault(key, next(self._next_selector_id))
        return found

    def selection(self, selectors: int, cel: CelDevice) -> bool | None:
        """Whether the selectors numbered ``selectors`` (``selector_id``) matched a device's
        CEL view before (``cel`` is held by the entry, so its identity is not reused); None
        when not known."""
        hit = self._selections.get((selectors, id(cel)))
        return hit[1] if hit is not None and hit[0] is cel else None

    def remember_selection(self, selectors: int, cel: CelDevice, matched: bool) -> None:
        if len(self._selections) >= self._max:
            self._selections.clear()  # selectors callers made up; the service's own refill it
        self._selections[(selectors, id(cel))] = (cel, matched)

    def gathered(
        self,
        slices: tuple[o.ResourceSlice, ...],
        node: o.Node,
        gates: FeatureGates,
        taint_rules: tuple[o.DeviceTaintRule, ...],
        gather: Callable[[], list[Pool]],
    ) -> list[Pool]:
        """``gather()``'s pools, kept by the identity of what they are gathered from (a caller
        passes the same tuples and node object for one node of one snapshot) and the gates:
        pools are frozen and depend on nothing else. Entries hold those objects, so an
        identity is never reused while its entry lives; least recently used out first."""
        key = (id(slices), id(node), id(taint_rules), gates)
        with self._lock:
            hit = self._gathered.get(key)
            if hit is not None and hit[0] is slices and hit[1] is node and hit[2] is taint_rules:
                self._gathered.move_to_end(key)
                return list(hit[3])
        pools = gather()
        if self._max_gathered:
            with self._lock:
                self._gathered[key] = (slices, node, taint_rules, tuple(pools))
                while len(self._gathered) > self._max_gathered:
                    self._gathered.popitem(last=False)
        return pools

    def parsed(self, driver: str, device: o.Device) -> _ParsedDevice:
        key = (id(device), driver)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.device is device:
                self._entries.move_to_end(key)
                return entry
        entry = _parse_device(driver, device, with_cel=True)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return entry

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class _ParsedDevice:
    device: o.Device
    capacity: Mapping[str, CapacitySpec]
    counters: tuple[CounterConsumption, ...]
    cel: CelDevice | None
    cel_error: str


def _parse_device(driver: str, device: o.Device, *, with_cel: bool) -> _ParsedDevice:
    capacity = {name: CapacitySpec.from_api(c) for name, c in (device.capacity or {}).items()}
    counters = tuple(
        CounterConsumption(c.counter_set, {n: parse_quantity(v.value) for n, v in c.counters.items()})
        for c in device.consumes_counters or []
    )
    cel, cel_error = cel_device(driver, device, capacity) if with_cel else (None, "")
    return _ParsedDevice(device, capacity, counters, cel, cel_error)


def gather_pools(
    slices: Sequence[o.ResourceSlice],
    node: o.Node,
    *,
    gates: FeatureGates,
    taint_rules: Sequence[o.DeviceTaintRule] = (),
    parsed: DeviceParseCache | None = None,
) -> list[Pool]:
    """All pools with devices reachable from ``node``, in the order the search visits them.

    ``slices`` is every ResourceSlice of the cluster, in lister order (the order only decides
    which of two equally new slice sets upstream looks at first; results are sorted). With
    ``parsed``, tuples of slices and taint rules are gathered once per identity
    (``DeviceParseCache.gathered``).
    """
    if parsed is not None and isinstance(slices, tuple) and isinstance(taint_rules, tuple):
        return parsed.gathered(
            slices, node, gates, taint_rules, partial(_gather_pools, slices, node, gates=gates, taint_rules=taint_rules, parsed=parsed)
        )
    return _gather_pools(slices, node, gates=gates, taint_rules=taint_rules, parsed=parsed)


def _gather_pools(
    slices: Sequence[o.ResourceSlice],
    node: o.Node,
    *,
    gates: FeatureGates,
    taint_rules: Sequence[o.DeviceTaintRule],
    parsed: DeviceParseCache | None,
) -> list[Pool]:
    # Upstream considers the node's own slices first, then those without a node name.
    for_node = [s for s in slices if s.spec.node_name and s.spec.node_name == node.name]
    for_node += [s for s in slices if not s.spec.node_name]

    grouped: dict[tuple[str, str], list[o.ResourceSlice]] = {}
    for slice_ in for_node:
        spec = slice_.spec
        if not gates.partitionable_devices and (
            spec.per_device_node_selection is not None or spec.shared_counters
        ):
            continue
        if spec.node_name or spec.all_nodes or spec.node_selector is not None:
            try:
                relevant = node_matches(
                    node,
                    node_name=spec.node_name,
                    all_nodes=spec.all_nodes,
                    selector=spec.node_selector,
                )
            except NodeSelectorError as err:
                raise AllocationError(
                    f"gather pool information: failed to perform node selection for slice {slice_.name}: "
                    f"failed to parse node selector {_describe_selector(spec.node_selector or o.NodeSelector())}: {err}"
                ) from err
        elif spec.per_device_node_selection:
            relevant = False
            for device in spec.devices or []:
                try:
                    matched = node_matches(
                        node,
                        node_name=device.node_name,
                        all_nodes=device.all_nodes,
                        selector=device.node_selector,
                    )
                except NodeSelectorError as err:
                    raise AllocationError(
                        f"gather pool information: failed to perform node selection for device {device.name} "
                        f"in slice {slice_.name}: failed to parse node selector "
                        f"{_describe_selector(device.node_selector or o.NodeSelector())}: {err}"
                    ) from err
                if matched:
                    relevant = True
                    break
        else:
            # Some node selection field we do not know: upstream skips such slices.
            continue
        if relevant:
            _add_slice(grouped, slice_)

    plain: list[Pool] = []
    with_binding: list[Pool] = []
    for (driver, pool_name), pool_slices in grouped.items():
        generation = pool_slices[0].spec.pool.generation
        wanted = pool_slices[0].spec.pool.resource_slice_count
        all_for_pool: list[o.ResourceSlice] | None = None
        if len(pool_slices) != wanted:
            # Slices skipped above because they do not target this node may complete the pool.
            obsolete, all_for_pool = _slices_in_pool(slices, driver, pool_name, generation)
            if obsolete:
                continue
            if len(all_for_pool) != wanted:
                plain.append(
                    Pool(driver=driver, name=pool_name, generation=generation, incomplete=True)
                )
                continue
        pool = _build_pool(
            driver,
            pool_name,
            generation,
            pool_slices,
            all_for_pool,
            node=node,
            gates=gates,
            taint_rules=taint_rules,
            parsed=parsed,
        )
        (with_binding if pool.has_binding_conditions else plain).append(pool)

    plain.sort(key=lambda p: (p.driver, p.name))
    with_binding.sort(key=lambda p: (p.driver, p.name))
    return plain + with_binding


def _add_slice(
    grouped: dict[tuple[str, str], list[o.ResourceSlice]], slice_: o.ResourceSlice
) -> None:
    key = (slice_.spec.driver, slice_.spec.pool.name)
    have = grouped.get(key)
    if have is None:
        grouped[key] = [slice_]
        return
    generation = slice_.spec.pool.generation
    if generation < have[0].spec.pool.generation:
        return
    if generation > have[0].spec.pool.generation:
        grouped[key] = [slice_]
        return
    have.append(slice_)


def _slices_in_pool(
    slices: Sequence[o.ResourceSlice], driver: str, pool: str, generation: int
) -> tuple[bool, list[o.ResourceSlice]]:
    """(obsolete, all slices of that generation): a newer generation makes ours obsolete."""
    same: list[o.ResourceSlice] = []
    for slice_ in slices:
        if slice_.spec.driver != driver or slice_.spec.pool.name != pool:
            continue
        if slice_.spec.pool.generation == generation:
            same.append(slice_)
        elif slice_.spec.pool.generation > generation:
            return True, []
    return False, same


def _build_pool(
    driver: str,
    pool_name: str,
    generation: int,
    pool_slices: list[o.ResourceSlice],
    all_for_pool: list[o.ResourceSlice] | None,
    *,
    node: o.Node,
    gates: FeatureGates,
    taint_rules: Sequence[o.DeviceTaintRule],
    parsed: DeviceParseCache | None = None,
) -> Pool:
    targeting = sorted(pool_slices, key=lambda s: s.name)
    device_slices: list[o.ResourceSlice] = []
    counter_slices: list[o.ResourceSlice] = []
    elsewhere: list[o.ResourceSlice] = []
    for slice_ in targeting:
        if gates.partitionable_devices and slice_.spec.shared_counters:
            counter_slices.append(slice_)
        else:
            device_slices.append(slice_)
    if all_for_pool is not None and len(pool_slices) < len(all_for_pool):
        seen = {s.name for s in targeting}
        for slice_ in all_for_pool:
            if slice_.name in seen:
                continue
            if gates.partitionable_devices and slice_.spec.shared_counters:
                counter_slices.append(slice_)
            else:
                elsewhere.append(slice_)

    def invalid(reason: str) -> Pool:
        return Pool(driver=driver, name=pool_name, generation=generation, invalid_reason=reason)

    names: set[str] = set()
    for slice_ in device_slices:
        for device in slice_.spec.devices or []:
            if device.name in names:
                return invalid(f"duplicate device name {device.name}")
            names.add(device.name)

    counter_sets: dict[str, dict[str, Quantity]] = {}
    if gates.partitionable_devices:
        for slice_ in counter_slices:
            for counter_set in slice_.spec.shared_counters or []:
                if counter_set.name in counter_sets:
                    return invalid(f"duplicate counter set name {counter_set.name}")
                counter_sets[counter_set.name] = {
                    name: parse_quantity(c.value) for name, c in counter_set.counters.items()
                }
        for group in (device_slices, elsewhere):
            reason = _unknown_counters(group, counter_sets)
            if reason:
                return invalid(reason)

    devices = tuple(
        _pool_device(slice_, device, node=node, gates=gates, taint_rules=taint_rules, parsed=parsed)
        for slice_ in device_slices
        for device in slice_.spec.devices or []
    )
    other = tuple(
        _pool_device(slice_, device, node=node, gates=gates, taint_rules=(), with_cel=False, parsed=parsed)
        for slice_ in elsewhere
        for device in slice_.spec.devices or []
    )
    return Pool(
        driver=driver,
        name=pool_name,
        generation=generation,
        devices=devices,
        other_devices=other,
        counter_sets=counter_sets,
    )


def _unknown_counters(
    slices: list[o.ResourceSlice], counter_sets: Mapping[str, Mapping[str, Quantity]]
) -> str:
    for slice_ in slices:
        for device in slice_.spec.devices or []:
            for consumption in device.consumes_counters or []:
                counter_set = counter_sets.get(consumption.counter_set)
                if counter_set is None:
                    return f"counter set {consumption.counter_set} not found"
                for name in consumption.counters:
                    if name not in counter_set:
                        return f"counter {name} not found in counter set {consumption.counter_set}"
    return ""


def _pool_device(
    slice_: o.ResourceSlice,
    device: o.Device,
    *,
    node: o.Node,
    gates: FeatureGates,
    taint_rules: Sequence[o.DeviceTaintRule],
    with_cel: bool = True,
    parsed: DeviceParseCache | None = None,
) -> PoolDevice:
    driver = slice_.spec.driver
    node_match = True
    node_error = ""
    if slice_.spec.per_device_node_selection:
        try:
            node_match = node_matches(
                node,
                node_name=device.node_name,
                all_nodes=device.all_nodes,
                selector=device.node_selector,
            )
        except NodeSelectorError as err:
            # Upstream reports this only when a request considers the device.
            node_match = False
            node_error = f"failed to parse node selector {_describe_selector(device.node_selector or o.NodeSelector())}: {err}"
    parts = parsed.parsed(driver, device) if parsed is not None else _parse_device(driver, device, with_cel=with_cel)
    capacity, counters = parts.capacity, parts.counters
    cel, cel_error = (parts.cel, parts.cel_error) if with_cel else (None, "")
    return PoolDevice(
        id=DeviceID(driver, slice_.spec.pool.name, device.name),
        device=device,
        slice=slice_,
        capacity=capacity,
        counters=counters,
        taints=effective_taints(slice_, device, taint_rules, gates=gates),
        node_match=node_match,
        cel=cel,
        cel_error=cel_error,
        node_error=node_error,
    )


def cel_device(
    driver: str, device: o.Device, capacity: Mapping[str, CapacitySpec]
) -> tuple[CelDevice | None, str]:
    """The CEL view of a device, or the reason upstream's CEL input conversion fails.

    Attribute values follow upstream's precedence: list values (even empty) before scalars; an
    attribute without any value, or a version that is not semver, makes every selector
    evaluation on the device fail with a runtime error (reported by ``model.matching``).
    """
    attributes: dict[str, Any] = {}
    for name in sorted(device.attributes or {}):
        value, error = attribute_value((device.attributes or {})[name])
        if error:
            return None, f"attribute {name}: {error}"
        attributes[name] = value
    return (
        CelDevice(
            driver=driver,
            attributes=attributes,
            capacity={name: spec.value for name, spec in capacity.items()},
            allow_multiple_allocations=bool(device.allow_multiple_allocations),
        ),
        "",
    )


def attribute_value(attr: o.DeviceAttribute) -> tuple[Any, str]:
    """(CEL value, "") or (None, reason) for one device attribute."""
    try:
        if attr.ints is not None:
            return tuple(attr.ints), ""
        if attr.bools is not None:
            return tuple(attr.bools), ""
        if attr.strings is not None:
            return tuple(attr.strings), ""
        if attr.versions is not None:
            return tuple(parse_semver(v) for v in attr.versions), ""
        if attr.int_ is not None:
            return attr.int_, ""
        if attr.bool_ is not None:
            return attr.bool_, ""
        if attr.string is not None:
            return attr.string, ""
        if attr.version is not None:
            return parse_semver(attr.version), ""
    except ValueError as err:
        return None, f"parse semantic version: {err}"
    return None, "unsupported attribute value"
