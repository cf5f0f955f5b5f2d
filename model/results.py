"""Turn chosen devices into upstream-shaped ``AllocationResult`` objects.

API:
- ``ChosenDevice(view, device, shared=False, consumed=None)``: one allocated device: the
  request or subrequest it serves, the device, whether it is a share of an
  ``allowMultipleAllocations`` device (then it gets a ``shareID``), and the capacity consumed.
- ``build_result(plan, chosen, *, node_name, gates, selected=None, seed="") -> AllocationResult``:
  ``devices.results`` in the order given; ``devices.config`` with class configs (``FromClass``,
  once per class, listing every request that used the class) then claim configs
  (``FromClaim``, only those naming an allocated request or ``req/sub``; a config that names
  every request gets an empty request list, meaning "all"); ``nodeSelector`` from the devices.
  ``selected`` maps request index → option index for ``firstAvailable`` requests (default:
  read from ``chosen``).
- ``node_selector_for(devices, node_name) -> NodeSelector | None``: upstream
  ``createNodeSelector``: any node-local or binds-to-node device → ``metadata.name In
  [node]`` (matchFields); otherwise the union of the slices' (or per-device) single-term
  selectors; ``allNodes`` everywhere → no selector.
- ``share_id_for(claim, index, device, *, seed="") -> str``: a deterministic UUID for a share
  (upstream uses a random one; ours is derived from the claim, the result index, the device and
  ``seed`` so that the same input gives the same output).

Why: both allocators must write results byte-for-byte like upstream so users can diff them.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dra_solver.model import objects as o
from dra_solver.model.cluster import DeviceID
from dra_solver.model.errors import AllocationError
from dra_solver.model.features import FeatureGates
from dra_solver.model.matching import ClaimPlan, RequestView
from dra_solver.model.pools import PoolDevice
from dra_solver.model.quantity import Quantity


@dataclass(frozen=True, slots=True)
class ChosenDevice:
    view: RequestView
    device: PoolDevice
    shared: bool = False
    """A share of an allowMultipleAllocations device: the result gets a shareID."""
    consumed: Mapping[str, Quantity] | None = None
    """consumedCapacity of this allocation (omitted from the result when empty)."""


def share_id_for(claim: o.ResourceClaim, index: int, device: DeviceID, *, seed: str = "") -> str:
    """A UUID (version 4 layout) derived from the claim, result index, device and seed."""
    who = claim.metadata.uid or f"{claim.namespace}/{claim.name}"
    digest = hashlib.sha256(f"{seed}\x00{who}\x00{index}\x00{device}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def build_result(
    plan: ClaimPlan,
    chosen: Sequence[ChosenDevice],
    *,
    node_name: str,
    gates: FeatureGates,
    selected: Mapping[int, int] | None = None,
    seed: str = "",
) -> o.AllocationResult:
    claim = plan.claim
    results: list[o.DeviceRequestAllocationResult] = []
    for index, pick in enumerate(chosen):
        view, device = pick.view, pick.device
        result = o.DeviceRequestAllocationResult(
            request=view.ref,
            driver=device.id.driver,
            pool=device.id.pool,
            device=device.id.device,
            admin_access=True if view.admin_access else None,
            tolerations=[t.model_copy() for t in view.tolerations] if view.tolerations else None,
        )
        if gates.device_binding_and_status:
            result.binding_conditions = (
                list(device.device.binding_conditions) if device.device.binding_conditions else None
            )
            result.binding_failure_conditions = (
                list(device.device.binding_failure_conditions)
                if device.device.binding_failure_conditions
                else None
            )
        if pick.shared:
            result.share_id = share_id_for(claim, index, device.id, seed=seed)
        if pick.consumed:
            result.consumed_capacity = {name: str(q) for name, q in sorted(pick.consumed.items())}
        results.append(result)

    chosen_option = _selected_options(plan, chosen, selected)
    configs = _configs(plan, chosen_option)
    try:
        node_selector = node_selector_for([c.device for c in chosen], node_name)
    except AllocationError as err:
        raise AllocationError(f"create NodeSelector for claim {claim.name}: {err}") from err
    return o.AllocationResult(
        devices=o.DeviceAllocationResult(results=results, config=configs or None),
        node_selector=node_selector,
    )


def _selected_options(
    plan: ClaimPlan, chosen: Sequence[ChosenDevice], selected: Mapping[int, int] | None
) -> dict[int, RequestView]:
    out: dict[int, RequestView] = {}
    for pick in chosen:
        out.setdefault(pick.view.key.request, pick.view)
    for request in plan.requests:
        if selected is not None and request.index in selected:
            out[request.index] = request.options[selected[request.index]]
        out.setdefault(request.index, request.options[0])
    return out


def _configs(
    plan: ClaimPlan, option: Mapping[int, RequestView]
) -> list[o.DeviceAllocationConfiguration]:
    configs: list[o.DeviceAllocationConfiguration] = []
    by_class: dict[str, tuple[int, int]] = {}
    for request in plan.requests:
        view = option[request.index]
        device_class = view.device_class
        if device_class is None:
            continue
        span = by_class.get(device_class.name)
        if span is not None:
            for i in range(*span):
                existing = configs[i].requests or []
                configs[i].requests = [*existing, view.ref]
            continue
        start = len(configs)
        for class_config in device_class.spec.config or []:
            configs.append(_config("FromClass", [view.ref], class_config.to_api()))
        by_class[device_class.name] = (start, len(configs))

    claim = plan.claim
    for claim_config in claim.spec.devices.config or []:
        names = claim_config.requests or []
        if not names:
            configs.append(_config("FromClaim", None, claim_config.to_api()))
            continue
        for request in plan.requests:
            if request.name in names:
                configs.append(_config("FromClaim", list(names), claim_config.to_api()))
                break
            view = option[request.index]
            if not request.first_available:
                continue
            if view.ref in names:
                configs.append(_config("FromClaim", list(names), claim_config.to_api()))
                break

    # A config naming every request may as well name none: empty means "all".
    for config in configs:
        names = config.requests or []
        if not names:
            continue
        if all(
            request.name in names
            or (request.first_available and option[request.index].ref in names)
            for request in plan.requests
        ):
            config.requests = None
    return configs


def _config(
    source: str, requests: list[str] | None, body: dict[str, object]
) -> o.DeviceAllocationConfiguration:
    data = {k: v for k, v in body.items() if k != "requests"}
    data["source"] = source
    if requests is not None:
        data["requests"] = requests
    return o.DeviceAllocationConfiguration.model_validate(data)


def node_selector_for(devices: Sequence[PoolDevice], node_name: str) -> o.NodeSelector | None:
    """Upstream ``createNodeSelector`` for the devices of one claim."""
    fields: list[o.NodeSelectorRequirement] = []
    expressions: list[o.NodeSelectorRequirement] = []
    for device in devices:
        local = (
            device.device.node_name is not None
            if device.per_device_node_selection
            else device.slice.spec.node_name is not None
        )
        if local or device.binds_to_node:
            return o.NodeSelector(
                node_selector_terms=[
                    o.NodeSelectorTerm(
                        match_fields=[
                            o.NodeSelectorRequirement(
                                key="metadata.name", operator="In", values=[node_name]
                            )
                        ]
                    )
                ]
            )
        selector = device.node_selector
        if selector is None or not selector.node_selector_terms:
            continue
        if len(selector.node_selector_terms) > 1:
            # API validation forbids this; upstream reports it as an error creating the selector.
            raise AllocationError(
                f"unsupported ResourceSlice.NodeSelector with {len(selector.node_selector_terms)} terms"
            )
        term = selector.node_selector_terms[0]
        _add_new(term.match_fields or [], fields)
        _add_new(term.match_expressions or [], expressions)
    if not fields and not expressions:
        return None
    return o.NodeSelector(
        node_selector_terms=[
            o.NodeSelectorTerm(match_fields=fields or None, match_expressions=expressions or None)
        ]
    )


def _add_new(
    source: Sequence[o.NodeSelectorRequirement], into: list[o.NodeSelectorRequirement]
) -> None:
    for requirement in source:
        wanted = set(requirement.values or [])
        if any(
            have.key == requirement.key
            and have.operator == requirement.operator
            and set(have.values or []) == wanted
            for have in into
        ):
            continue
        into.append(requirement.model_copy(deep=True))
