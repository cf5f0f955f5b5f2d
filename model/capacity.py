"""Consumable capacity: how much of a device a request consumes, and whether it still fits.

API:
- ``CapacitySpec``: one device capacity with its parsed ``requestPolicy``
  (``CapacitySpec.from_api(o.DeviceCapacity)``).
- ``consumed_amount(requested, spec) -> Quantity``: what one allocation consumes of a capacity
  (upstream ``calculateConsumedCapacity``): no request → policy default, else the capacity's
  whole value; a request is rounded up to ``validRange`` (min, then step multiples of min) or
  to the next of ``validValues``.
- ``violates_policy(amount, spec) -> bool``: over ``validRange.max``, off the step grid, or not
  one of ``validValues`` (the policy default is always allowed).
- ``requests_undefined_capacity(requests, capacities) -> bool``: a request names a capacity the
  device does not have (upstream skips such a device).
- ``capacity_fits(requests, capacities, *, allocated, allocating) -> bool``: upstream
  ``CmpRequestOverCapacity`` — every capacity of the device, after this request's consumption
  plus what committed and in-flight allocations consume, stays within its value and no policy
  is violated. ``False`` also when a requested capacity is undefined.
- ``consumed_capacity(requests, capacities) -> dict[str, Quantity]``: the ``consumedCapacity``
  of one allocation: every capacity of the device, requested or not.
- ``add_amounts``/``sub_amounts``: per-name sums of capacity maps.

Why its own module: both allocators and the validator must round exactly like upstream,
including its quirks (step rounding uses the integer ``Value()`` of the quantities; a device's
capacities that the request does not mention are consumed in full or by their default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dra_solver.model import objects as o
from dra_solver.model.quantity import Format, Quantity, parse_quantity


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """A device capacity: its value and optional request policy, parsed."""

    value: Quantity
    has_policy: bool = False
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] | None = None
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None
    has_range: bool = False

    @staticmethod
    def from_api(capacity: o.DeviceCapacity) -> CapacitySpec:
        value = parse_quantity(capacity.value)
        policy = capacity.request_policy
        if policy is None:
            return CapacitySpec(value=value)
        rng = policy.valid_range
        return CapacitySpec(
            value=value,
            has_policy=True,
            default=_opt(policy.default),
            valid_values=(
                tuple(parse_quantity(v) for v in policy.valid_values)
                if policy.valid_values is not None
                else None
            ),
            range_min=_opt(rng.min) if rng else None,
            range_max=_opt(rng.max) if rng else None,
            range_step=_opt(rng.step) if rng else None,
            has_range=rng is not None,
        )


def _opt(text: str | None) -> Quantity | None:
    return parse_quantity(text) if text is not None else None


_ZERO = Quantity.from_int(0)


def zero() -> Quantity:
    """The quantity 0 (shared; quantities are immutable)."""
    return _ZERO


def integer_value(q: Quantity) -> int:
    """Go's ``Quantity.Value()``: the value rounded up (away from zero) to an integer."""
    return q.value()


def binary_si_quantity(value: int) -> Quantity:
    """``resource.NewQuantity(value, BinarySI)``: printed with binary suffixes when exact."""
    return Quantity.from_int(value, Format.BINARY_SI)


def consumed_amount(requested: Quantity | None, spec: CapacitySpec) -> Quantity:
    """What one allocation consumes of a capacity (upstream ``calculateConsumedCapacity``)."""
    if requested is None:
        return spec.default if spec.default is not None else spec.value
    if not spec.has_policy:
        return requested
    if spec.has_range and spec.range_min is not None:
        return _round_up_range(requested, spec)
    if spec.valid_values is not None:
        for candidate in spec.valid_values:
            if requested.cmp(candidate) <= 0:
                return candidate
        return requested
    return requested


def _round_up_range(requested: Quantity, spec: CapacitySpec) -> Quantity:
    assert spec.range_min is not None
    if requested.cmp(spec.range_min) < 0:
        return spec.range_min
    if spec.range_step is None:
        return requested
    # Upstream rounds with the integer Value() of each quantity, so fractional steps round
    # up to whole units; we do the same so the consumed amounts are identical.
    req_int = integer_value(requested)
    step = integer_value(spec.range_step)
    low = integer_value(spec.range_min)
    added = req_int - low
    n = _go_div(added, step)
    if _go_mod(added, step) != 0:
        n += 1
    return binary_si_quantity(low + step * n)


def _go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _go_mod(a: int, b: int) -> int:
    return a - b * _go_div(a, b)


def violates_policy(amount: Quantity, spec: CapacitySpec) -> bool:
    """Whether ``amount`` breaks the capacity's request policy (upstream ``violatesPolicy``)."""
    if not spec.has_policy:
        return False
    if spec.default is not None and amount.cmp(spec.default) == 0:
        return False
    if spec.has_range:
        if spec.range_max is not None and amount.cmp(spec.range_max) > 0:
            return True
        if spec.range_step is not None:
            low = integer_value(spec.range_min) if spec.range_min is not None else 0
            if _go_mod(integer_value(amount) - low, integer_value(spec.range_step)) != 0:
                return True
        return False
    if spec.valid_values:
        return not any(amount.cmp(v) == 0 for v in spec.valid_values)
    return False


def requests_undefined_capacity(
    requests: Mapping[str, Quantity] | None, capacities: Mapping[str, CapacitySpec]
) -> bool:
    """A request names a capacity the device does not define."""
    return bool(requests) and any(name not in capacities for name in requests or {})


def capacity_fits(
    requests: Mapping[str, Quantity] | None,
    capacities: Mapping[str, CapacitySpec],
    *,
    allocated: Mapping[str, Quantity] | None = None,
    allocating: Mapping[str, Quantity] | None = None,
) -> bool:
    """Upstream ``CmpRequestOverCapacity``: does this request still fit on the device?

    ``allocated`` is what committed allocations already consume of the device; ``allocating``
    what allocations in the current attempt consume. Capacities are checked in name order
    (the outcome does not depend on the order).
    """
    if requests_undefined_capacity(requests, capacities):
        return False
    allocated = allocated or {}
    allocating = allocating or {}
    for name in sorted(capacities):
        spec = capacities[name]
        requested = requests.get(name) if requests else None
        amount = consumed_amount(requested, spec)
        if violates_policy(amount, spec):
            return False
        total = amount
        if name in allocated:
            total = allocated[name].add(total)
        if name in allocating:
            total = total.add(allocating[name])
        if total.cmp(spec.value) > 0:
            return False
    return True


def consumed_capacity(
    requests: Mapping[str, Quantity] | None, capacities: Mapping[str, CapacitySpec]
) -> dict[str, Quantity]:
    """Upstream ``GetConsumedCapacityFromRequest``: one allocation's consumption per capacity."""
    return {
        name: consumed_amount(requests.get(name) if requests else None, capacities[name])
        for name in sorted(capacities)
    }


def add_amounts(into: dict[str, Quantity], amounts: Mapping[str, Quantity]) -> None:
    """``into += amounts`` per capacity name."""
    for name, amount in amounts.items():
        into[name] = into[name].add(amount) if name in into else amount


def sub_amounts(into: dict[str, Quantity], amounts: Mapping[str, Quantity]) -> None:
    """``into -= amounts`` for names already present (upstream ignores the others)."""
    for name, amount in amounts.items():
        if name in into:
            into[name] = into[name].sub(amount)


def all_zero(amounts: Mapping[str, Quantity]) -> bool:
    return all(q.is_zero() for q in amounts.values())
