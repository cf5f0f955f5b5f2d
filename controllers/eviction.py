"""When pods must leave devices that went bad: pure decisions of the device-taint eviction
controller (upstream ``pkg/controller/devicetainteviction``).

A device with a ``NoExecute`` taint, set by its driver in a ResourceSlice or by a
DeviceTaintRule, evicts every pod that uses it through an allocated claim reserved for the
pod, unless the allocation result tolerates the taint:

- a toleration with effect NoExecute and no ``tolerationSeconds`` tolerates it forever;
- otherwise the smallest ``tolerationSeconds`` (negative counts as 0) of the matching
  NoExecute tolerations delays eviction, counted from the taint's ``timeAdded``;
- no matching toleration: eviction at ``timeAdded`` (i.e. now, for a fresh taint).

A pod's eviction time is the earliest over its claims and their devices. Only the newest
generation of a pool's slices counts, as in the scheduler. Times are seconds since the epoch;
the caller supplies "now".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers.objects import Obj
from dra_solver.model import objects as mo
from dra_solver.model import tolerates

NO_EXECUTE = "NoExecute"
CONDITION_TYPE = "DisruptionTarget"
CONDITION_REASON = "DeletionByDeviceTaintManager"
CONDITION_MESSAGE = "Device Taint manager: deleting due to NoExecute taint"

DeviceKey = tuple[str, str, str]
"""(driver, pool, device)."""


@dataclass(frozen=True, slots=True)
class TrackedTaint:
    """A NoExecute taint on one device and where it came from (for messages and ordering)."""

    origin: str
    """"DeviceTaintRule NAME" or "ResourceSlice NAME driver/pool/device taint #i"."""
    taint: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Eviction:
    when: float
    """Seconds since the epoch at which the pod must go."""
    reasons: tuple[str, ...]
    """The taints that cause it, sorted (rules first, then slices)."""

    def describe(self) -> str:
        return ", ".join(self.reasons)


def _newest_generations(slices: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        sp = ob.spec(s)
        pool = sp.get("pool") or {}
        pk = (str(sp.get("driver") or ""), str(pool.get("name") or ""))
        newest[pk] = max(newest.get(pk, -(2**63)), int(pool.get("generation") or 0))
    return newest


def newest_devices(slices: Iterable[Mapping[str, Any]]) -> list[DeviceKey]:
    """Every device published in the newest generation of its pool, sorted."""
    slices = list(slices)
    newest = _newest_generations(slices)
    out: set[DeviceKey] = set()
    for s in slices:
        sp = ob.spec(s)
        pool = sp.get("pool") or {}
        driver, pool_name = str(sp.get("driver") or ""), str(pool.get("name") or "")
        if int(pool.get("generation") or 0) != newest[(driver, pool_name)]:
            continue
        for device in sp.get("devices") or []:
            out.add((driver, pool_name, str(device.get("name") or "")))
    return sorted(out)


class TaintIndex:
    """NoExecute taints per device, from the newest slices of each pool and from rules."""

    def __init__(self, slices: Iterable[Mapping[str, Any]], rules: Iterable[Mapping[str, Any]] = ()) -> None:
        slices = sorted(slices, key=ob.name)
        newest = _newest_generations(slices)
        self._device: dict[DeviceKey, list[TrackedTaint]] = {}
        for s in slices:
            sp = ob.spec(s)
            pool = sp.get("pool") or {}
            driver, pool_name = str(sp.get("driver") or ""), str(pool.get("name") or "")
            if int(pool.get("generation") or 0) != newest[(driver, pool_name)]:
                continue
            for device in sp.get("devices") or []:
                dname = str(device.get("name") or "")
                for i, taint in enumerate(device.get("taints") or []):
                    if taint.get("effect") != NO_EXECUTE:
                        continue
                    origin = f"ResourceSlice {ob.name(s)} {driver}/{pool_name}/{dname} taint #{i}"
                    self._device.setdefault((driver, pool_name, dname), []).append(TrackedTaint(origin, taint))
        self._rules = [
            r for r in sorted(rules, key=ob.name) if (ob.spec(r).get("taint") or {}).get("effect") == NO_EXECUTE
        ]

    @property
    def empty(self) -> bool:
        """No NoExecute taint on any device, and no rule that adds one."""
        return not self._device and not self._rules

    def taints(self, driver: str, pool: str, device: str) -> list[TrackedTaint]:
        """Every NoExecute taint on the device: its own, then those of matching rules."""
        out = list(self._device.get((driver, pool, device), ()))
        for rule in self._rules:
            if rule_matches(rule, driver, pool, device):
                out.append(TrackedTaint(f"DeviceTaintRule {ob.name(rule)}", ob.spec(rule).get("taint") or {}))
        return out


def rule_matches(rule: Mapping[str, Any], driver: str, pool: str, device: str) -> bool:
    """Whether a DeviceTaintRule's selector names the device (no selector selects nothing)."""
    selector = ob.spec(rule).get("deviceSelector")
    if not isinstance(selector, Mapping):
        return False
    for field_name, value in (("driver", driver), ("pool", pool), ("device", device)):
        wanted = selector.get(field_name)
        if wanted is not None and wanted != value:
            return False
    return True


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    return tolerates(mo.DeviceToleration.model_validate(dict(toleration)), mo.DeviceTaint.model_validate(dict(taint)))


def _sort_key(reason: str) -> tuple[int, str]:
    return (0 if reason.startswith("DeviceTaintRule ") else 1, reason)


def claim_eviction(claim: Mapping[str, Any], index: TaintIndex) -> Eviction | None:
    """When pods using this allocated claim must be evicted, or None (never)."""
    when: float | None = None
    reasons: set[str] = set()
    for result in ob.allocated_devices(claim):
        driver, pool, device = ob.device_id(result)
        for tracked in index.taints(driver, pool, device):
            added = ob.parse_time(tracked.taint.get("timeAdded")) or 0.0
            seconds: int | None = None
            forever = False
            for toleration in result.get("tolerations") or []:
                if toleration.get("effect") != NO_EXECUTE or not _tolerates(toleration, tracked.taint):
                    continue
                if toleration.get("tolerationSeconds") is None:
                    forever = True
                    break
                s = max(0, int(toleration["tolerationSeconds"]))
                seconds = s if seconds is None else min(seconds, s)
            if forever:
                continue
            at = added + (seconds or 0)
            reasons.add(tracked.origin)
            when = at if when is None else min(when, at)
    if when is None:
        return None
    return Eviction(when, tuple(sorted(reasons, key=_sort_key)))


def pod_eviction(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]], index: TaintIndex) -> Eviction | None:
    """When the pod must be evicted because of its claims' devices, or None.

    Only scheduled pods count, and only claims that are allocated, owned by the pod when
    generated from a template, and reserved for this very pod instance.
    """
    if not ob.pod_node(pod):
        return None
    ns = ob.namespace(pod)
    out: Eviction | None = None
    for resolved in ob.claim_refs(pod):
        claim = claims.get(f"{ns}/{resolved.name}")
        if claim is None or ob.allocation(claim) is None:
            continue
        if resolved.check_owner and ob.is_for_pod(pod, claim) is not None:
            continue
        if not ob.is_reserved_for_pod(pod, claim):
            continue
        eviction = claim_eviction(claim, index)
        if eviction is None:
            continue
        if out is None:
            out = eviction
        else:
            reasons = sorted(set(out.reasons) | set(eviction.reasons), key=_sort_key)
            out = Eviction(min(out.when, eviction.when), tuple(reasons))
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    action: str
    """"none" (nothing to do), "wait" (check again after ``delay``) or "evict"."""
    delay: float = 0.0
    eviction: Eviction | None = None


def decide(pod: Mapping[str, Any] | None, eviction: Eviction | None, *, now: float) -> Decision:
    """What to do for a pod now, given its eviction time."""
    if pod is None or ob.deleting(pod) or ob.pod_terminal(pod) or eviction is None:
        return Decision("none")
    if eviction.when > now:
        return Decision("wait", eviction.when - now, eviction)
    return Decision("evict", 0.0, eviction)


def has_disruption_condition(pod: Mapping[str, Any]) -> bool:
    for cond in ob.status(pod).get("conditions") or []:
        if (
            cond.get("type") == CONDITION_TYPE
            and cond.get("status") == "True"
            and cond.get("reason") == CONDITION_REASON
            and cond.get("message") == CONDITION_MESSAGE
        ):
            return True
    return False


def disruption_condition_patch(pod: Mapping[str, Any], *, now: float) -> Obj | None:
    """Strategic-merge patch adding the DisruptionTarget condition (None if already there).

    Conditions merge by ``type``; the UID makes the patch fail if the pod was replaced.
    """
    if has_disruption_condition(pod):
        return None
    condition = {
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": CONDITION_REASON,
        "message": CONDITION_MESSAGE,
        "lastTransitionTime": ob.format_time(now),
    }
    return {"metadata": {"uid": ob.uid(pod)}, "status": {"conditions": [condition]}}


def pods_using(claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(namespace/name, uid) of the pods a claim is reserved for."""
    ns = ob.namespace(claim)
    return [
        (f"{ns}/{r.get('name')}", str(r.get("uid") or ""))
        for r in ob.reserved_for(claim)
        if not r.get("apiGroup") and r.get("resource") == "pods"
    ]
