"""Why two allocators disagree: recognise upstream's documented deviations in an input.

README "Where upstream deviates" lists the places where upstream's allocator departs from the
documented API semantics: deviations 5-7 (1-4 were fixed upstream by the pinned v0.37.2, and
our backtracking port follows v0.37.2 there, so they are no longer recognised). CP-SAT follows
the documentation, so on inputs that reach 5-7 it may answer differently from upstream; the
backtracking port reproduces upstream, deviations included. This module reads an input (and
the verdicts) and names the deviations that can explain a difference, so that ``compare`` can
say why a claim was placed differently and the differential tests can tell a documented
deviation from a bug.

API:
- ``DEVIATIONS``: the deviations upstream still has, numbered as in the README.
- ``FIXED_IN_PINNED_UPSTREAM``: deviations the port still reproduces although upstream fixed
  them at the pinned version (k8s.io/dynamic-resource-allocation v0.37.2). Empty: the port
  follows the pinned version, so any difference between the two is a bug.
- ``present_in(request) -> tuple[Deviation, ...]``: every deviation whose trigger the input
  has (a necessary condition read from the objects, not a proof that the search hit it).
- ``explain(request, ours=..., theirs=..., our_score=..., their_score=...)``: the deviations
  that can explain our verdict/score against upstream's (empty: unexplained). A difference in
  the error-vs-answer sense is never explained by a deviation.

Recognition is deliberately by direction as well as by input: deviations 5-7 can only make
upstream refuse what the documented semantics allow.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dra_solver.model import AllocationRequest, DeviceID, Quantity, parse_quantity
from dra_solver.model import objects as o


@dataclass(frozen=True, slots=True)
class Deviation:
    number: int
    key: str
    title: str
    upstream_refuses_more: bool
    """True: upstream can answer unsatisfiable where the documented semantics allow it."""
    upstream_accepts_more: bool
    """True: upstream can allocate what the documented semantics forbid."""

    def describe(self) -> str:
        return f"upstream deviation {self.number} ({self.title})"


DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(5, "admin-blocks-later-claims", "admin access blocks later claims", True, False),
    Deviation(6, "admin-takes-counters", "admin access to an allocated device takes its counters again", True, False),
    Deviation(7, "overdrawn-counter-set", "an overdrawn counter set refuses every counter-consuming device", True, False),
)
BY_NUMBER = {d.number: d for d in DEVIATIONS}

FIXED_IN_PINNED_UPSTREAM: frozenset[int] = frozenset()
"""Empty: upstream v0.37.2 no longer has deviations 1-4 (distinctAttribute inside one request,
counters kept on rejection, matchAttribute list intersections not widened, counters per pool
name) and the port follows v0.37.2 there, so they are left out of ``DEVIATIONS``."""


def still_in_pinned_upstream() -> frozenset[int]:
    return frozenset(d.number for d in DEVIATIONS) - FIXED_IN_PINNED_UPSTREAM


# --- reading the input ------------------------------------------------------------------------


def _node_devices(request: AllocationRequest) -> Iterator[tuple[o.ResourceSlice, o.Device]]:
    node = request.node.name
    for slice_ in request.inventory.slices:
        spec = slice_.spec
        for device in spec.devices or []:
            local = spec.node_name == node or bool(spec.all_nodes) or spec.node_selector is not None
            if spec.per_device_node_selection:
                local = device.node_name == node or bool(device.all_nodes) or device.node_selector is not None
            if local:
                yield slice_, device


def _admin(claim: o.ResourceClaim) -> bool:
    return any(r.exactly is not None and r.exactly.admin_access for r in claim.spec.devices.requests or [])


def _counter_devices(request: AllocationRequest) -> list[tuple[o.ResourceSlice, o.Device]]:
    return [(s, d) for s, d in _node_devices(request) if d.consumes_counters]


def _admin_blocks_later_claims(request: AllocationRequest) -> bool:
    claims = request.claims
    return any(_admin(claim) for claim in claims[:-1]) and len(claims) > 1


def _admin_takes_counters(request: AllocationRequest) -> bool:
    return any(_admin(claim) for claim in request.claims) and bool(_counter_devices(request))


def _overdrawn_counter_set(request: AllocationRequest) -> bool:
    in_use = request.inventory.allocated_state().devices
    available: dict[tuple[str, str, str, str], Quantity] = {}
    for slice_ in request.inventory.slices:
        for counter_set in slice_.spec.shared_counters or []:
            for name, counter in counter_set.counters.items():
                available[(slice_.spec.driver, slice_.spec.pool.name, counter_set.name, name)] = parse_quantity(counter.value)
    consumed: dict[tuple[str, str, str, str], Quantity] = {}
    for slice_ in request.inventory.slices:
        for device in slice_.spec.devices or []:
            if DeviceID(slice_.spec.driver, slice_.spec.pool.name, device.name) not in in_use:
                continue
            for consumption in device.consumes_counters or []:
                for name, counter in consumption.counters.items():
                    key = (slice_.spec.driver, slice_.spec.pool.name, consumption.counter_set, name)
                    amount = parse_quantity(counter.value)
                    before = consumed.get(key)
                    consumed[key] = amount if before is None else before.add(amount)
    for key, used in consumed.items():
        have = available.get(key)
        if have is not None and used.cmp(have) > 0:
            return True
    return False


_TRIGGERS = {
    5: _admin_blocks_later_claims,
    6: _admin_takes_counters,
    7: _overdrawn_counter_set,
}


def present_in(request: AllocationRequest, numbers: Iterable[int] | None = None) -> tuple[Deviation, ...]:
    """Deviations whose trigger the input has (among ``numbers``; default all of them)."""
    wanted = set(numbers) if numbers is not None else set(BY_NUMBER)
    return tuple(d for d in DEVIATIONS if d.number in wanted and _TRIGGERS[d.number](request))


def explain(
    request: AllocationRequest,
    *,
    ours: str,
    theirs: str,
    our_score: int = 0,
    their_score: int = 0,
    numbers: Iterable[int] | None = None,
) -> tuple[Deviation, ...]:
    """Deviations (among ``numbers``) that can explain our answer against upstream's.

    ``ours``/``theirs`` are verdicts (allocated, unsatisfiable, error, timeout). Returns () when
    the answers do not differ in a way a deviation explains, or when no listed deviation's
    trigger is in the input.
    """
    candidates = present_in(request, numbers)
    if ours == "allocated" and theirs == "unsatisfiable":
        return tuple(d for d in candidates if d.upstream_refuses_more)
    if ours == "unsatisfiable" and theirs == "allocated":
        return tuple(d for d in candidates if d.upstream_accepts_more)
    if ours == theirs == "allocated" and our_score < their_score:
        return tuple(d for d in candidates if d.upstream_accepts_more)
    return ()
