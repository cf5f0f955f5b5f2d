"""The allocation problem of one node, prepared for the CP-SAT model: data, no solver.

API:
- ``prepare_problem(request, *, cel, relaxed=False) -> Problem``: upstream's pre-search phases
  (``model.pools.gather_pools``, ``model.matching.prepare_claims``, raising ``AllocationError``
  with upstream's wording), then for every request or subrequest the devices it may use.
- ``Problem``: claims (``ClaimPlan``), candidate devices in upstream's search order, and per
  option (a request, or one subrequest; ``option(key)`` by ``RequestKey``) its eligible
  candidates; ``deferred_errors`` lists the errors upstream only raises when its search reaches
  the pair (see below), and ``search_dependent`` says whether upstream's verdict may depend on
  its search order.
- ``Candidate``: one usable device with its position in search order.
- ``OptionData``: one request or subrequest and the candidates it may use; ``possible`` is
  False when the option can never be satisfied (an ``All`` request whose devices are not all
  usable, a count above the eligible devices or the 32-device limit).
- ``Rule``: one instance of a DRA rule that can keep claims off a node (a request's count, a
  selector, a device in use, a taint, a claim constraint, a shared counter, a device's
  consumable capacity), named by domain keys. A *relaxed* problem (``relaxed=True``, what
  explain asks for) keeps the pairs such rules forbid as candidates and records, per option,
  which rules block which device (``OptionData.blocked``): the CP-SAT model then guards every
  rule instance with one switch literal (``model.cpsat.model``).
- ``Choices``: what an allocator chose, per request and option, by ``RequestKey``.
- ``attribute_elements(attr, *, list_types) -> frozenset | None``: the typed values of an
  attribute as constraints compare them.

Why separate from the model: every check that does not depend on other choices runs here,
once, in plain Python (selectors through the CEL match cache, taints, in-use, static capacity,
constraint attributes), so the model only gets variables for pairs that can really be chosen.

Deferred errors: upstream evaluates a selector on a device only when its depth-first search
reaches that pair, so a CEL runtime error on a device it never reaches does not stop it. A
complete model cannot know what the search would have reached; such errors are recorded here
(the pair is simply not eligible) and the front door (``model.allocators``) asks the faithful
search whether upstream would have stopped on one of them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationRequest
from dra_solver.model.capacity import (
    capacity_fits,
    consumed_amount,
    consumed_capacity,
    violates_policy,
)
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.cluster import AllocatedState, DeviceID
from dra_solver.model.errors import AllocationError
from dra_solver.model.matching import (
    ALLOCATION_RESULTS_MAX_SIZE,
    ClaimPlan,
    ConstraintSpec,
    Matcher,
    RequestKey,
    RequestView,
    claim_label,
    lookup_attribute,
    prepare_claims,
)
from dra_solver.model.pools import DeviceParseCache, Pool, PoolDevice, gather_pools
from dra_solver.model.quantity import Quantity
from dra_solver.model.taints import BLOCKING_EFFECTS, taint_prevents_allocation, tolerates

Element = tuple[str, Any]
"""A typed attribute value as constraints compare it: ``("int", 3)``, ``("string", "a")``."""

RuleKind = Literal[
    "request", "selector", "class-selector", "in-use", "taint", "constraint", "counter", "capacity"
]


@dataclass(frozen=True, slots=True)
class Rule:
    """One instance of a DRA rule in one problem. ``subject`` by kind:

    - ``request``: ``(RequestKey,)``: the request or subrequest gets its count (or, ``All``,
      every matching device);
    - ``selector``: ``(RequestKey, i)``: the request's selector ``#i``;
    - ``class-selector``: ``(class name, i)``: the device class's selector ``#i``;
    - ``in-use``: ``(DeviceID,)``: the device is allocated already;
    - ``taint``: ``(DeviceID, i)``: the device's ``i``-th effective taint (not tolerated);
    - ``constraint``: ``(claim index, constraint index)``: matchAttribute/distinctAttribute;
    - ``counter``: ``(pool id, counter set, counter)``: a shared counter's amount;
    - ``capacity``: ``(DeviceID, capacity name)``: a device's consumable capacity.
    """

    kind: RuleKind
    subject: tuple[Any, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """A device of a usable pool, in the order upstream's search visits devices."""

    index: int
    """Position in upstream's search order (0 = visited first)."""
    device: PoolDevice
    pool: Pool
    multi: bool
    """allowMultipleAllocations with ConsumableCapacity on: shares instead of exclusive use."""

    @property
    def id(self) -> DeviceID:
        return self.device.id


@dataclass(slots=True, eq=False)
class OptionData:
    """One request (``exactly``) or one subrequest and the candidates it may use."""

    view: RequestView
    candidates: list[Candidate]
    possible: bool = True
    consumed: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)
    """Per shareable candidate: what one allocation consumes of each of its capacities."""
    blocked: dict[DeviceID, tuple[Rule, ...]] = field(default_factory=dict)
    """Relaxed problems: the rules that each forbid this option a candidate."""
    members: tuple[DeviceID, ...] = ()
    """Relaxed problems, ``All`` options: the devices it must take (they pass its selectors)."""

    @property
    def key(self) -> RequestKey:
        return self.view.key


@dataclass(slots=True, eq=False)
class Problem:
    request: AllocationRequest
    plans: list[ClaimPlan]
    pools: list[Pool]
    candidates: list[Candidate]
    options: list[list[list[OptionData]]]
    """``options[claim][request]``: the request's options in priority order."""
    allocated: AllocatedState
    deferred_errors: list[AllocationError] = field(default_factory=list)
    search_dependent: bool = False
    """Upstream's verdict may depend on its search order (an ``All`` request under a claim
    constraint may make it stop with an error); ``deferred_errors`` implies it too."""
    in_use_before: frozenset[DeviceID] = frozenset()
    """Devices allocated before this attempt (exclusively, shared or with consumed capacity):
    their counters are already taken."""
    relaxed: bool = False
    """Prepared for explain: pairs forbidden by a ``Rule`` are kept (see ``OptionData.blocked``)."""
    selector_errors: dict[tuple[Rule, DeviceID], str] = field(default_factory=dict)
    """Relaxed problems: why a selector could not be evaluated on a device."""
    _by_key: dict[RequestKey, OptionData] = field(default_factory=dict)

    @property
    def has_invalid_pool(self) -> bool:
        return any(pool.invalid for pool in self.pools)

    def all_options(self) -> list[OptionData]:
        return [opt for claim in self.options for req in claim for opt in req]

    def option(self, key: RequestKey) -> OptionData:
        """The option (request or subrequest) of that key."""
        if not self._by_key:
            self._by_key.update((opt.key, opt) for opt in self.all_options())
        return self._by_key[key]


@dataclass(frozen=True, slots=True)
class Choices:
    """What an allocator chose: for every request (``RequestKey(claim, request)``) the option
    that serves it, and for every option its devices in search order."""

    selected: Mapping[RequestKey, RequestKey]
    devices_of: Mapping[RequestKey, tuple[Candidate, ...]]

    def selected_option(self, claim: int, request: int) -> RequestKey:
        return self.selected[RequestKey(claim, request)]

    def devices(self, option: RequestKey) -> tuple[Candidate, ...]:
        return self.devices_of.get(option, ())


def request_of(option: RequestKey) -> RequestKey:
    """The request an option belongs to (itself for an ``exactly`` request)."""
    return RequestKey(option.claim, option.request)


def prepare_problem(request: AllocationRequest, *, cel: CelEnvironment, relaxed: bool = False) -> Problem:
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
    candidates, by_id = _candidates(pools, gates.consumable_capacity, request.device_cache)
    in_use = allocated.ids()
    problem = Problem(
        request, plans, pools, candidates, [], allocated, in_use_before=in_use, relaxed=relaxed
    )
    for plan in plans:
        claim_options: list[list[OptionData]] = []
        for req in plan.requests:
            if relaxed:
                claim_options.append([_relaxed_option(problem, plan, view, matcher=matcher) for view in req.options])
            else:
                claim_options.append([_option(problem, plan, view, matcher=matcher, by_id=by_id) for view in req.options])
        problem.options.append(claim_options)
    return problem


def _candidates(
    pools: Sequence[Pool], consumable: bool, cache: DeviceParseCache | None
) -> tuple[list[Candidate], Mapping[DeviceID, Candidate]]:
    """The devices of the usable pools in search order, and by ID. Candidates are frozen and
    read nothing but their pool and device: ``cache`` keeps them by the identity of the pool
    objects (``DeviceParseCache.gathered`` hands out the same ones for one node of one
    snapshot) and the ConsumableCapacity gate, so a node's candidates are built once."""
    key = (consumable, *map(id, pools))
    known = cache.candidate_lists.get(key) if cache is not None else None
    if known is not None and len(known[0]) == len(pools) and all(a is b for a, b in zip(known[0], pools, strict=True)):
        return list(known[1]), known[2]
    candidates: list[Candidate] = []
    by_id: dict[DeviceID, Candidate] = {} if cache is None else CandidatesById()
    for pool in pools:
        if not pool.usable:
            continue
        for device in pool.devices:
            multi = consumable and device.allow_multiple_allocations
            candidate = Candidate(len(candidates), device, pool, multi)
            candidates.append(candidate)
            by_id[device.id] = candidate
    if cache is not None:
        kept = cache.candidate_lists
        if len(kept) >= CANDIDATE_LISTS:
            kept.clear()
        # The entry holds the pools, so their identities are not reused while it lives.
        kept[key] = (tuple(pools), tuple(candidates), by_id)
    return candidates, by_id


class CandidatesById(dict[DeviceID, Candidate]):
    """A kept candidate list's devices by ID, with the list's screens (``_screened``): they
    live and go with the list."""

    __slots__ = ("screens",)

    def __init__(self) -> None:
        super().__init__()
        self.screens: dict[int, tuple[array[int], frozenset[int]]] = {}
        """Per selectors number (``Matcher.selection_key``)."""


CANDIDATE_LISTS = 10_000
"""Candidate lists kept (``DeviceParseCache.candidate_lists``): one per node and gate; beyond,
the memo starts over."""


def _option(
    problem: Problem,
    plan: ClaimPlan,
    view: RequestView,
    *,
    matcher: Matcher,
    by_id: Mapping[DeviceID, Candidate],
) -> OptionData:
    gates = problem.request.gates
    allocated = problem.allocated
    constraints = [c for c in plan.constraints if c.applies_to(view.base_name, view.sub_name)]
    data = OptionData(view, [])
    memo = problem.request.device_cache.whole_capacity_fits if problem.request.device_cache is not None else None

    def usable(device: PoolDevice) -> bool:
        """Checks after selection, in upstream's order (allocateDevice)."""
        if not gates.partitionable_devices and device.counters:
            return False
        return not (
            gates.device_taints and taint_prevents_allocation(device.taints, view.tolerations)
        )

    if view.is_all:
        # The devices are fixed (listed by prepare_claims); all of them must be usable.
        devices = view.all_devices or ()
        if not devices:
            data.possible = False
        for device in devices:
            candidate = by_id.get(device.id)
            if candidate is None or (not view.admin_access and device.id in allocated.devices):
                data.possible = False
                continue
            if not usable(device):
                data.possible = False
                continue
            data.candidates.append(candidate)
        if constraints:
            # Upstream adds an All request's devices to the claim's constraints one by one and
            # treats a refusal as an error, whatever other requests chose before: the verdict
            # depends on its search, so the faithful search settles it (see model.allocators).
            problem.search_dependent = True
            every = [by_id[d.id] for d in devices if d.id in by_id]
            if not _all_within_constraints(problem, plan, view, every, constraints):
                data.possible = False
    else:
        # The checks of every candidate, with what they read looked up once (one pass per
        # option over every device of the node: the bulk of preparing a one-device claim).
        taken = frozenset() if view.admin_access else allocated.devices
        selectable = matcher.selectable
        consumable = gates.consumable_capacity
        consumed = allocated.capacity
        eligible = data.candidates
        # Screened: the checks that read nothing in use were done once for this node and
        # selectors, and only the candidates that passed them remain (in search order); the
        # ``live`` ones, and every candidate when there is no screen, are checked in full here.
        screened = None if constraints or view.tolerations else _screened(problem, view, matcher, usable, by_id)
        order, live = screened if screened is not None else (range(len(problem.candidates)), None)
        candidates = problem.candidates
        for i in order:
            candidate = candidates[i]
            device = candidate.device
            # In use is checked before selectors, so upstream never evaluates those pairs.
            if device.id in taken:
                continue
            if live is None or i in live:
                try:
                    if not selectable(view, device):
                        continue
                except AllocationError as err:
                    problem.deferred_errors.append(err)
                    continue
                if not usable(device):
                    continue
                if constraints and any(not _has_elements(device, c, gates.list_type_attributes) for c in constraints):
                    continue
            if consumable and not _capacity_fits(view, device, consumed.get(device.id), memo):
                continue
            eligible.append(candidate)
        if view.count > min(len(data.candidates), ALLOCATION_RESULTS_MAX_SIZE):
            data.possible = False
    _add_consumed(problem, data)
    return data


SCREENS_PER_LIST = 8
"""Screens kept per candidate list (one per request shape seen on the node); beyond, they start
over."""


def _screened(
    problem: Problem, view: RequestView, matcher: Matcher, usable: Callable[[PoolDevice], bool], by_id: Mapping[DeviceID, Candidate]
) -> tuple[array[int], frozenset[int]] | None:
    """The candidates ``view`` may take on this node whatever is in use, by index in search
    order, and those whose verdict must be reached on every call (a device whose selection
    reads the node, has no CEL view, or raised: errors name the claim, and are reported as
    they arise). Kept with the node's candidate list (``CandidatesById``, the same object for
    one node of one snapshot) per selectors number; None for a list not kept. Selection, gates
    and taints without tolerations read only the device and the selectors: the same verdicts
    as the full check, which the caller still makes for devices in use and capacity."""
    if not isinstance(by_id, CandidatesById):
        return None
    number = matcher.selection_key(view)
    if number is None:
        return None
    known = by_id.screens.get(number)
    if known is not None:
        return known
    order = array("I")
    live: list[int] = []
    for i, candidate in enumerate(problem.candidates):
        device = candidate.device
        if device.per_device_node_selection or device.cel is None:
            order.append(i)
            live.append(i)
            continue
        try:
            if not matcher.selectable(view, device) or not usable(device):
                continue
        except AllocationError:
            order.append(i)
            live.append(i)
            continue
        order.append(i)
    screened = (order, frozenset(live))
    if len(by_id.screens) >= SCREENS_PER_LIST:
        by_id.screens.clear()
    by_id.screens[number] = screened
    return screened


def _capacity_fits(
    view: RequestView,
    device: PoolDevice,
    allocated: Mapping[str, Quantity] | None,
    memo: dict[PoolDevice, bool] | None,
) -> bool:
    """``capacity_fits`` for ``view`` on ``device``. With no capacity requested and none of
    the device consumed the verdict reads nothing but the device's capacities: ``memo`` keeps
    it per device object (held by the entry) across attempts."""
    if memo is None or view.capacity_requests or allocated:
        return capacity_fits(view.capacity_requests, device.capacity, allocated=allocated)
    known = memo.get(device)
    if known is None:
        known = capacity_fits(None, device.capacity)
        if len(memo) > 100_000:
            memo.clear()
        memo[device] = known
    return known


def _relaxed_option(problem: Problem, plan: ClaimPlan, view: RequestView, *, matcher: Matcher) -> OptionData:
    """The option with every candidate it could have, and for each the rules that forbid it.

    Kept out for good (no rule to switch off): devices this node does not reach through their
    own node selector, and devices with binding conditions or counters while the gate is off.
    """
    gates = problem.request.gates
    allocated = problem.allocated
    constraints = [
        (k, c) for k, c in enumerate(plan.constraints) if c.applies_to(view.base_name, view.sub_name)
    ]
    data = OptionData(view, [])
    if view.is_all:
        data.members = tuple(d.id for d in view.all_devices or ())
    for candidate in problem.candidates:
        device = candidate.device
        if not device.node_match:
            continue
        if not gates.device_binding_and_status and device.device.binding_conditions:
            continue
        if not gates.partitionable_devices and device.counters:
            continue
        rules: list[Rule] = []
        if not view.admin_access and device.id in allocated.devices:
            rules.append(Rule("in-use", (device.id,)))
        for rejection in matcher.rejecting_selectors(view, device):
            if rejection.from_class:
                assert view.device_class is not None
                rule = Rule("class-selector", (view.device_class.name, rejection.index))
            else:
                rule = Rule("selector", (view.key, rejection.index))
            rules.append(rule)
            if rejection.error:
                problem.selector_errors.setdefault((rule, device.id), rejection.error)
        if gates.consumable_capacity:
            rules.extend(_capacity_rules(view, candidate, allocated))
        if gates.device_taints:
            tolerations = view.tolerations or ()
            for i, taint in enumerate(device.taints):
                if taint.effect in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
                    rules.append(Rule("taint", (device.id, i)))
        for k, constraint in constraints:
            if not _has_elements(device, constraint, gates.list_type_attributes):
                rules.append(Rule("constraint", (plan.index, k)))
        data.candidates.append(candidate)
        if rules:
            data.blocked[device.id] = tuple(rules)
    _add_consumed(problem, data)
    return data


def _capacity_rules(view: RequestView, candidate: Candidate, allocated: AllocatedState) -> list[Rule]:
    """Relaxed problems: the capacity rules that keep a request from a device: a requested
    capacity the device does not define, an amount its request policy does not allow, and (for
    an exclusive device) an amount above what is left. Shareable devices sum their shares in
    the model, under the same rule."""
    requests = view.capacity_requests
    capacities = candidate.device.capacity
    rules = [Rule("capacity", (candidate.id, name)) for name in sorted(requests or {}) if name not in capacities]
    already = allocated.capacity.get(candidate.id) or {}
    for name in sorted(capacities):
        spec = capacities[name]
        amount = consumed_amount(requests.get(name) if requests else None, spec)
        if violates_policy(amount, spec):
            rules.append(Rule("capacity", (candidate.id, name)))
            continue
        if candidate.multi:
            continue
        total = already[name].add(amount) if name in already else amount
        if total.cmp(spec.value) > 0:
            rules.append(Rule("capacity", (candidate.id, name)))
    return rules


def _add_consumed(problem: Problem, data: OptionData) -> None:
    if problem.request.gates.consumable_capacity:
        for candidate in data.candidates:
            if candidate.multi:
                data.consumed[candidate.id] = consumed_capacity(
                    data.view.capacity_requests, candidate.device.capacity
                )


def _has_elements(device: PoolDevice, constraint: ConstraintSpec, list_types: bool) -> bool:
    attr = lookup_attribute(device, constraint.attribute)
    return attr is not None and attribute_elements(attr, list_types=list_types) is not None


def _all_within_constraints(
    problem: Problem,
    plan: ClaimPlan,
    view: RequestView,
    candidates: Sequence[Candidate],
    constraints: Sequence[ConstraintSpec],
) -> bool:
    """Whether an ``All`` request's own devices fit its constraints.

    Upstream treats a device it must take but cannot add as a broken claim (an error), not as
    "does not fit". Whether its search gets that far depends on earlier choices, so the error
    is deferred and the option is impossible.
    """
    list_types = problem.request.gates.list_type_attributes
    for constraint in constraints:
        common: frozenset[Element] | None = None
        seen: list[frozenset[Element]] = []
        for candidate in candidates:
            attr = lookup_attribute(candidate.device, constraint.attribute)
            elements = attribute_elements(attr, list_types=list_types) if attr else None
            if elements is None:
                ok = False
            elif constraint.kind == "match":
                common = elements if common is None else common & elements
                ok = bool(common)
            else:
                ok = all(not (elements & other) for other in seen) and not (
                    seen and (is_opaque(elements) or any(is_opaque(other) for other in seen))
                )
                seen.append(elements)
            if not ok:
                problem.deferred_errors.append(
                    AllocationError(
                        f"claim {claim_label(plan.claim)}, request {view.name}: cannot add device "
                        f"{candidate.id} because a claim constraint would not be satisfied"
                    )
                )
                return False
    return True


def attribute_elements(attr: o.DeviceAttribute, *, list_types: bool) -> frozenset[Element] | None:
    """The typed values constraints compare: with ListTypeAttributes, a non-empty list or the
    scalar; without it, only scalars (a list-only attribute becomes an ``OPAQUE`` value equal to
    nothing else). None when the attribute has no usable value."""
    if list_types:
        for kind, values in (
            ("int", attr.ints),
            ("bool", attr.bools),
            ("string", attr.strings),
            ("version", attr.versions),
        ):
            if values:
                return frozenset((kind, v) for v in values)
    for kind, value in (
        ("string", attr.string),
        ("int", attr.int_),
        ("bool", attr.bool_),
        ("version", attr.version),
    ):
        if value is not None:
            return frozenset(((kind, value),))
    if not list_types and (attr.ints or attr.bools or attr.strings or attr.versions):
        return frozenset(((OPAQUE, id(attr)),))
    return None


OPAQUE = "opaque"
"""The kind of a list-only attribute without ListTypeAttributes: upstream's scalar comparison
cannot compare it with anything, so its device only fits a constraint as the sole member."""


def is_opaque(elements: frozenset[Element]) -> bool:
    return any(kind == OPAQUE for kind, _ in elements)
