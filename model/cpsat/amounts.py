"""Exact quantities as the CP-SAT model scales them (pure: no OR-Tools).

API:
- ``Exact``: an int when a quantity is one, else a Fraction; ``exact(q)``.
- ``scaled(amounts, limit) -> (coefficients, bound)``: integers for ``sum(amounts[i] * x_i) <=
  limit``, exact when the numbers allow, otherwise conservative (amounts up, the limit down).
- ``counters_left(pool, in_use) -> {(counter set, counter): Exact}``: each counter of the pool
  minus what devices allocated before consume.
- ``device_sizes(candidates) -> {DeviceID: int}``: the objective's device-size level.

Shared by the model (``model.cpsat.model``) and the single-device path
(``model.cpsat.single``), so both read a counter the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from math import ceil, floor, lcm

from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat.problem import Candidate
from dra_solver.model.pools import Pool, PoolDevice
from dra_solver.model.quantity import Quantity

MAX_COEFFICIENT = 1 << 40
"""Scaled quantities above this are rounded conservatively (amounts up, limits down)."""

Exact = int | Fraction
"""An exact quantity value: an int when it is one (fast), else a Fraction."""


def exact(q: Quantity) -> Exact:
    as_int = q.as_int64()
    return as_int if as_int is not None else q.to_fraction()


def counters_left(pool: Pool, in_use: Callable[[DeviceID], bool]) -> dict[tuple[str, str], Exact]:
    """Each counter of the pool minus what devices allocated before consume."""
    left: dict[tuple[str, str], Exact] = {
        (set_name, name): exact(q)
        for set_name, counters in pool.counter_sets.items()
        for name, q in counters.items()
    }
    for device in (*pool.devices, *pool.other_devices):
        if not in_use(device.id):
            continue
        for consumption in device.counters:
            for name, amount in consumption.counters.items():
                slot = (consumption.counter_set, name)
                if slot in left:
                    left[slot] -= exact(amount)
    return left


def scaled(amounts: Sequence[Exact], limit: Exact) -> tuple[list[int], int]:
    """Integer coefficients and bound for ``sum(amounts[i] * x_i) <= limit``, exactly when the
    numbers allow, otherwise conservatively (amounts rounded up, the limit down)."""
    denominator = lcm(*(a.denominator for a in amounts), limit.denominator)
    ints = [int(a * denominator) for a in amounts]
    bound = limit * denominator
    biggest = max([abs(i) for i in ints] + [abs(int(bound))])
    if biggest <= MAX_COEFFICIENT:
        return ints, floor(bound)
    shrink = Fraction(biggest, MAX_COEFFICIENT)
    return [ceil(i / shrink) for i in ints], floor(bound / shrink)


def device_sizes(candidates: Sequence[Candidate], memo: dict[tuple[Pool, PoolDevice], int] | None = None) -> dict[DeviceID, int]:
    """How big each candidate device is (0..1000 per counter or capacity), the objective's
    device-size level: its share of each counter set it draws on, else its capacity relative
    to the largest candidate's. ``memo`` keeps the shares by (pool, device) object across
    calls (they read nothing else)."""
    largest: dict[str, float] = {}
    # Only devices without counters are sized by capacity (relative to every candidate's):
    # when every candidate draws on counters the largest capacities are never read.
    by_capacity = any(not candidate.device.counters for candidate in candidates)
    for candidate in candidates if by_capacity else ():
        for name, spec in candidate.device.capacity.items():
            largest[name] = max(largest.get(name, 0.0), spec.value.as_approximate_float())
    out: dict[DeviceID, int] = {}
    if memo is not None and len(memo) > 100_000:
        memo.clear()
    for candidate in candidates:
        if memo is not None and candidate.device.counters:
            known = memo.get((candidate.pool, candidate.device))
            if known is not None:
                out[candidate.id] = known
                continue
        size = 0
        for consumption in candidate.device.counters:
            totals = candidate.pool.counter_sets.get(consumption.counter_set, {})
            for name, amount in consumption.counters.items():
                total = totals.get(name)
                if total is not None and total.as_approximate_float() > 0:
                    size += round(1000 * amount.as_approximate_float() / total.as_approximate_float())
        if not candidate.device.counters:
            for name, spec in candidate.device.capacity.items():
                if largest.get(name, 0.0) > 0:
                    size += round(1000 * spec.value.as_approximate_float() / largest[name])
        elif memo is not None:
            memo[(candidate.pool, candidate.device)] = size
        out[candidate.id] = size
    return out
