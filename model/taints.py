"""Device taints and tolerations, as the scheduler sees them.

API:
- ``BLOCKING_EFFECTS``: the taint effects that keep a device from being allocated.
- ``tolerates(toleration, taint) -> bool``: upstream ``resourceclaim.ToleratesTaint``.
- ``rule_taints(driver, pool, device, rules) -> tuple[DeviceTaint, ...]``: taints that
  DeviceTaintRules add to one device (the scheduler's ResourceSlice tracker patches them in).
- ``effective_taints(slice_, device, rules, *, gates) -> tuple[DeviceTaint, ...]``: the device's
  own taints followed by the rules' taints (rules only when the DeviceTaints gate is on).
- ``taint_prevents_allocation(taints, tolerations) -> bool``: a NoSchedule/NoExecute taint
  that no toleration tolerates; ``None`` and unknown effects are ignored.

Why a module of its own: the allocators, the validator and the eviction controller all need the
same answer to "may this request use this tainted device?", and upstream's answer has corners
(an empty toleration key with Exists matches every taint, an empty effect matches every effect).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dra_solver.model import objects as o
from dra_solver.model.features import FeatureGates

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Only these effects prevent allocation; ``None`` and unknown future effects never do."""


def tolerates(toleration: o.DeviceToleration, taint: o.DeviceTaint) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (upstream ``ToleratesTaint``).

    An empty effect matches every effect and an empty key every key; operator ``Exists``
    matches any value, ``Equal`` (also the default when unset) needs equal values.
    """
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator or "Equal"
    if operator == "Equal":
        return (toleration.value or "") == (taint.value or "")
    return operator == "Exists"


def taint_prevents_allocation(
    taints: Iterable[o.DeviceTaint], tolerations: Sequence[o.DeviceToleration] | None
) -> bool:
    """True if some blocking taint is not tolerated by any of ``tolerations``."""
    tolerations = tolerations or ()
    for taint in taints:
        if taint.effect not in BLOCKING_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return True
    return False


def rule_taints(
    driver: str, pool: str, device: str, rules: Iterable[o.DeviceTaintRule]
) -> tuple[o.DeviceTaint, ...]:
    """Taints that ``rules`` put on one device, in rule order.

    A rule applies when each of driver, pool and device that its selector names is equal; the
    scheduler's slice tracker at the upstream commit we follow looks at nothing else (the
    alpha ``deviceClassName``/``selectors`` fields are ignored there, and so here). An empty
    selector matches every device; a rule without one matches none (the API's documented
    meaning, and the tracker's).
    """
    out: list[o.DeviceTaint] = []
    for rule in rules:
        selector = rule.spec.device_selector
        if selector is None:
            continue
        if selector.driver is not None and selector.driver != driver:
            continue
        if selector.pool is not None and selector.pool != pool:
            continue
        if selector.device is not None and selector.device != device:
            continue
        taint = rule.spec.taint
        out.append(
            o.DeviceTaint(
                key=taint.key, value=taint.value, effect=taint.effect, time_added=taint.time_added
            )
        )
    return tuple(out)


def effective_taints(
    slice_: o.ResourceSlice,
    device: o.Device,
    rules: Sequence[o.DeviceTaintRule],
    *,
    gates: FeatureGates,
) -> tuple[o.DeviceTaint, ...]:
    """The device's own taints, then those from matching DeviceTaintRules.

    With the DeviceTaints gate off the scheduler does not watch DeviceTaintRules at all, so
    they contribute nothing; the device's own taints are returned regardless (the allocator
    decides whether to look at them).
    """
    own = tuple(device.taints or ())
    if not gates.device_taints or not rules:
        return own
    return own + rule_taints(slice_.spec.driver, slice_.spec.pool.name, device.name, rules)
