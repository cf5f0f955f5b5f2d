"""Binding conditions (DRADeviceBindingConditions): when a pod whose claims are written may be
bound, decided purely from the claims.

A device may list ``bindingConditions`` and ``bindingFailureConditions`` in its ResourceSlice;
the allocation result copies them. After the scheduler has written the allocation and the
pod's reservation (PreBind), it waits until, for every allocated device with binding
conditions, the device's entry in the claim's ``status.devices`` (matched by driver, pool and
device) has every binding condition ``True``. A binding failure condition that is ``True``
aborts, and so does the timeout (600 s by default): counted from the allocation's
``allocationTimestamp`` and from the start of the wait, whichever ends first, as upstream's
``isClaimTimeout`` and PreBind's poll do. An aborted attempt clears the allocation so that
the pod is scheduled again, possibly onto other devices.

Kubernetes' documentation speaks of "the claim's status.conditions"; the API has none: the
scheduler (``isClaimReadyForBinding``) reads each device's ``status.devices[].conditions``,
and so do we.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dra_solver.controllers import objects as ob

DEFAULT_TIMEOUT = 600.0
"""kube-scheduler's ``DynamicResourcesArgs.bindingTimeout`` default (seconds)."""

READY = "ready"
PENDING = "pending"
FAILED = "failed"
TIMEOUT = "timeout"
GONE = "gone"


@dataclass(frozen=True, slots=True)
class BindingState:
    kind: str
    """ready, pending, failed, timeout or gone (the claim was deleted or deallocated)."""
    message: str = ""


def has_binding_conditions(claim: Mapping[str, Any]) -> bool:
    """Whether any allocated device of the claim waits for binding conditions."""
    return any(r.get("bindingConditions") for r in ob.allocated_devices(claim))


def _device_status(claim: Mapping[str, Any], result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for entry in ob.status(claim).get("devices") or []:
        if isinstance(entry, Mapping) and ob.device_id(entry) == ob.device_id(result):
            return entry
    return None


def _condition_true(entry: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in entry.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def claim_state(claim: Mapping[str, Any] | None, *, now: float, timeout: float) -> BindingState:
    """Whether ``claim`` lets its pod be bound now (``now``: seconds since the epoch)."""
    if claim is None:
        return BindingState(GONE, "claim deleted in the meantime")
    if ob.allocation(claim) is None:
        return BindingState(GONE, f"claim {ob.name(claim)} deallocated in the meantime")
    pending: list[str] = []
    for result in ob.allocated_devices(claim):
        wanted = [str(c) for c in result.get("bindingConditions") or []]
        if not wanted:
            continue
        device = "/".join(ob.device_id(result))
        entry = _device_status(claim, result)
        if entry is None:
            pending.append(f"{device}: no device status yet")
            continue
        for kind in result.get("bindingFailureConditions") or []:
            failed = _condition_true(entry, str(kind))
            if failed is not None:
                return BindingState(
                    FAILED,
                    f"device binding failed: claim={ob.name(claim)}, reason={failed.get('reason') or ''}, "
                    f"message={json.dumps(str(failed.get('message') or ''))}, device={device}, condition={kind}",
                )
        missing = [c for c in wanted if _condition_true(entry, c) is None]
        if missing:
            pending.append(f"{device}: {', '.join(missing)} not True")
    if not pending:
        return BindingState(READY)
    allocated_at = ob.parse_time((ob.allocation(claim) or {}).get("allocationTimestamp"))
    if allocated_at is not None and allocated_at + timeout < now:
        return BindingState(TIMEOUT, f"device binding timeout: claim={ob.name(claim)}: {'; '.join(pending)}")
    return BindingState(PENDING, "; ".join(pending))


def pod_state(claims: Iterable[Mapping[str, Any] | None], *, now: float, timeout: float) -> BindingState:
    """The first claim that is not ready decides (failed before timeout before pending)."""
    states = [claim_state(c, now=now, timeout=timeout) for c in claims]
    for kind in (GONE, FAILED, TIMEOUT, PENDING):
        for state in states:
            if state.kind == kind:
                return state
    return BindingState(READY)
