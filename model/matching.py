"""Requests as the allocators see them, and whether a device may serve a request.

API:
- ``RequestKey(claim, request, subrequest=None)``: a request (``subrequest is None``) or one
  subrequest of a ``firstAvailable`` request, by indices. ``sort_key`` orders them.
- ``RequestView``: one request or subrequest with everything the search reads (class, mode,
  count, selectors, adminAccess, tolerations, parsed capacity requests) and, after
  ``prepare_claims``, ``num_devices`` and for ``All`` mode the fixed ``all_devices``.
  ``ref`` is the name results use: ``req`` or ``req/sub``.
- ``RequestPlan``: one entry of ``spec.devices.requests`` with its options (one view for
  ``exactly``, one per subrequest for ``firstAvailable``, in priority order).
- ``ConstraintSpec``: a claim constraint (``match`` or ``distinct``, attribute, request names).
- ``ClaimPlan``: a claim's requests and constraints, and the lower bound of its device count.
- ``prepare_claims(claims, pools, *, inventory, gates, matcher, allocated) -> list[ClaimPlan]``:
  upstream's pre-search phase in upstream's order, raising ``AllocationError`` with upstream's
  wording: disabled features (PrioritizedList, ConsumableCapacity, AdminAccess), empty
  selectors, missing/unknown DeviceClass, unknown allocation mode, ``All`` over an incomplete or
  invalid pool, the 32-results limit, unknown constraint types; CEL errors met while listing
  ``All`` devices.
- ``Matcher(cel, *, gates, node, memo=None)``: ``selectable(view, device) -> bool`` is upstream's
  ``isSelectable`` (binding-condition gate, class selectors then request selectors through
  CEL, per-device node selection), cached per (request, device) and, with ``memo`` (the
  caller's ``DeviceParseCache``), per (gates, selectors, device CEL view) across attempts
  (verdicts reached without an error only); CEL problems raise
  ``AllocationError`` (``class X: selector #i on device d/p/n: CEL runtime error: ...``).
  ``rejecting_selectors(view, device) -> list[SelectorRejection]``: each selector that keeps
  the device from the request, evaluated on its own (explain switches them off one by one).
- ``device_eligible(view, device, *, matcher, gates, allocated) -> bool``: every check that does
  not depend on other choices of the same attempt (selectable, taints, counters gate, capacity
  given committed use, in use by committed allocations). For allocators that build a model.
- ``lookup_attribute(device, name) -> o.DeviceAttribute | None``: a fully qualified attribute,
  also found under its bare name when the domain is the device's driver.
- ``claim_label(claim)``: how upstream names a claim in messages (``ns/name``).

Why: which devices are candidates for which request, and which inputs are fatal errors rather
than "does not fit", must be identical for every allocator and the validator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from dra_solver.model import objects as o
from dra_solver.model.capacity import capacity_fits
from dra_solver.model.cel import (
    CelCompileError,
    CelEnvironment,
    CelRuntimeError,
    enhance_runtime_error,
)
from dra_solver.model.cluster import AllocatedState, DeviceID, Inventory
from dra_solver.model.errors import AllocationError
from dra_solver.model.features import FeatureGates
from dra_solver.model.pools import DeviceParseCache, Pool, PoolDevice
from dra_solver.model.quantity import Quantity, parse_quantity
from dra_solver.model.taints import taint_prevents_allocation

ALLOCATION_RESULTS_MAX_SIZE = 32
"""``resourceapi.AllocationResultsMaxSize``: devices per claim."""


def claim_label(claim: o.ResourceClaim) -> str:
    """``klog.KObj`` of a claim: ``namespace/name``, or ``name`` without a namespace."""
    return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name


@dataclass(frozen=True, slots=True)
class RequestKey:
    """Indices of a request (``subrequest is None``) or of one subrequest."""

    claim: int
    request: int
    subrequest: int | None = None

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (self.claim, self.request, -1 if self.subrequest is None else self.subrequest)

    def __str__(self) -> str:
        sub = "" if self.subrequest is None else f"/{self.subrequest}"
        return f"{self.claim}/{self.request}{sub}"


@dataclass(frozen=True, slots=True, eq=False)
class RequestView:
    """One request or subrequest, read once from the claim."""

    key: RequestKey
    claim: o.ResourceClaim
    name: str
    """This request's own name (the subrequest's name for a subrequest)."""
    parent: str | None
    """The request's name when this is a subrequest."""
    device_class_name: str
    selectors: tuple[o.DeviceSelector, ...]
    allocation_mode: str
    count: int
    admin_access: bool
    has_admin_access: bool
    tolerations: tuple[o.DeviceToleration, ...] | None
    capacity_requests: Mapping[str, Quantity] | None
    device_class: o.DeviceClass | None = None
    num_devices: int = 0
    all_devices: tuple[PoolDevice, ...] | None = None

    @property
    def ref(self) -> str:
        """The name results and configs use: ``req`` or ``req/sub``."""
        return f"{self.parent}/{self.name}" if self.parent is not None else self.name

    @property
    def base_name(self) -> str:
        return self.parent if self.parent is not None else self.name

    @property
    def sub_name(self) -> str:
        return self.name if self.parent is not None else ""

    @property
    def is_all(self) -> bool:
        return self.allocation_mode == "All"


@dataclass(frozen=True, slots=True, eq=False)
class RequestPlan:
    """One entry of ``spec.devices.requests``: its options in priority order."""

    index: int
    name: str
    options: tuple[RequestView, ...]
    first_available: bool


ConstraintKind = Literal["match", "distinct"]


@dataclass(frozen=True, slots=True)
class ConstraintSpec:
    kind: ConstraintKind
    attribute: str
    requests: frozenset[str]
    """Request names (``req`` or ``req/sub``) it applies to; empty = every request."""

    def applies_to(self, base_name: str, sub_name: str = "") -> bool:
        """Upstream's name test: the request, or (for a subrequest) ``req/sub`` too."""
        if not self.requests:
            return True
        if base_name in self.requests:
            return True
        return bool(sub_name) and f"{base_name}/{sub_name}" in self.requests


@dataclass(frozen=True, slots=True, eq=False)
class ClaimPlan:
    index: int
    claim: o.ResourceClaim
    requests: tuple[RequestPlan, ...]
    constraints: tuple[ConstraintSpec, ...]
    min_devices: int


def _parse_capacity_requests(
    req: o.ExactDeviceRequest | o.DeviceSubRequest,
) -> Mapping[str, Quantity] | None:
    if req.capacity is None:
        return None
    return {name: parse_quantity(text) for name, text in (req.capacity.requests or {}).items()}


def _exact_view(key: RequestKey, claim: o.ResourceClaim, request: o.DeviceRequest) -> RequestView:
    exact = request.exactly or o.ExactDeviceRequest()
    return RequestView(
        key=key,
        claim=claim,
        name=request.name,
        parent=None,
        device_class_name=exact.device_class_name,
        selectors=tuple(exact.selectors or ()),
        allocation_mode=exact.allocation_mode or "",
        count=exact.count or 0,
        admin_access=bool(exact.admin_access),
        has_admin_access=exact.admin_access is not None,
        tolerations=tuple(exact.tolerations) if exact.tolerations is not None else None,
        capacity_requests=_parse_capacity_requests(exact),
    )


def _sub_view(
    key: RequestKey, claim: o.ResourceClaim, request: o.DeviceRequest, sub: o.DeviceSubRequest
) -> RequestView:
    return RequestView(
        key=key,
        claim=claim,
        name=sub.name,
        parent=request.name,
        device_class_name=sub.device_class_name,
        selectors=tuple(sub.selectors or ()),
        allocation_mode=sub.allocation_mode or "",
        count=sub.count or 0,
        admin_access=False,
        has_admin_access=False,
        tolerations=tuple(sub.tolerations) if sub.tolerations is not None else None,
        capacity_requests=_parse_capacity_requests(sub),
    )


# --- selector matching -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SelectorRejection:
    """A selector that rejects a device: the class's (``from_class``) or the request's, by index;
    ``error`` is why it could not be evaluated ("" when it evaluated to false)."""

    from_class: bool
    index: int
    expression: str
    error: str = ""


class Matcher:
    """Upstream ``isSelectable`` with its per-(request, device) cache.

    One instance per allocation attempt: the cache is keyed by request indices, which only mean
    something for one list of claims.
    """

    def __init__(self, cel: CelEnvironment, *, gates: FeatureGates, node: o.Node, memo: DeviceParseCache | None = None) -> None:
        self._cel = cel
        self._gates = gates
        self._node = node
        self._cache: dict[tuple[RequestKey, DeviceID], bool] = {}
        self._compiled: dict[str, Any] = {}
        self._memo = memo
        self._memo_keys: dict[int, tuple[RequestView, int | None]] = {}

    def selectable(self, view: RequestView, device: PoolDevice) -> bool:
        if not self._gates.device_binding_and_status and device.device.binding_conditions:
            return False
        # Across attempts (``memo``): the same selectors on the same device view give the same
        # verdict; only verdicts reached without an error are kept, and per-device node
        # selection (which reads the node) is always evaluated.
        memo = self._memo
        selectors = self._memo_key(memo, view) if memo is not None and device.cel is not None and not device.per_device_node_selection else None
        if selectors is not None and memo is not None and device.cel is not None:
            known = memo.selection(selectors, device.cel)
            if known is not None:
                return known
        cache_key = (view.key, device.id)
        cached = self._cache.get(cache_key)
        if cached is not None:
            return cached
        result = self._evaluate(view, device)
        self._cache[cache_key] = result
        if selectors is not None and memo is not None and device.cel is not None:
            memo.remember_selection(selectors, device.cel, result)
        return result

    def selection_key(self, view: RequestView) -> int | None:
        """The number under which selection verdicts for ``view``'s selectors are kept across
        attempts (None without a memo, or with a selector that has no CEL): equal numbers,
        equal verdicts on every device that does not read the node."""
        return self._memo_key(self._memo, view) if self._memo is not None else None

    def _memo_key(self, memo: DeviceParseCache, view: RequestView) -> int | None:
        """The number ``memo`` gives the gates and the selectors' expressions of ``view``
        (None: a selector without CEL, which is an error every time). Kept per view object
        (held, so its identity is not reused during the attempt)."""
        known = self._memo_keys.get(id(view))
        if known is not None and known[0] is view:
            return known[1]
        number: int | None = None
        groups = [view.device_class.spec.selectors or () if view.device_class is not None else None, view.selectors]
        if all(s.cel is not None for g in groups if g is not None for s in g):
            number = memo.selector_id(
                (self._gates, *(None if g is None else tuple(s.cel.expression for s in g if s.cel is not None) for g in groups))
            )
        self._memo_keys[id(view)] = (view, number)
        return number

    def rejecting_selectors(self, view: RequestView, device: PoolDevice) -> list[SelectorRejection]:
        """Every selector that keeps ``device`` from ``view``, each evaluated on its own (no
        short cut, errors as text): what explain switches off one at a time. The class's
        selectors first, then the request's, in order."""
        out: list[SelectorRejection] = []
        groups: list[tuple[bool, Sequence[o.DeviceSelector]]] = []
        if view.device_class is not None:
            groups.append((True, view.device_class.spec.selectors or ()))
        groups.append((False, view.selectors))
        for from_class, selectors in groups:
            for i, selector in enumerate(selectors):
                if selector.cel is None:
                    continue
                verdict = self._verdict(selector.cel.expression, device)
                if verdict is not True:
                    out.append(SelectorRejection(from_class, i, selector.cel.expression, verdict or ""))
        return out

    def _verdict(self, expression: str, device: PoolDevice) -> bool | str:
        """True (matches), False (does not) or why it cannot be evaluated."""
        if device.cel is None:
            return f"device cannot be evaluated: {device.cel_error}"
        try:
            compiled = self._compiled.get(expression)
            if compiled is None:
                compiled = self._compiled[expression] = self._cel.compile(expression)
            return bool(self._cel.matches(compiled, device.cel))
        except Exception as err:  # any failure makes the device unusable for this request
            return str(err)

    def _evaluate(self, view: RequestView, device: PoolDevice) -> bool:
        if view.device_class is not None and not self._selectors_match(
            view, device, view.device_class.spec.selectors or (), from_class=True
        ):
            return False
        if not self._selectors_match(view, device, view.selectors, from_class=False):
            return False
        if device.per_device_node_selection:
            if device.node_error:
                raise AllocationError(device.node_error)
            if not device.node_match:
                return False
        return True

    def _selectors_match(
        self,
        view: RequestView,
        device: PoolDevice,
        selectors: Sequence[o.DeviceSelector],
        *,
        from_class: bool,
    ) -> bool:
        def owner() -> str:
            if from_class and view.device_class is not None:
                return f"class {view.device_class.name}"
            return f"claim {claim_label(view.claim)}"

        for i, selector in enumerate(selectors):
            expression = selector.cel.expression if selector.cel is not None else ""
            compiled = self._compiled.get(expression)
            if compiled is None:
                if selector.cel is None:
                    raise AllocationError(
                        f"{owner()}: selector #{i}: CEL expression empty (unsupported selector type?)"
                    )
                try:
                    compiled = self._cel.compile(expression)
                except CelCompileError as err:
                    raise AllocationError(
                        f"{owner()}: selector #{i}: CEL compile error: {err}"
                    ) from err
                self._compiled[expression] = compiled
            if device.cel_error or device.cel is None:
                reason = device.cel_error or "device not available to CEL"
                raise AllocationError(
                    f"{owner()}: selector #{i} on device {device.id}: CEL runtime error: {reason}"
                )
            try:
                matched = self._cel.matches(compiled, device.cel)
            except CelRuntimeError as err:
                raise AllocationError(
                    f"{owner()}: selector #{i} on device {device.id}: CEL runtime error: "
                    f"{enhance_runtime_error(str(err))}"
                ) from err
            if not matched:
                return False
        return True


# --- the pre-search phase -------------------------------------------------------------------


def prepare_claims(
    claims: Sequence[o.ResourceClaim],
    pools: Sequence[Pool],
    *,
    inventory: Inventory,
    gates: FeatureGates,
    matcher: Matcher,
    allocated: AllocatedState,
) -> list[ClaimPlan]:
    """Upstream's checks before the search, in upstream's order (errors are fatal).

    For each claim: each request (gates, then each option: selectors present, adminAccess gate,
    class, mode; ``All`` lists its devices now), then the claim's device-count limit, then its
    constraints.
    """
    plans: list[ClaimPlan] = []
    for claim_index, claim in enumerate(claims):
        label = claim_label(claim)
        request_plans: list[RequestPlan] = []
        min_devices = 0
        for request_index, request in enumerate(claim.spec.devices.requests or []):
            has_subs = bool(request.first_available)
            if not gates.prioritized_list and has_subs:
                raise AllocationError(
                    f"claim {label}, request {request.name}: has subrequests, but the DRAPrioritizedList feature is disabled"
                )
            if not gates.consumable_capacity:
                if request.exactly is not None and request.exactly.capacity is not None:
                    raise AllocationError(
                        f"claim {label}, request {request.name}: has capacity requests, "
                        "but the DRAConsumableCapacity feature is disabled"
                    )
                for sub in request.first_available or []:
                    if sub.capacity is not None:
                        raise AllocationError(
                            f"claim {label}, subrequest {sub.name}: has capacity requests, "
                            "but the DRAConsumableCapacity feature is disabled"
                        )
            views: list[RequestView]
            if has_subs:
                views = [
                    _sub_view(RequestKey(claim_index, request_index, i), claim, request, sub)
                    for i, sub in enumerate(request.first_available or [])
                ]
            else:
                views = [_exact_view(RequestKey(claim_index, request_index), claim, request)]
            checked = tuple(
                _validate_view(
                    view,
                    pools,
                    inventory=inventory,
                    gates=gates,
                    matcher=matcher,
                    allocated=allocated,
                )
                for view in views
            )
            # Per request, as upstream v0.37.2 checks it: before the later requests are
            # validated, and compared (not summed) so that a huge count cannot overflow.
            fewest = min(v.num_devices for v in checked)
            if fewest > ALLOCATION_RESULTS_MAX_SIZE - min_devices:
                raise AllocationError(
                    f"claim {label}, request {request.name}: adding {fewest} devices exceeds the claim "
                    f"limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_devices} already accounted for"
                )
            min_devices += fewest
            request_plans.append(RequestPlan(request_index, request.name, checked, has_subs))
        constraints: list[ConstraintSpec] = []
        for i, constraint in enumerate(claim.spec.devices.constraints or []):
            names = frozenset(constraint.requests or ())
            if constraint.match_attribute is not None:
                constraints.append(ConstraintSpec("match", constraint.match_attribute, names))
            elif constraint.distinct_attribute is not None:
                constraints.append(ConstraintSpec("distinct", constraint.distinct_attribute, names))
            else:
                raise AllocationError(
                    f"claim {label}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
        plans.append(
            ClaimPlan(claim_index, claim, tuple(request_plans), tuple(constraints), min_devices)
        )
    return plans


def _validate_view(
    view: RequestView,
    pools: Sequence[Pool],
    *,
    inventory: Inventory,
    gates: FeatureGates,
    matcher: Matcher,
    allocated: AllocatedState,
) -> RequestView:
    label = claim_label(view.claim)
    for i, selector in enumerate(view.selectors):
        if selector.cel is None:
            raise AllocationError(
                f"claim {label}, request {view.name}, selector #{i}: CEL expression empty (unsupported selector type?)"
            )
    if not gates.admin_access and view.has_admin_access:
        raise AllocationError(
            f"claim {label}, request {view.name}: admin access is requested, but the feature is disabled"
        )
    if not view.device_class_name:
        raise AllocationError(
            f"claim {label}, request {view.name}: missing device class name (unsupported request type?)"
        )
    device_class = inventory.device_class(view.device_class_name)
    if device_class is None:
        raise AllocationError(
            f"claim {label}, request {view.name}: could not retrieve device class {view.device_class_name}: "
            f'deviceclass.resource.k8s.io "{view.device_class_name}" not found'
        )
    view = replace(view, device_class=device_class)
    if view.allocation_mode == "ExactCount":
        return replace(view, num_devices=view.count)
    if view.allocation_mode != "All":
        raise AllocationError(
            f"claim {label}, request {view.name}: unsupported count mode {view.allocation_mode}"
        )
    devices: list[PoolDevice] = []
    for pool in pools:
        if pool.incomplete:
            raise AllocationError(
                f"claim {label}, request {view.name}: asks for all devices, but resource pool {pool.id} "
                "is currently being updated"
            )
        if pool.invalid:
            raise AllocationError(
                f"claim {label}, request {view.name}: asks for all devices, but resource pool {pool.id} is currently invalid"
            )
        for device in pool.devices:
            if not matcher.selectable(view, device):
                continue
            if gates.consumable_capacity and not capacity_fits(
                view.capacity_requests, device.capacity, allocated=allocated.capacity.get(device.id)
            ):
                continue
            devices.append(device)
    return replace(view, num_devices=len(devices), all_devices=tuple(devices))


# --- static eligibility -----------------------------------------------------------------------


def device_eligible(
    view: RequestView,
    device: PoolDevice,
    *,
    matcher: Matcher,
    gates: FeatureGates,
    allocated: AllocatedState,
) -> bool:
    """Every check on (request, device) that does not depend on the attempt's other choices.

    A device passing this may still be excluded by choices made for other requests (exclusive
    use, counters, capacity shared with in-flight allocations, constraints).
    """
    if not view.admin_access and device.id in allocated.devices:
        return False
    if not matcher.selectable(view, device):
        return False
    if gates.consumable_capacity and not capacity_fits(
        view.capacity_requests, device.capacity, allocated=allocated.capacity.get(device.id)
    ):
        return False
    if not gates.partitionable_devices and device.counters:
        return False
    return not (gates.device_taints and taint_prevents_allocation(device.taints, view.tolerations))


def lookup_attribute(device: PoolDevice, name: str) -> o.DeviceAttribute | None:
    """Upstream ``lookupAttribute``: ``domain/id`` as written, or ``id`` if domain == driver."""
    attributes = device.device.attributes or {}
    found = attributes.get(name)
    if found is not None:
        return found
    domain, sep, ident = name.partition("/")
    if not sep or domain != device.id.driver:
        return None
    return attributes.get(ident)
