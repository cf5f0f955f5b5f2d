"""How full a node is, and which node a placement policy prefers.

API:
- ``NodeUnits.of(slices)``: a node's devices counted in units: every shared-counter set is one
  unit (a physical GPU, however it is partitioned), every device that draws on no counters is
  one unit. ``total`` is their number; ``busy(in_use)`` how much of them devices in use take
  (a counter set counts its most consumed counter's fraction); ``touched(in_use)``,
  ``idle(in_use)`` and ``units_of(device)``: whole units with anything in use, with nothing
  in use, and the units a device occupies (gang placement counts GPUs left idle with them).
- ``node_key(policy, free, name)``: the sort key that orders nodes from most to least
  preferred, given their free units. ``pack`` prefers the node with the fewest free units
  (best fit: a node already in use fills up, empty nodes stay empty for claims that need a
  whole node); ``spread`` the most free units (failure isolation, like the scheduler's default
  LeastAllocated scoring); ``first-fit`` and ``score`` have no preference (name order).

Node preference is always applied after the FirstAvailable score: a node where the claims get
a better score wins whatever its load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dra_solver.model import objects as o
from dra_solver.model.cluster import AllocatedState
from dra_solver.model.quantity import parse_quantity

Slot = tuple[str, str, str]
"""(driver, pool, device or counter set name), the pool name as the caller's ``pool`` maps it."""


def _same(pool: str) -> str:
    return pool


@dataclass(frozen=True, slots=True)
class NodeUnits:
    total: float = 0.0
    plain: frozenset[Slot] = frozenset()
    draws: dict[Slot, tuple[tuple[Slot, dict[str, float]], ...]] = field(default_factory=dict)

    @staticmethod
    def of(slices: Iterable[o.ResourceSlice], *, pool: Callable[[str], str] = _same) -> NodeUnits:
        """``pool`` renames pools (a caller sharing one NodeUnits between nodes whose pools are
        named after the node passes the same renaming to ``busy``)."""
        totals: dict[Slot, dict[str, float]] = {}
        devices: list[tuple[Slot, o.Device]] = []
        for s in slices:
            driver, name = s.spec.driver, pool(s.spec.pool.name)
            for cs in s.spec.shared_counters or []:
                totals[(driver, name, cs.name)] = {
                    n: parse_quantity(c.value).as_approximate_float() for n, c in cs.counters.items()
                }
            for d in s.spec.devices or []:
                devices.append(((driver, name, d.name), d))
        plain: set[Slot] = set()
        draws: dict[Slot, tuple[tuple[Slot, dict[str, float]], ...]] = {}
        for slot, d in devices:
            if not d.consumes_counters:
                plain.add(slot)
                continue
            shares = []
            for consumption in d.consumes_counters:
                counter_slot = (slot[0], slot[1], consumption.counter_set)
                whole = totals.get(counter_slot, {})
                fractions = {
                    n: parse_quantity(c.value).as_approximate_float() / whole[n]
                    for n, c in consumption.counters.items()
                    if whole.get(n, 0.0) > 0
                }
                shares.append((counter_slot, fractions))
            draws[slot] = tuple(shares)
        return NodeUnits(total=float(len(plain) + len(totals)), plain=frozenset(plain), draws=draws)

    def busy(self, in_use: AllocatedState, *, pool: Callable[[str], str] = _same) -> float:
        devices = in_use.ids()
        used = {(d.driver, pool(d.pool), d.device) for d in devices}
        busy = float(len(used & self.plain))
        consumed: dict[Slot, dict[str, float]] = {}
        for dev in used:
            for slot, fractions in self.draws.get(dev, ()):
                into = consumed.setdefault(slot, {})
                for name, fraction in fractions.items():
                    into[name] = into.get(name, 0.0) + fraction
        for counters in consumed.values():
            busy += min(1.0, max(counters.values(), default=0.0))
        return busy

    def touched(self, in_use: AllocatedState, *, pool: Callable[[str], str] = _same) -> frozenset[Slot]:
        """The whole units with anything in use: a plain device in use, or a counter set some
        device in use draws on (a GPU with one partition taken is not idle)."""
        devices = in_use.ids()
        used = {(d.driver, pool(d.pool), d.device) for d in devices}
        out = set(used & self.plain)
        for dev in used:
            for slot, _ in self.draws.get(dev, ()):
                out.add(slot)
        return frozenset(out)

    def idle(self, in_use: AllocatedState, *, pool: Callable[[str], str] = _same) -> int:
        """Whole units with nothing in use (GPUs left idle)."""
        return int(self.total) - len(self.touched(in_use, pool=pool))

    def units_of(self, device: Slot) -> tuple[Slot, ...]:
        """The whole units a device occupies when used: itself, or the counter sets it draws on."""
        if device in self.plain:
            return (device,)
        return tuple(slot for slot, _ in self.draws.get(device, ()))

    def free(self, in_use: AllocatedState, *, pool: Callable[[str], str] = _same) -> float:
        return max(0.0, self.total - self.busy(in_use, pool=pool))


def node_key(policy: str, free: float, name: str) -> tuple[float, str]:
    """Ascending order of this key is the visiting order: most preferred first."""
    if policy == "pack":
        return (round(free, 9), name)
    if policy == "spread":
        return (-round(free, 9), name)
    return (0.0, name)
