"""What a DeviceTaintRule's status says, decided purely (upstream's device-taint-eviction
controller, ``maybeUpdateRuleStatus``, v1.37).

The eviction controller keeps one condition on every rule, type ``EvictionInProgress``:

- effect ``NoExecute``: ``True``/``PodsPendingEviction`` ("2 pods need to be evicted in 1
  namespace.") while pods using a device the rule selects still have to go (those whose
  toleration has not run out yet included); ``False``/``Completed`` once some were evicted and
  none is left; ``False``/``NotStarted`` when none ever had to go;
- effect ``None`` (a dry run): ``False``/``NoEffect`` with what ``NoExecute`` would do: how
  many published and allocated devices the rule selects and how many pods it would evict;
  written once per spec change ("This information will not be updated again.");
- any other effect: ``False``/``OtherEffect``.

Every message ends with how many pods this controller evicted because of the rule since it
started. ``observedGeneration`` is the rule's generation. The condition is written when the
rule appears or its spec changes, and otherwise at most every ``period`` (10 s upstream) while
pods are evicted, so that "eviction is complete" is not claimed while the scheduler may still
be placing pods on devices it has not seen tainted yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dra_solver.controllers import eviction
from dra_solver.controllers import objects as ob
from dra_solver.controllers.objects import Obj

CONDITION = "EvictionInProgress"
"""``resourceapi.DeviceTaintConditionEvictionInProgress``."""

DEFAULT_PERIOD = 10.0
"""Upstream's ``ruleStatusPeriod``: shortest time between status updates while evicting."""


@dataclass(frozen=True, slots=True)
class Counts:
    pending_pods: int = 0
    pending_namespaces: int = 0
    evicted_pods: int = 0
    """Pods this controller evicted because of the rule since it started."""
    slice_devices: int = 0
    """Published devices (newest pool generation) the rule selects (effect None only)."""
    allocated_devices: int = 0
    """Allocated devices the rule selects (effect None only)."""


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many.format(n=n)


def condition(rule: Mapping[str, Any], counts: Counts) -> Obj:
    """The ``EvictionInProgress`` condition for ``rule`` (without ``lastTransitionTime``)."""
    effect = str((ob.spec(rule).get("taint") or {}).get("effect") or "")
    status, reason, message = "False", f"Effect{effect}", ""
    if effect == eviction.NO_EXECUTE:
        if counts.pending_pods > 0:
            status, reason = "True", "PodsPendingEviction"
            message = (_plural(counts.pending_pods, "1 pod needs", "{n} pods need") + " to be evicted in "
                       + _plural(counts.pending_namespaces, "1 namespace.", "{n} different namespaces."))
        elif counts.evicted_pods > 0:
            reason = "Completed"
        else:
            reason = "NotStarted"
    elif effect == "None":
        reason = "NoEffect"
        message = (
            _plural(counts.slice_devices, "1 published device selected. ", "{n} published devices selected. ")
            + _plural(counts.allocated_devices, "1 allocated device selected. ", "{n} allocated devices selected. ")
            + _plural(counts.pending_pods, "1 pod would be evicted in ", "{n} pods would be evicted in ")
            + _plural(counts.pending_namespaces, "1 namespace ", "{n} different namespaces ")
            + "if the effect was NoExecute. This information will not be updated again. "
            "Recreate the DeviceTaintRule to trigger an update."
        )
    else:
        reason = "OtherEffect"
        message = "Eviction only happens for the NoExecute effect."
    if counts.evicted_pods > 0:
        message = (message + " " if message else "") + _plural(counts.evicted_pods, "1 pod ", "{n} pods ") + "evicted since starting the controller."
    return {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": int(ob.meta(rule).get("generation") or 0),
    }


def current_condition(rule: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in ob.status(rule).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == CONDITION:
            return cond
    return None


def wait_before_update(rule: Mapping[str, Any], *, now: float, period: float) -> float:
    """Seconds to wait before the status may change again (0: now). A new generation is
    always reported at once; otherwise updates are ``period`` apart."""
    existing = current_condition(rule)
    if existing is None or int(existing.get("observedGeneration") or 0) != int(ob.meta(rule).get("generation") or 0):
        return 0.0
    since = now - (ob.parse_time(existing.get("lastTransitionTime")) or 0.0)
    return max(0.0, period - since)


def changed(rule: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    existing = current_condition(rule)
    if existing is None:
        return True
    return any(existing.get(k) != wanted.get(k) for k in ("status", "reason", "message", "observedGeneration"))


def apply_body(rule: Mapping[str, Any], cond: Mapping[str, Any], *, now: float, api_version: str) -> Obj:
    """The server-side apply request: only our condition, and the rule's UID so that a rule
    replaced under the same name is not written."""
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": ob.name(rule), "uid": ob.uid(rule)},
        "status": {"conditions": [{**cond, "lastTransitionTime": ob.format_time(now)}]},
    }


def _as_no_execute(rule: Mapping[str, Any]) -> Obj:
    out = ob.deep_copy(dict(rule))
    out.setdefault("spec", {}).setdefault("taint", {})["effect"] = eviction.NO_EXECUTE
    return out


def count(
    rule: Mapping[str, Any],
    *,
    pods: Iterable[Mapping[str, Any]],
    claims: Mapping[str, Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    rules: Iterable[Mapping[str, Any]],
    evicted: int,
) -> Counts:
    """Pods that must (or, for effect None, would) go because of ``rule``, and the devices it
    selects; ``rules`` are all rules (the others may delay or hasten a pod too)."""
    effect = (ob.spec(rule).get("taint") or {}).get("effect")
    if effect not in (eviction.NO_EXECUTE, "None"):
        return Counts(evicted_pods=evicted)
    simulated = _as_no_execute(rule) if effect == "None" else dict(rule)
    others = [r for r in rules if ob.name(r) != ob.name(rule)]
    slices = list(slices)
    index = eviction.TaintIndex(slices, [*others, simulated])
    origin = f"DeviceTaintRule {ob.name(rule)}"
    pending: set[str] = set()
    namespaces: set[str] = set()
    for pod in pods:
        if ob.deleting(pod) or ob.pod_terminal(pod):
            continue
        found = eviction.pod_eviction(pod, claims, index)
        if found is not None and origin in found.reasons:
            pending.add(ob.key(pod))
            namespaces.add(ob.namespace(pod))
    counts = Counts(len(pending), len(namespaces), evicted)
    if effect != "None":
        return counts
    published = sum(
        1 for driver, pool, device in eviction.newest_devices(slices) if eviction.rule_matches(rule, driver, pool, device)
    )
    allocated = sum(
        1 for claim in claims.values() for r in ob.allocated_devices(claim) if eviction.rule_matches(rule, *ob.device_id(r))
    )
    return replace(counts, slice_devices=published, allocated_devices=allocated)
