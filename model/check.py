"""The reference checker: does a set of allocation results obey every DRA rule?

API:
- ``check_allocation(request, results, *, cel, pools=None) -> list[Violation]``: every rule broken by
  ``results`` (one ``AllocationResult`` per claim of ``request``, in claim order, or an
  ``AllocationOutcome``; an outcome that did not allocate is trivially valid). Empty = valid.
- ``assert_valid(request, results, *, cel)``: the same, raising :class:`InvalidAllocation`.
- ``check_group(request, outcome, *, cel) -> list[Violation]``: the same for a gang placement
  (``model.group_request``): quorum, domain, shared claims once and reachable, room, score,
  then ``check_allocation`` per node used with the rest of the group counted as in use.
- ``Violation(rule, claim, message, result=None)``: one broken rule; ``rule`` is a short id
  (``device``, ``selector``, ``count``, ``first-available``, ``exclusive``, ``counters``,
  ``capacity``, ``constraint``, ``taint``, ``binding``, ``node-selector``, ``config``,
  ``limit``, ``request``, ``admin-access``, ``gate``, ``score``, ``shape``).

Why it exists: it is the specification in executable form, written separately from every
allocator. It re-derives pools, eligibility, rounding and constraints from the API objects in
plain Python and never imports the allocators or their helpers (``model.pools``,
``model.matching``, ``model.capacity``, ``model.taints``, ``model.results``), so a bug shared by
both allocators through those helpers still shows up here. Tests run it on every allocation
they produce; the service runs it on every answer before returning it.

Where upstream's implementation deviates from its own documented semantics, this checker
follows the documentation (README "Where upstream deviates"): distinctAttribute means distinct values
across *all* devices of the constraint; an adminAccess allocation never makes a device busy
for other claims (though, as in upstream's attempt, a device it uses draws on shared counters);
counters of an allowMultipleAllocations device are consumed once.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.allocation import (
    AllocatedState,
    AllocationOutcome,
    AllocationRequest,
    DeviceID,
)
from dra_solver.model.cel import CelCompileError, CelDevice, CelEnvironment, CelRuntimeError
from dra_solver.model.errors import DraSolverError, quote
from dra_solver.model.features import FeatureGates
from dra_solver.model.group_request import GroupOutcome, GroupPod, GroupRequest
from dra_solver.model.quantity import Format, Quantity, QuantityError, parse_quantity
from dra_solver.model.semver import parse_semver

RESULTS_MAX = 32
"""``AllocationResultsMaxSize``: devices per claim."""
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    claim: str
    message: str
    result: int | None = None
    """Index in the claim's ``devices.results`` the violation is about, if one."""

    def __str__(self) -> str:
        where = f"claim {self.claim}" if self.claim else "allocation"
        if self.result is not None:
            where += f", result #{self.result}"
        return f"{where}: {self.rule}: {self.message}"


class InvalidAllocation(DraSolverError, AssertionError):
    """Raised by :func:`assert_valid`; ``violations`` lists every broken rule."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = tuple(violations)
        super().__init__("; ".join(str(v) for v in violations))


def assert_valid(
    request: AllocationRequest,
    results: Sequence[o.AllocationResult] | AllocationOutcome,
    *,
    cel: CelEnvironment,
) -> None:
    violations = check_allocation(request, results, cel=cel)
    if violations:
        raise InvalidAllocation(violations)


def check_allocation(
    request: AllocationRequest,
    results: Sequence[o.AllocationResult] | AllocationOutcome,
    *,
    cel: CelEnvironment,
    pools: PoolCache | None = None,
) -> list[Violation]:
    """Every DRA rule that ``results`` break for ``request`` (empty: the allocation is valid);
    ``pools``: gathered pools kept across calls on the same objects."""
    outcome: AllocationOutcome | None = None
    if isinstance(results, AllocationOutcome):
        outcome = results
        if not outcome.allocated:
            return []
        results = outcome.results
    checker = _Checker(request, list(results), cel=cel, pools=pools)
    checker.run()
    if outcome is not None and not checker.violations:
        score = _score(request.claims, checker.results)
        if score != outcome.score:
            checker.add("score", "", f"outcome reports score {outcome.score}, the results score {score}")
    return checker.violations


# --- the inventory as one node sees it ------------------------------------------------------


@dataclass(slots=True)
class _Device:
    """One device of the newest generation of its pool."""

    id: DeviceID
    device: o.Device
    slice: o.ResourceSlice
    reachable: bool
    """The node may use it (slice-level or per-device node selection)."""
    selector_error: str = ""
    cel_device: Any = None
    cel_error: str = ""
    taints: tuple[o.DeviceTaint, ...] = ()


@dataclass(slots=True)
class _Pool:
    driver: str
    name: str
    complete: bool
    invalid: str
    devices: dict[str, _Device] = field(default_factory=dict)
    """Every device of the newest generation, by name (all slices, not only the node's)."""
    counters: dict[str, dict[str, Quantity]] = field(default_factory=dict)
    amounts: dict[str, Quantity] = field(default_factory=dict)
    """Counter amounts and capacity values parsed, by their text (a pool's devices repeat a
    few; content-keyed, so a pool kept by ``PoolCache`` across checks reuses them)."""
    positions: dict[str, int] | None = None
    """Each device's place in ``devices`` (set once gathering is done, on first use)."""

    def amount(self, text: str) -> Quantity:
        """``text`` parsed, kept in :attr:`amounts`."""
        value = self.amounts.get(text)
        if value is None:
            value = self.amounts[text] = parse_quantity(text)
        return value

    def position(self, name: str) -> int:
        positions = self.positions
        if positions is None or len(positions) != len(self.devices):
            positions = self.positions = {n: i for i, n in enumerate(self.devices)}
        return positions[name]


class PoolCache:
    """For a caller that checks many answers against the same objects (the service): gathered
    pools by the identity of what they are gathered from (the slices, the node and
    the taint rules a request carries: the service hands the same objects to every request
    for one node of one snapshot) and the gates. Entries hold those objects, so an identity
    is never reused while its entry lives; bounded, least recently used first out."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[int, int, int, FeatureGates], tuple[object, object, object, dict[tuple[str, str], _Pool]]] = OrderedDict()
        self._lock = threading.Lock()
        self._cel: OrderedDict[tuple[int, str], tuple[o.Device, Any, str]] = OrderedDict()
        """A device's CEL form (or why it has none) by the device object's identity (held) and
        driver: identical devices of thousands of nodes are one shared object."""

    def cel_device(self, device: o.Device, driver: str, make: Callable[[], tuple[Any, str]]) -> tuple[Any, str]:
        key = (id(device), driver)
        with self._lock:
            hit = self._cel.get(key)
            if hit is not None and hit[0] is device:
                self._cel.move_to_end(key)
                return hit[1], hit[2]
        made = make()
        with self._lock:
            self._cel[key] = (device, *made)
            while len(self._cel) > self.size * 8:
                self._cel.popitem(last=False)
        return made

    def get(self, request: AllocationRequest) -> dict[tuple[str, str], _Pool]:
        """``_gather_pools(request)``, shared: a checker only reads the pools (and memoizes
        each device's CEL form on them, the same value whoever computes it)."""
        inv = request.inventory
        key = (id(inv.slices), id(request.node), id(inv.taint_rules), request.gates)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] is inv.slices and hit[1] is request.node and hit[2] is inv.taint_rules:
                self._entries.move_to_end(key)
                return hit[3]
        pools = _gather_pools(request)
        with self._lock:
            self._entries[key] = (inv.slices, request.node, inv.taint_rules, pools)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return pools


def _gather_pools(request: AllocationRequest) -> dict[tuple[str, str], _Pool]:
    """Pools as the node sees them: the newest generation among the slices that target the
    node; a pool is complete when that generation has all its slices (a newer generation
    elsewhere makes it obsolete)."""
    node = request.node
    gates = request.gates
    by_pool: dict[tuple[str, str], list[o.ResourceSlice]] = defaultdict(list)
    for slice_ in request.inventory.slices:
        by_pool[(slice_.spec.driver, slice_.spec.pool.name)].append(slice_)
    pools: dict[tuple[str, str], _Pool] = {}
    for (driver, name), slices in sorted(by_pool.items()):
        relevant = [s for s in slices if _targets(s, node)]
        if not relevant:
            continue
        generation = max(s.spec.pool.generation for s in relevant)
        wanted = max(s.spec.pool.resource_slice_count for s in relevant if s.spec.pool.generation == generation)
        current = sorted((s for s in slices if s.spec.pool.generation == generation), key=lambda s: s.name)
        targeting = {id(s) for s in relevant if s.spec.pool.generation == generation}
        if len(targeting) == wanted:
            complete = True
        elif any(s.spec.pool.generation > generation for s in slices):
            continue  # obsolete: the pool has moved on
        else:
            complete = len(current) == wanted
        pool = _Pool(driver, name, complete, "")
        seen_sets: set[str] = set()
        for slice_ in current:
            for counter_set in slice_.spec.shared_counters or []:
                if counter_set.name in seen_sets:
                    pool.invalid = f"duplicate counter set {counter_set.name}"
                seen_sets.add(counter_set.name)
                pool.counters[counter_set.name] = {
                    c: parse_quantity(v.value) for c, v in counter_set.counters.items()
                }
        for slice_ in current:
            for device in slice_.spec.devices or []:
                on_node = id(slice_) in targeting
                if device.name in pool.devices:
                    if on_node or pool.devices[device.name].reachable:
                        pool.invalid = f"duplicate device name {device.name}"
                    continue
                reachable, error = _reachable(slice_, device, node) if on_node else (False, "")
                if not gates.partitionable_devices and (
                    slice_.spec.per_device_node_selection is not None or slice_.spec.shared_counters
                ):
                    reachable = False
                entry = _Device(DeviceID(driver, name, device.name), device, slice_, reachable, error)
                entry.taints = _taints(entry, request.inventory.taint_rules, gates=gates)
                pool.devices[device.name] = entry
                for consumption in device.consumes_counters or []:
                    have = pool.counters.get(consumption.counter_set)
                    if have is None:
                        pool.invalid = f"counter set {consumption.counter_set} not found"
                    elif any(c not in have for c in consumption.counters):
                        pool.invalid = f"unknown counter in counter set {consumption.counter_set}"
        pools[(driver, name)] = pool
    return pools


def _targets(slice_: o.ResourceSlice, node: o.Node) -> bool:
    """The slice has devices for the node (slice-level or any device's node selection)."""
    spec = slice_.spec
    if spec.per_device_node_selection:
        return any(
            _node_ok(node, d.node_name, d.all_nodes, d.node_selector)[0] for d in spec.devices or []
        )
    return _node_ok(node, spec.node_name, spec.all_nodes, spec.node_selector)[0]


def _reachable(slice_: o.ResourceSlice, device: o.Device, node: o.Node) -> tuple[bool, str]:
    spec = slice_.spec
    if spec.per_device_node_selection:
        return _node_ok(node, device.node_name, device.all_nodes, device.node_selector)
    return _node_ok(node, spec.node_name, spec.all_nodes, spec.node_selector)


def _node_ok(
    node: o.Node, node_name: str | None, all_nodes: bool | None, selector: o.NodeSelector | None
) -> tuple[bool, str]:
    if node_name:
        return node_name == node.name, ""
    if all_nodes:
        return True, ""
    if selector is None:
        return False, ""
    labels = node.metadata.labels or {}
    for term in selector.node_selector_terms:
        if not term.match_expressions and not term.match_fields:
            continue
        try:
            if all(_label_ok(r, labels) for r in term.match_expressions or []) and all(
                _field_ok(r, node.name) for r in term.match_fields or []
            ):
                return True, ""
        except ValueError as err:
            return False, str(err)
    return False, ""


def _label_ok(req: o.NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    values = req.values or []
    value = labels.get(req.key)
    if req.operator == "In":
        return value is not None and value in values
    if req.operator == "NotIn":
        return value is None or value not in values
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    if req.operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise ValueError(f"operator {req.operator} needs exactly one value")
        if value is None:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if req.operator == "Gt" else have < want
    raise ValueError(f"unknown node selector operator {req.operator!r}")


def _field_ok(req: o.NodeSelectorRequirement, node_name: str) -> bool:
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        raise ValueError(f"unsupported field selector {req.key} {req.operator}")
    hit = node_name in (req.values or [])
    return hit if req.operator == "In" else not hit


def _taints(
    dev: _Device, rules: Sequence[o.DeviceTaintRule], *, gates: FeatureGates
) -> tuple[o.DeviceTaint, ...]:
    taints = list(dev.device.taints or [])
    if gates.device_taints:
        for rule in rules:
            sel = rule.spec.device_selector
            if sel is None or (  # no selector selects no device
                (sel.driver is not None and sel.driver != dev.id.driver)
                or (sel.pool is not None and sel.pool != dev.id.pool)
                or (sel.device is not None and sel.device != dev.id.device)
            ):
                continue
            taints.append(rule.spec.taint)
    return tuple(taints)


def _tolerated(taint: o.DeviceTaint, tolerations: Sequence[o.DeviceToleration]) -> bool:
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.key and tol.key != taint.key:
            continue
        op = tol.operator or "Equal"
        if op == "Exists" or (op == "Equal" and (tol.value or "") == (taint.value or "")):
            return True
    return False


# --- attributes -------------------------------------------------------------------------------


def _lookup(dev: _Device, name: str) -> o.DeviceAttribute | None:
    """A constraint's fully qualified attribute; ``driver/x`` also finds the bare ``x``."""
    attrs = dev.device.attributes or {}
    if name in attrs:
        return attrs[name]
    domain, _, ident = name.partition("/")
    if ident and domain == dev.id.driver:
        return attrs.get(ident)
    return None


def _as_set(attr: o.DeviceAttribute) -> tuple[str, frozenset[Any]] | None:
    """Typed value set: a non-empty list, else the scalar; None when there is no value."""
    for kind, values in (
        ("int", attr.ints),
        ("bool", attr.bools),
        ("string", attr.strings),
        ("version", attr.versions),
    ):
        if values:
            return kind, frozenset(values)
    for kind, value in (
        ("int", attr.int_),
        ("bool", attr.bool_),
        ("string", attr.string),
        ("version", attr.version),
    ):
        if value is not None:
            return kind, frozenset((value,))
    return None


def _scalar(attr: o.DeviceAttribute) -> tuple[str, Any] | None:
    for kind, value in (
        ("string", attr.string),
        ("int", attr.int_),
        ("bool", attr.bool_),
        ("version", attr.version),
    ):
        if value is not None:
            return kind, value
    return None


# --- capacity ---------------------------------------------------------------------------------


def _q(text: str | None) -> Quantity | None:
    return parse_quantity(text) if text is not None else None


def _consumed(requested: Quantity | None, cap: o.DeviceCapacity, parse: Callable[[str], Quantity] = parse_quantity) -> Quantity:
    """What one allocation consumes of a capacity under its request policy (``parse``: the
    capacity's value parsed)."""
    policy = cap.request_policy
    if requested is None:
        default = _q(policy.default) if policy is not None else None
        return default if default is not None else parse(cap.value)
    if policy is None:
        return requested
    rng = policy.valid_range
    if rng is not None and rng.min is not None:
        low = parse_quantity(rng.min)
        if requested < low:
            return low
        if rng.step is None:
            return requested
        step = parse_quantity(rng.step).value()
        added = requested.value() - low.value()
        if step <= 0:
            return requested
        steps = -(-added // step)  # ceil: requested >= min, so added >= 0
        return Quantity.from_int(low.value() + step * steps, Format.BINARY_SI)
    if policy.valid_values is not None:
        for text in policy.valid_values:
            candidate = parse_quantity(text)
            if requested <= candidate:
                return candidate
    return requested


def _breaks_policy(amount: Quantity, cap: o.DeviceCapacity) -> bool:
    policy = cap.request_policy
    if policy is None:
        return False
    if policy.default is not None and amount == parse_quantity(policy.default):
        return False
    rng = policy.valid_range
    if rng is not None:
        if rng.max is not None and amount > parse_quantity(rng.max):
            return True
        if rng.step is not None:
            low = parse_quantity(rng.min).value() if rng.min is not None else 0
            diff = amount.value() - low
            step = parse_quantity(rng.step).value()
            return step != 0 and abs(diff) % abs(step) != 0
        return False
    if policy.valid_values:
        return all(amount != parse_quantity(v) for v in policy.valid_values)
    return False


# --- the checker ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Option:
    """The request or subrequest a result names."""

    request_index: int
    request: o.DeviceRequest
    sub_index: int | None
    ref: str
    class_name: str
    selectors: Sequence[o.DeviceSelector]
    mode: str
    count: int
    admin: bool
    tolerations: Sequence[o.DeviceToleration]
    capacity: Mapping[str, str] | None


def _options(request: o.DeviceRequest, index: int) -> list[_Option]:
    if request.exactly is not None:
        ex = request.exactly
        return [
            _Option(
                index,
                request,
                None,
                request.name,
                ex.device_class_name,
                ex.selectors or [],
                ex.allocation_mode or "ExactCount",
                ex.count if ex.count is not None else 1,
                bool(ex.admin_access),
                ex.tolerations or [],
                (ex.capacity.requests or {}) if ex.capacity is not None else None,
            )
        ]
    return [
        _Option(
            index,
            request,
            i,
            f"{request.name}/{sub.name}",
            sub.device_class_name,
            sub.selectors or [],
            sub.allocation_mode or "ExactCount",
            sub.count if sub.count is not None else 1,
            False,
            sub.tolerations or [],
            (sub.capacity.requests or {}) if sub.capacity is not None else None,
        )
        for i, sub in enumerate(request.first_available or [])
    ]


@dataclass(slots=True)
class _Use:
    claim: int
    index: int
    option: _Option
    device: _Device
    result: o.DeviceRequestAllocationResult


class _Checker:
    def __init__(
        self, request: AllocationRequest, results: list[o.AllocationResult], *, cel: CelEnvironment,
        pools: PoolCache | None = None,
    ) -> None:
        self.request = request
        self.results = results
        self.cel = cel
        self.gates = request.gates
        self.violations: list[Violation] = []
        self.pools = pools.get(request) if pools is not None else _gather_pools(request)
        self.shared = pools
        self.allocated: AllocatedState = request.inventory.allocated_state()
        self._used_before: frozenset[DeviceID] | None = None
        self.classes = {c.name: c for c in request.inventory.classes}
        self._compiled: dict[str, Any] = {}
        self._match_cache: dict[tuple[int, str, DeviceID], bool | str] = {}
        self.uses: list[_Use] = []
        self._claim = ""

    def add(self, rule: str, claim: str, message: str, result: int | None = None) -> None:
        self.violations.append(Violation(rule, claim, message, result))

    # -- driver -------------------------------------------------------------------------------

    def run(self) -> None:
        claims = self.request.claims
        if len(self.results) != len(claims):
            self.add("shape", "", f"{len(claims)} claims but {len(self.results)} results")
            return
        for c, (claim, result) in enumerate(zip(claims, self.results, strict=True)):
            self._check_claim(c, claim, result)
        self._check_exclusive()
        self._check_counters()
        self._check_capacity()

    def _label(self, claim: o.ResourceClaim) -> str:
        return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name

    def _check_claim(self, c: int, claim: o.ResourceClaim, result: o.AllocationResult) -> None:
        label = self._label(claim)
        items = list(result.devices.results or []) if result.devices is not None else []
        if len(items) > RESULTS_MAX:
            self.add("limit", label, f"{len(items)} devices exceed the limit of {RESULTS_MAX}")
        requests = claim.spec.devices.requests or []
        per_request = [_options(req, i) for i, req in enumerate(requests)]
        options: dict[str, _Option] = {}
        for listed in per_request:
            for opt in listed:
                options.setdefault(opt.ref, opt)
        by_option: dict[str, list[_Use]] = defaultdict(list)
        for k, item in enumerate(items):
            use = self._check_item(c, label, k, item, options)
            if use is not None:
                by_option[use.option.ref].append(use)
                self.uses.append(use)

        selected: dict[int, _Option] = {}
        for i, req in enumerate(requests):
            opts = list({opt.ref: opt for opt in reversed(per_request[i])}.values())[::-1]
            used = [opt for opt in opts if by_option.get(opt.ref)]
            if req.first_available and not self.gates.prioritized_list:
                self.add("gate", label, f"request {req.name} has subrequests but PrioritizedList is off")
            if len(used) != 1:
                names = ", ".join(opt.ref for opt in used) or "none"
                rule = "first-available" if req.first_available else "count"
                self.add(rule, label, f"request {req.name}: exactly one option must be allocated, got {names}")
                continue
            opt = used[0]
            selected[i] = opt
            self._check_count(c, label, opt, by_option[opt.ref])
        self._check_constraints(label, claim, self.uses_of(c))
        if len(selected) == len(requests):
            self._check_config(label, claim, result, selected)
        self._check_node_selector(label, result, [u.device for u in self.uses_of(c)])

    def uses_of(self, c: int) -> list[_Use]:
        return [u for u in self.uses if u.claim == c]

    # -- one result -----------------------------------------------------------------------

    def _check_item(
        self,
        c: int,
        label: str,
        k: int,
        item: o.DeviceRequestAllocationResult,
        options: Mapping[str, _Option],
    ) -> _Use | None:
        opt = options.get(item.request)
        if opt is None:
            self.add("request", label, f"names unknown request {quote(item.request)}", k)
            return None
        pool = self.pools.get((item.driver, item.pool))
        dev = pool.devices.get(item.device) if pool is not None else None
        if pool is None or dev is None:
            self.add("device", label, f"device {item.driver}/{item.pool}/{item.device} does not exist", k)
            return None
        if not pool.complete:
            self.add("device", label, f"pool {item.driver}/{item.pool} is incomplete", k)
        if pool.invalid:
            self.add("device", label, f"pool {item.driver}/{item.pool} is invalid: {pool.invalid}", k)
        if not dev.reachable:
            why = f" ({dev.selector_error})" if dev.selector_error else ""
            self.add("device", label, f"device {dev.id} is not available on node {self.request.node.name}{why}", k)
        gates = self.gates
        if not gates.partitionable_devices and dev.device.consumes_counters:
            self.add("gate", label, f"device {dev.id} consumes counters but PartitionableDevices is off", k)
        if opt.admin and not gates.admin_access:
            self.add("gate", label, f"request {opt.ref} uses adminAccess but AdminAccess is off", k)
        if opt.capacity is not None and not gates.consumable_capacity:
            self.add("gate", label, f"request {opt.ref} requests capacity but ConsumableCapacity is off", k)

        # Selected by the class and the request.
        verdict = self._selectable(c, opt, dev)
        if isinstance(verdict, str):
            self.add("selector", label, f"device {dev.id}: {verdict}", k)
        elif not verdict:
            self.add("selector", label, f"device {dev.id} does not match the selectors of {opt.ref}", k)

        # Result fields copied from the request and the device.
        if bool(item.admin_access) != opt.admin:
            self.add("admin-access", label, f"adminAccess is {item.admin_access}, request says {opt.admin}", k)
        want_tol = [t.to_api() for t in opt.tolerations]
        got_tol = [t.to_api() for t in item.tolerations or []]
        if want_tol != got_tol:
            self.add("taint", label, f"tolerations {got_tol} differ from the request's {want_tol}", k)
        if gates.device_taints:
            for taint in dev.taints:
                if taint.effect in _BLOCKING_EFFECTS and not _tolerated(taint, opt.tolerations):
                    self.add("taint", label, f"device {dev.id} has untolerated taint {taint.key}={taint.value or ''}:{taint.effect}", k)
        conditions = list(dev.device.binding_conditions or [])
        failures = list(dev.device.binding_failure_conditions or [])
        if gates.device_binding_and_status:
            if list(item.binding_conditions or []) != conditions:
                self.add("binding", label, f"bindingConditions {item.binding_conditions} differ from the device's {conditions}", k)
            if list(item.binding_failure_conditions or []) != failures:
                self.add("binding", label, f"bindingFailureConditions {item.binding_failure_conditions} differ from the device's {failures}", k)
        else:
            if conditions:
                self.add("binding", label, f"device {dev.id} has binding conditions but DeviceBindingAndStatus is off", k)
            if item.binding_conditions or item.binding_failure_conditions:
                self.add("binding", label, "binding conditions set while DeviceBindingAndStatus is off", k)
        return _Use(c, k, opt, dev, item)

    def _selectable(self, c: int, opt: _Option, dev: _Device) -> bool | str:
        """True/False, or why the selectors could not be evaluated (upstream: an error)."""
        key = (c, opt.ref, dev.id)
        cached = self._match_cache.get(key)
        if cached is not None:
            return cached
        verdict = self._evaluate(opt, dev)
        self._match_cache[key] = verdict
        return verdict

    def _evaluate(self, opt: _Option, dev: _Device) -> bool | str:
        if not self.gates.device_binding_and_status and dev.device.binding_conditions:
            return False
        cls = self.classes.get(opt.class_name)
        if cls is None:
            return f"device class {quote(opt.class_name)} does not exist"
        for owner, selectors in (
            (f"class {cls.name}", cls.spec.selectors or []),
            (f"request {opt.ref}", opt.selectors),
        ):
            for i, selector in enumerate(selectors):
                verdict = self._cel_match(dev, selector)
                if isinstance(verdict, str):
                    return f"{owner}: selector #{i}: {verdict}"
                if not verdict:
                    return False
        return True

    def _cel_match(self, dev: _Device, selector: o.DeviceSelector) -> bool | str:
        if selector.cel is None:
            return "selector without a CEL expression"
        expression = selector.cel.expression
        compiled = self._compiled.get(expression)
        if compiled is None:
            try:
                compiled = self.cel.compile(expression)
            except CelCompileError as err:
                return f"CEL compile error: {err}"
            self._compiled[expression] = compiled
        cel_device = self._cel_device(dev)
        if cel_device is None:
            return f"CEL runtime error: {dev.cel_error}"
        try:
            return bool(self.cel.matches(compiled, cel_device))
        except CelRuntimeError as err:
            return f"CEL runtime error: {err}"

    def _cel_device(self, dev: _Device) -> Any:
        if dev.cel_device is not None or dev.cel_error:
            return dev.cel_device
        if self.shared is not None:
            dev.cel_device, dev.cel_error = self.shared.cel_device(dev.device, dev.id.driver, partial(_cel_form, dev.device, dev.id.driver))
        else:
            dev.cel_device, dev.cel_error = _cel_form(dev.device, dev.id.driver)
        return dev.cel_device

    # -- counts --------------------------------------------------------------------------------

    def _check_count(self, c: int, label: str, opt: _Option, uses: list[_Use]) -> None:
        got = {u.device.id for u in uses}
        if len(got) != len(uses):
            self.add("count", label, f"{opt.ref}: a device is listed twice")
        if opt.mode == "ExactCount":
            if len(uses) != opt.count:
                self.add("count", label, f"{opt.ref}: {len(uses)} devices, want exactly {opt.count}")
            return
        if opt.mode != "All":
            self.add("count", label, f"{opt.ref}: unknown allocation mode {quote(opt.mode)}")
            return
        # All: every device on the node that the request selects (and whose capacity fits).
        want: set[DeviceID] = set()
        for pool in self.pools.values():
            reachable = [dev for dev in pool.devices.values() if dev.reachable]
            if reachable and (not pool.complete or pool.invalid):
                # Upstream cannot know what "all" is while a pool is incomplete or broken.
                self.add("count", label, f"{opt.ref}: asks for all devices, but pool {pool.driver}/{pool.name} is not usable")
                continue
            want.update(dev.id for dev in reachable if self._all_member(c, opt, dev))
        if not want:
            self.add("count", label, f"{opt.ref}: asks for all devices, but none match")
        if got != want:
            missing = sorted(str(d) for d in want - got)
            extra = sorted(str(d) for d in got - want)
            self.add("count", label, f"{opt.ref}: all matching devices must be allocated (missing {missing}, unexpected {extra})")

    def _all_member(self, c: int, opt: _Option, dev: _Device) -> bool:
        if self._selectable(c, opt, dev) is not True:
            return False
        if not self.gates.consumable_capacity:
            return True
        caps = dev.device.capacity or {}
        requests = opt.capacity or {}
        if any(name not in caps for name in requests):
            return False
        already = self.allocated.capacity.get(dev.id, {})
        parse = self.pools[(dev.id.driver, dev.id.pool)].amount
        for name, cap in caps.items():
            amount = _consumed(_q(requests.get(name)), cap, parse)
            if _breaks_policy(amount, cap):
                return False
            total = amount.add(already[name]) if name in already else amount
            if total > parse(cap.value):
                return False
        return True

    # -- exclusive use -------------------------------------------------------------------------

    def _check_exclusive(self) -> None:
        by_device: dict[DeviceID, list[_Use]] = defaultdict(list)
        for use in self.uses:
            by_device[use.device.id].append(use)
        shared_ids: dict[DeviceID, set[str]] = defaultdict(set)
        for dev_id, taken in self.allocated.shared:
            shared_ids[dev_id].add(taken)
        for dev_id, uses in sorted(by_device.items()):
            device = uses[0].device
            multi = self.gates.consumable_capacity and bool(device.device.allow_multiple_allocations)
            for use in uses:
                label = self._label(self.request.claims[use.claim])
                share = use.result.share_id
                if multi and not share:
                    self.add("exclusive", label, f"device {dev_id} allows multiple allocations: shareID required", use.index)
                if not multi and share:
                    self.add("exclusive", label, f"device {dev_id} is not shareable but has shareID {share}", use.index)
                if not use.option.admin and dev_id in self.allocated.devices:
                    self.add("exclusive", label, f"device {dev_id} is already allocated", use.index)
            if multi:
                shares = [u.result.share_id for u in uses if u.result.share_id]
                if len(set(shares)) != len(shares):
                    self.add("exclusive", "", f"device {dev_id}: shareIDs repeat")
                reused = set(shares) & shared_ids[dev_id]
                if reused:
                    self.add("exclusive", "", f"device {dev_id}: shareIDs {sorted(reused)} already in use")
                continue
            exclusive = [u for u in uses if not u.option.admin]
            if len(exclusive) > 1:
                who = ", ".join(f"{self._label(self.request.claims[u.claim])}#{u.index}" for u in exclusive)
                self.add("exclusive", "", f"device {dev_id} allocated more than once ({who})")
            per_claim: dict[int, int] = defaultdict(int)
            for use in uses:
                per_claim[use.claim] += 1
            for claim_index, count in sorted(per_claim.items()):
                if count > 1:
                    label = self._label(self.request.claims[claim_index])
                    self.add("exclusive", label, f"device {dev_id} allocated {count} times in one claim")

    # -- shared counters -----------------------------------------------------------------------

    def _before(self) -> frozenset[DeviceID]:
        """Devices in use before this answer (exclusively, shared or with consumed capacity)."""
        if self._used_before is None:
            a = self.allocated
            self._used_before = a.ids()
        return self._used_before

    def _in_use_before(self, dev_id: DeviceID) -> bool:
        return dev_id in self._before()

    def _check_counters(self) -> None:
        if not self.gates.partitionable_devices:
            return
        fresh: dict[tuple[str, str], set[str]] = defaultdict(set)
        for use in self.uses:
            if not use.device.device.consumes_counters:
                continue
            if self._in_use_before(use.device.id):
                continue  # its counters are already counted as in use
            fresh[(use.device.id.driver, use.device.id.pool)].add(use.device.id.device)
        for key, names in sorted(fresh.items()):
            pool = self.pools[key]
            used: dict[tuple[str, str], Quantity] = {}
            touched: set[tuple[str, str]] = set()
            for dev in self._counted(pool, key, names):
                new = dev.id.device in names
                for consumption in dev.device.consumes_counters or []:
                    for counter, amount in consumption.counters.items():
                        slot = (consumption.counter_set, counter)
                        value = pool.amount(amount.value)
                        used[slot] = used[slot].add(value) if slot in used else value
                        if new:
                            touched.add(slot)
            for slot in sorted(touched):
                limit = pool.counters.get(slot[0], {}).get(slot[1])
                if limit is None:
                    self.add("counters", "", f"pool {key[0]}/{key[1]}: counter {slot[1]} of set {slot[0]} does not exist")
                elif used[slot] > limit:
                    self.add("counters", "", f"pool {key[0]}/{key[1]}: counter {slot[0]}/{slot[1]} needs {used[slot]}, has {limit}")

    def _counted(self, pool: _Pool, key: tuple[str, str], names: set[str]) -> list[_Device]:
        """The pool's devices whose counters count: the new ones (``names``) and those in use
        before, in the pool's order. Looked up by name when fewer devices are in use than the
        pool has (a node's pool, a few allocations), else found by visiting every device."""
        before = self._before()
        if len(before) >= len(pool.devices):
            return [dev for dev in pool.devices.values() if dev.id.device in names or dev.id in before]
        wanted = set(names)
        wanted.update(d.device for d in before if d.driver == key[0] and d.pool == key[1])
        return sorted((pool.devices[n] for n in wanted if n in pool.devices), key=lambda dev: pool.position(dev.id.device))

    # -- consumable capacity -------------------------------------------------------------------

    def _check_capacity(self) -> None:
        if not self.gates.consumable_capacity:
            for use in self.uses:
                if use.result.consumed_capacity:
                    label = self._label(self.request.claims[use.claim])
                    self.add("capacity", label, "consumedCapacity set while ConsumableCapacity is off", use.index)
            return
        totals: dict[DeviceID, dict[str, Quantity]] = {}
        for use in self.uses:
            label = self._label(self.request.claims[use.claim])
            caps = use.device.device.capacity or {}
            requests = use.option.capacity or {}
            multi = bool(use.device.device.allow_multiple_allocations)
            for name in sorted(requests):
                if name not in caps:
                    self.add("capacity", label, f"request {use.option.ref} asks for capacity {name} that device {use.device.id} does not have", use.index)
            consumed: dict[str, Quantity] = {}
            parse = self.pools[(use.device.id.driver, use.device.id.pool)].amount  # every use's device is in its pool
            for name, cap in sorted(caps.items()):
                try:
                    amount = _consumed(_q(requests.get(name)), cap, parse)
                except QuantityError as err:
                    self.add("capacity", label, f"capacity {name}: {err}", use.index)
                    continue
                if _breaks_policy(amount, cap):
                    self.add("capacity", label, f"device {use.device.id}: {amount} of {name} breaks its request policy", use.index)
                consumed[name] = amount
            given = {n: parse_quantity(v) for n, v in (use.result.consumed_capacity or {}).items()}
            want = consumed if multi else {}
            if want != given:
                shown = {n: str(q) for n, q in sorted(want.items())}
                self.add("capacity", label, f"consumedCapacity {use.result.consumed_capacity} should be {shown}", use.index)
            if not multi:
                totals_for = self.allocated.capacity.get(use.device.id, {})
                for name, amount in consumed.items():
                    total = amount.add(totals_for[name]) if name in totals_for else amount
                    if total > parse(caps[name].value):
                        self.add("capacity", label, f"device {use.device.id}: {name} needs {total}, has {caps[name].value}", use.index)
                continue
            mine = totals.setdefault(use.device.id, dict(self.allocated.capacity.get(use.device.id, {})))
            for name, amount in consumed.items():
                mine[name] = mine[name].add(amount) if name in mine else amount
        for dev_id, amounts in sorted(totals.items()):
            pool = self.pools[(dev_id.driver, dev_id.pool)]
            caps = pool.devices[dev_id.device].device.capacity or {}
            for name, total in sorted(amounts.items()):
                if name in caps and total > pool.amount(caps[name].value):
                    self.add("capacity", "", f"device {dev_id}: shares need {total} of {name}, has {caps[name].value}")

    # -- constraints ---------------------------------------------------------------------------

    def _check_constraints(self, label: str, claim: o.ResourceClaim, uses: list[_Use]) -> None:
        list_types = self.gates.list_type_attributes
        for i, constraint in enumerate(claim.spec.devices.constraints or []):
            names = set(constraint.requests or [])
            members = [
                u
                for u in uses
                if not names
                or u.option.request.name in names
                or (u.option.sub_index is not None and u.option.ref in names)
            ]
            attribute = constraint.match_attribute or constraint.distinct_attribute
            if attribute is None:
                self.add("constraint", label, f"constraint #{i} has no type")
                continue
            values: list[tuple[_Use, o.DeviceAttribute]] = []
            for use in members:
                attr = _lookup(use.device, attribute)
                if attr is None:
                    self.add("constraint", label, f"constraint #{i}: device {use.device.id} lacks attribute {attribute}", use.index)
                else:
                    values.append((use, attr))
            if len(values) < 2:
                if values and list_types and _as_set(values[0][1]) is None:
                    self.add("constraint", label, f"constraint #{i}: attribute {attribute} of device {values[0][0].device.id} has no value", values[0][0].index)
                continue
            if constraint.match_attribute is not None:
                self._check_match(label, i, attribute, values, list_types=list_types)
            else:
                self._check_distinct(label, i, attribute, values, list_types=list_types)

    def _check_match(
        self,
        label: str,
        i: int,
        attribute: str,
        values: list[tuple[_Use, o.DeviceAttribute]],
        *,
        list_types: bool,
    ) -> None:
        if list_types:
            sets = [_as_set(a) for _, a in values]
            kinds = {s[0] for s in sets if s is not None}
            if any(s is None for s in sets) or len(kinds) != 1:
                self.add("constraint", label, f"constraint #{i}: {attribute} values have different types")
                return
            common = frozenset.intersection(*(s[1] for s in sets if s is not None))
            if not common:
                self.add("constraint", label, f"constraint #{i}: {attribute} values have nothing in common")
            return
        scalars = [_scalar(a) for _, a in values]
        if any(s is None for s in scalars) or len(set(scalars)) != 1:
            shown = ", ".join(f"{u.device.id}={_shown(a)}" for u, a in values)
            self.add("constraint", label, f"constraint #{i}: {attribute} differs ({shown})")

    def _check_distinct(
        self,
        label: str,
        i: int,
        attribute: str,
        values: list[tuple[_Use, o.DeviceAttribute]],
        *,
        list_types: bool,
    ) -> None:
        for a in range(len(values)):
            for b in range(a + 1, len(values)):
                (ua, va), (ub, vb) = values[a], values[b]
                if list_types:
                    sa, sb = _as_set(va), _as_set(vb)
                    clash = sa is None or sb is None or (sa[0] == sb[0] and bool(sa[1] & sb[1]))
                else:
                    xa, xb = _scalar(va), _scalar(vb)
                    clash = xa is None or xb is None or xa == xb
                if clash:
                    self.add("constraint", label, f"constraint #{i}: devices {ua.device.id} and {ub.device.id} share {attribute} ({_shown(va)})")

    # -- configuration and node selector -------------------------------------------------------

    def _check_config(
        self,
        label: str,
        claim: o.ResourceClaim,
        result: o.AllocationResult,
        selected: Mapping[int, _Option],
    ) -> None:
        want: list[dict[str, Any]] = []
        class_slots: dict[str, list[int]] = {}
        for i in sorted(selected):
            opt = selected[i]
            cls = self.classes.get(opt.class_name)
            if cls is None:
                continue
            if cls.name in class_slots:
                for slot in class_slots[cls.name]:
                    want[slot]["requests"].append(opt.ref)
                continue
            class_slots[cls.name] = []
            for config in cls.spec.config or []:
                class_slots[cls.name].append(len(want))
                want.append({**_config_body(config.to_api()), "source": "FromClass", "requests": [opt.ref]})
        for claim_config in claim.spec.devices.config or []:
            names = list(claim_config.requests or [])
            body = {**_config_body(claim_config.to_api()), "source": "FromClaim"}
            if not names:
                want.append(body)
            elif any(opt.request.name in names or opt.ref in names for opt in selected.values()):
                want.append({**body, "requests": names})
        for entry in want:
            names = entry.get("requests") or []
            if names and all(opt.request.name in names or opt.ref in names for opt in selected.values()):
                entry.pop("requests")
        got = [
            {k: v for k, v in c.to_api().items() if not (k == "requests" and not v)}
            for c in (result.devices.config or [] if result.devices is not None else [])
        ]
        if got != want:
            self.add("config", label, f"config {json.dumps(got, sort_keys=True)} should be {json.dumps(want, sort_keys=True)}")

    def _check_node_selector(self, label: str, result: o.AllocationResult, devices: Iterable[_Device]) -> None:
        want = _node_selector(list(devices), self.request.node.name)
        got = _normalize_selector(result.node_selector)
        if isinstance(want, str):
            self.add("node-selector", label, want)
        elif got != want:
            self.add("node-selector", label, f"nodeSelector {got} should be {want}")


def _config_body(api: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in api.items() if k not in ("requests", "source")}


_Selector = list[tuple[tuple[tuple[str, str, tuple[str, ...]], ...], tuple[tuple[str, str, tuple[str, ...]], ...]]]


def _normalize_selector(selector: o.NodeSelector | None) -> _Selector | None:
    if selector is None or not selector.node_selector_terms:
        return None

    def reqs(items: Sequence[o.NodeSelectorRequirement] | None) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        return tuple(sorted({(r.key, r.operator, tuple(sorted(set(r.values or [])))) for r in items or []}))

    return [(reqs(t.match_fields), reqs(t.match_expressions)) for t in selector.node_selector_terms]


def _cel_form(device: o.Device, driver: str) -> tuple[Any, str]:
    """The device as CEL sees it, or why it cannot be (then None)."""
    attributes: dict[str, Any] = {}
    for name, attr in sorted((device.attributes or {}).items()):
        try:
            if attr.ints is not None:
                value: Any = tuple(attr.ints)
            elif attr.bools is not None:
                value = tuple(attr.bools)
            elif attr.strings is not None:
                value = tuple(attr.strings)
            elif attr.versions is not None:
                value = tuple(parse_semver(v) for v in attr.versions)
            elif attr.int_ is not None:
                value = attr.int_
            elif attr.bool_ is not None:
                value = attr.bool_
            elif attr.string is not None:
                value = attr.string
            elif attr.version is not None:
                value = parse_semver(attr.version)
            else:
                return None, f"attribute {name} has no value"
        except ValueError as err:
            return None, f"attribute {name}: {err}"
        attributes[name] = value
    capacity = {n: parse_quantity(c.value) for n, c in (device.capacity or {}).items()}
    cel_device = CelDevice(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=bool(device.allow_multiple_allocations),
    )
    return cel_device, ""


def _node_selector(devices: list[_Device], node_name: str) -> _Selector | str | None:
    """The nodeSelector the results must carry: node-local → this node; else the slices'."""
    fields: list[o.NodeSelectorRequirement] = []
    expressions: list[o.NodeSelectorRequirement] = []
    for dev in devices:
        per_device = bool(dev.slice.spec.per_device_node_selection)
        name = dev.device.node_name if per_device else dev.slice.spec.node_name
        selector = dev.device.node_selector if per_device else dev.slice.spec.node_selector
        if name is not None or dev.device.binds_to_node:
            # The node itself (``metadata.name In [node]``), in _normalize_selector's form.
            return [((("metadata.name", "In", (node_name,)),), ())]
        if selector is None or not selector.node_selector_terms:
            continue
        if len(selector.node_selector_terms) > 1:
            return f"device {dev.id}: a node selector with several terms cannot be combined"
        fields.extend(selector.node_selector_terms[0].match_fields or [])
        expressions.extend(selector.node_selector_terms[0].match_expressions or [])
    if not fields and not expressions:
        return None
    term = o.NodeSelectorTerm(match_fields=fields or None, match_expressions=expressions or None)
    return _normalize_selector(o.NodeSelector(node_selector_terms=[term]))


def _shown(attr: o.DeviceAttribute) -> str:
    return json.dumps(attr.to_api(), sort_keys=True)


def _score(claims: Sequence[o.ResourceClaim], results: Sequence[o.AllocationResult]) -> int:
    """The scheduler's FirstAvailable score: 8 - i for each subrequest i that got devices."""
    score = 0
    for claim, result in zip(claims, results, strict=False):
        names = {r.request for r in (result.devices.results or [] if result.devices else [])}
        for req in claim.spec.devices.requests or []:
            for i, sub in enumerate(req.first_available or []):
                if f"{req.name}/{sub.name}" in names:
                    score += o.FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE - i
    return score


# --- groups -------------------------------------------------------------------------------------


def check_group(request: GroupRequest, outcome: GroupOutcome, *, cel: CelEnvironment) -> list[Violation]:
    """Every rule a group placement breaks (empty: valid; not placed is trivially valid).

    Re-derived from the request alone: the quorum (``group-min-count``), known pods placed
    once with every claim, on a candidate node (``group-pod``), one domain (``group-domain``),
    each shared claim allocated once and reachable from every node using it
    (``group-shared-once``, ``group-reach``), CPU, memory and pod slots (``group-room``), the
    score (``score``); then, per node used, :func:`check_allocation` of the claims placed there
    with everything else the group took counted as in use, and each shared claim the same way
    on a node that uses it.
    """
    if not outcome.placed:
        return []
    out: list[Violation] = []
    index = request.index
    pods = {p.name: p for p in request.pods}
    if outcome.pods_placed < request.min_count:
        out.append(Violation("group-min-count", "", f"{outcome.pods_placed} pods placed, minCount is {request.min_count}"))
    placed: dict[str, GroupPlacementView] = {}
    for pl in outcome.pods:
        pod = pods.get(pl.name)
        if pod is None:
            out.append(Violation("group-pod", "", f"pod {pl.name} is not in the group"))
            continue
        if pl.name in placed:
            out.append(Violation("group-pod", "", f"pod {pl.name} is placed twice"))
            continue
        if len(pl.results) != len(pod.claims):
            out.append(Violation("group-pod", "", f"pod {pl.name}: {len(pl.results)} results for {len(pod.claims)} claims"))
            continue
        if pod.nodes is not None and pl.node not in pod.nodes:
            out.append(Violation("group-pod", "", f"pod {pl.name}: node {pl.node} is not one of its candidates"))
        if pl.node not in index.nodes_by_name and pl.node not in index.views:
            out.append(Violation("group-pod", "", f"pod {pl.name}: node {pl.node} is not in the inventory"))
            continue
        placed[pl.name] = GroupPlacementView(pod, pl.node, pl.results)
    key = request.topology_key
    if key:
        for view in placed.values():
            node = index.nodes_by_name.get(view.node)
            value = (node.metadata.labels or {}).get(key) if node else None
            if value is None or value != outcome.domain:
                out.append(Violation("group-domain", "", f"pod {view.pod.name}: node {view.node} has {key}={value}, the group's domain is {outcome.domain}"))
    if len(outcome.shared) != len(request.shared_claims):
        out.append(Violation("group-shared-once", "", f"{len(outcome.shared)} shared results for {len(request.shared_claims)} shared claims"))
        return out
    shared_results = dict(zip((c.ref for c in request.shared_claims), outcome.shared, strict=True))
    for claim in request.shared_claims:
        given = claim.status.allocation if claim.status else None
        if given is not None and _canonical(given) != _canonical(shared_results[claim.ref]):
            out.append(Violation("group-shared-once", claim.ref, "an allocated shared claim got a new allocation"))
    for view in placed.values():
        node = index.nodes_by_name.get(view.node) or index.inventory.node(view.node)
        for ref in view.pod.shared:
            result = shared_results.get(ref)
            if result is None:
                out.append(Violation("group-reach", ref, f"pod {view.pod.name} uses an unknown shared claim"))
                continue
            selector = result.node_selector
            if selector is not None and not _node_ok(node, None, None, selector)[0]:
                out.append(Violation("group-reach", ref, f"pod {view.pod.name}: node {view.node} does not reach the shared claim's devices"))
    by_node: dict[str, list[GroupPlacementView]] = defaultdict(list)
    for view in placed.values():
        by_node[view.node].append(view)
    for name, views in sorted(by_node.items()):
        room = request.rooms.get(name)
        if room is None:
            continue
        cpu = sum(v.pod.cpu_millis for v in views)
        memory = sum(v.pod.memory_bytes for v in views)
        if room.pods is not None and len(views) > room.pods:
            out.append(Violation("group-room", "", f"node {name}: {len(views)} pods, room for {room.pods}"))
        if room.cpu_millis is not None and cpu > room.cpu_millis:
            out.append(Violation("group-room", "", f"node {name}: {cpu}m cpu requested, {room.cpu_millis}m left"))
        if room.memory_bytes is not None and memory > room.memory_bytes:
            out.append(Violation("group-room", "", f"node {name}: {memory} bytes of memory requested, {room.memory_bytes} left"))
    score = sum(_score(v.pod.claims, v.results) for v in placed.values())
    score += _score(request.shared_claims, outcome.shared)
    if score != outcome.score:
        out.append(Violation("score", "", f"outcome reports score {outcome.score}, the results score {score}"))
    if out:
        return out
    # Every DRA rule, per node, with the rest of the group's devices counted as in use.
    everything = [(v.pod.claims, v.results, v.node) for v in placed.values()]
    open_shared = [(c, shared_results[c.ref]) for c in request.shared_claims if not c.allocated]
    for name, views in sorted(by_node.items()):
        claims = [c for v in views for c in v.pod.claims]
        results = [r for v in views for r in v.results]
        if not claims:
            continue
        others = [r for cl, rs, n in everything if n != name for r in rs] + [r for _, r in open_shared]
        req = _group_node_request(request, name, claims, others)
        out.extend(check_allocation(req, results, cel=cel))
    for claim, result in open_shared:
        users = sorted(v.node for v in placed.values() if claim.ref in v.pod.shared)
        host = users[0] if users else next(iter(sorted(by_node)), "")
        if not host:
            continue
        others = [r for _, rs, _ in everything for r in rs] + [r for c, r in open_shared if c is not claim]
        req = _group_node_request(request, host, [claim], others)
        out.extend(check_allocation(req, [result], cel=cel))
    return out


@dataclass(frozen=True, slots=True)
class GroupPlacementView:
    pod: GroupPod
    node: str
    results: tuple[o.AllocationResult, ...]


def _canonical(result: o.AllocationResult) -> str:
    return json.dumps(result.to_api(), sort_keys=True)


def _group_node_request(
    request: GroupRequest, node: str, claims: Sequence[o.ResourceClaim], others: Sequence[o.AllocationResult]
) -> AllocationRequest:
    taken = AllocatedState.from_claims(o.ResourceClaim(status=o.ResourceClaimStatus(allocation=r)) for r in others)
    inventory = request.index.node_inventory(node, request.in_flight.merge(taken))
    node_obj = request.index.nodes_by_name.get(node) or request.index.inventory.node(node)
    return AllocationRequest(claims=tuple(claims), node=node_obj, inventory=inventory, gates=request.gates)
