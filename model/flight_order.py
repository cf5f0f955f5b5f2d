"""Nodes with allocations in flight, in a policy's visiting order, kept up to date across calls.

API:
- ``FlightOrder()``: owned by a caller that schedules call after call (the service's engine);
  ``visit_order`` (``model.schedule``) reads and updates it.
- ``FlightOrder.ordered(index, in_flight, generation, policy, full_last) -> (nodes, start)``:
  the nodes that have devices in flight (``FlightNodes``: iterated sorted by
  ``(no free device, *node_key)``, the key ``NodeIndex.preference_order`` gives the other
  nodes; ``name in nodes`` tells a node in flight), and how many nodes at the head of
  ``NodeIndex.preference_order`` are in flight.
- ``with_changes(base, changes)``: a copy of a table with the changes kept apart from it
  applied (None removes a key).

Why: the nodes a visit re-keys are those whose free units change with their devices in
flight. A scheduler holding thousands of reservations (pods assumed, bindings not yet seen)
re-keyed each of them on every call; this remembers every pool's in-flight fingerprint and
each node's key, and a call re-keys only the nodes whose pools changed since the last call.
One per snapshot: a new ``generation`` (other devices in use) starts again.
"""

from __future__ import annotations

import bisect
import heapq
import math
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol, TypeVar

from dra_solver.model.cluster import AllocatedState, DeviceID
from dra_solver.model.node_index import NodeIndex, PoolKey
from dra_solver.model.node_load import node_key

OrderKey = tuple[int, float, str]


class FlightState(Protocol):
    """What this reads of ``model.schedule.InFlight``."""

    def fingerprints(self) -> dict[PoolKey, bytes]: ...

    def changes_since(self, version: int) -> tuple[int, dict[PoolKey, bytes | None] | None]: ...

    def devices(self, pools: Iterable[PoolKey]) -> frozenset[DeviceID]: ...

    def state(self, pools: Iterable[PoolKey] | None = None) -> AllocatedState: ...


class FlightOrder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = -1
        self._version = -1
        """The in-flight state's version ``_fingerprints`` is known to hold (-1: unknown)."""
        self._fingerprints: dict[PoolKey, bytes] = {}
        self._pools_of: dict[str, tuple[PoolKey, ...]] = {}
        self._loads: dict[str, tuple[float, bool]] = {}
        """Node -> (free units, no free device) with its devices in flight."""
        self._orders: dict[tuple[str, bool], FlightNodes] = {}
        self._starts: dict[tuple[str, bool], int] = {}
        """How many nodes at the head of the snapshot's preference order are all in flight."""
        self._by_state: dict[tuple[bytes, bytes, tuple[bytes, ...]], tuple[float, bool]] = {}
        """A node's load by its state up to names (its devices, those in use, those in flight
        per pool): identical nodes fill up through the same states, so each is computed once."""

    def ordered(
        self, index: NodeIndex, in_flight: FlightState, generation: int, policy: str, full_last: bool
    ) -> tuple[FlightNodes, int]:
        """The nodes in flight as of this call (read-only: later calls make new ones, so the
        caller may iterate it lazily while they run), and how many nodes at the head of
        ``index.preference_order(policy, full_last)`` are in flight (all of them: the caller
        starts its walk of that order after them)."""
        with self._lock:
            if generation != self._generation:
                self._generation = generation
                self._version = -1
                self._fingerprints = {}
                self._pools_of = {}
                self._loads = {}
                self._orders = {}
                self._starts = {}
                self._by_state = {}
            self._update(index, in_flight, self._touched(in_flight))
            known = self._orders.get((policy, full_last))
            if known is None:
                known = self._orders[(policy, full_last)] = FlightNodes.of({name: self._key(name, policy, full_last) for name in self._loads})
            # Nodes fill in preference order, so the head of it is in flight: counted once, not
            # skipped one by one on every call.
            head = index.preference_order(policy, full_last=full_last)
            start = self._starts.get((policy, full_last), 0)
            while start < len(head) and head[start][1] in self._pools_of:
                start += 1
            self._starts[(policy, full_last)] = start
            return known, start

    def _touched(self, in_flight: FlightState) -> set[PoolKey]:
        """Pools whose in-flight state changed since the last call (``_fingerprints`` brought
        up to date): from the in-flight state's own record of changes since the version last
        seen (thousands of pools held, a few changed), else by comparing every pool's
        fingerprint."""
        # The version is read before any fingerprints: if these come from a later state (a
        # live store read again), the version kept is the older one, and its later changes
        # are applied to them again (harmless: the same values).
        current, changes = in_flight.changes_since(self._version)
        if changes is not None and self._version >= 0:
            self._version = current
            for pool, fingerprint in changes.items():
                if fingerprint is None:
                    self._fingerprints.pop(pool, None)
                else:
                    self._fingerprints[pool] = fingerprint
            return set(changes)
        fingerprints = in_flight.fingerprints()
        old = self._fingerprints
        touched = {p for p, fp in fingerprints.items() if old.get(p) != fp}
        touched.update(p for p in old if p not in fingerprints)
        self._fingerprints = dict(fingerprints)
        self._version = current
        return touched

    def _update(self, index: NodeIndex, in_flight: FlightState, touched: set[PoolKey]) -> None:
        if not touched:
            return
        fingerprints = self._fingerprints
        by_owner: dict[str, set[PoolKey]] = {}
        for pool in touched:
            owner = index.pool_node.get(pool)
            if owner and owner in index.views:
                by_owner.setdefault(owner, set()).add(pool)
        for name in sorted(by_owner):
            pools = tuple(sorted(p for p in {*self._pools_of.get(name, ()), *by_owner[name]} if p in fingerprints))
            if pools:
                self._pools_of[name] = pools
                # Fingerprints and in-use keys have the node's name factored out, like the shape.
                state = (index.views[name].shape, index.inuse_key(name), tuple(fingerprints[p] for p in pools))
                load = self._by_state.get(state)
                if load is None:
                    load = (index.free_units(name, in_flight.state(pools)), index.no_free_device(name, in_flight.devices(pools)))
                    if len(self._by_state) > 4 * len(index.views) + 64:
                        self._by_state.clear()
                    self._by_state[state] = load
                self._loads[name] = load
            else:
                self._pools_of.pop(name, None)
                self._loads.pop(name, None)
                self._starts = {}  # a node out of flight may be anywhere in the head
            for at, nodes in list(self._orders.items()):
                self._orders[at] = nodes.with_key(name, self._key(name, *at) if pools else None)

    def _key(self, name: str, policy: str, full_last: bool) -> OrderKey:
        free, full = self._loads[name]
        return (int(full_last and full), *node_key(policy, free, name))


_MISSING = object()

K = TypeVar("K")
V = TypeVar("V")


def with_changes(base: Mapping[K, V], changes: Mapping[K, V | None]) -> dict[K, V]:
    """A copy of ``base`` with ``changes`` applied (None: the key removed): how a table shared
    by successive reads takes in the changes kept apart from it (``FlightNodes`` here, the
    service's reservation reads)."""
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out

_RECENT_MIN = 8
"""Nodes re-keyed since a ``FlightNodes``' sorted base before a new base is made, at least
(more with a large base: see ``with_key``)."""


class FlightNodes:
    """Nodes in flight by their keys, as of one call: never changed once made (an update makes
    a new one), so a call iterates it lazily without copying it while others update.

    A sorted base shared by successive ones and the nodes re-keyed since (None: out of
    flight), kept sorted, about the square root of the base in number: copying every node in flight on each call (their references) cost
    a Schedule 37 us with 600 nodes in flight."""

    __slots__ = ("_added", "_base", "_base_keys", "_count", "_recent")

    def __init__(
        self, base: list[tuple[OrderKey, str]], base_keys: dict[str, OrderKey], recent: dict[str, OrderKey | None],
        added: tuple[tuple[OrderKey, str], ...], count: int,
    ) -> None:
        self._base = base
        self._base_keys = base_keys
        self._recent = recent
        self._added = added
        self._count = count

    @classmethod
    def of(cls, keys: dict[str, OrderKey]) -> FlightNodes:
        return cls(sorted((k, n) for n, k in keys.items()), keys, {}, (), len(keys))

    def key(self, name: str) -> OrderKey | None:
        got = self._recent.get(name, _MISSING)
        return self._base_keys.get(name) if got is _MISSING else got  # type: ignore[return-value]

    def with_key(self, name: str, key: OrderKey | None) -> FlightNodes:
        """This with ``name`` at ``key`` (None: out of flight)."""
        before = self.key(name)
        count = self._count + (key is not None) - (before is not None)
        added = self._added
        was = self._recent.get(name)
        if was is not None:
            at = bisect.bisect_left(added, (was, name))
            added = added[:at] + added[at + 1:]
        if key is not None:
            at = bisect.bisect_left(added, (key, name))
            added = (*added[:at], (key, name), *added[at:])
        recent = {**self._recent, name: key}
        # Kept apart up to about the square root of the base: a call copies this many, and a
        # new base (sorting every node in flight) comes once in as many re-keyed nodes.
        if len(recent) > max(_RECENT_MIN, math.isqrt(len(self._base))):
            return FlightNodes.of(with_changes(self._base_keys, recent))
        return FlightNodes(self._base, self._base_keys, recent, added, count)

    def __iter__(self) -> Iterator[tuple[OrderKey, str]]:
        recent = self._recent
        if not recent:
            return iter(self._base)
        return heapq.merge((e for e in self._base if e[1] not in recent), self._added)

    def __contains__(self, name: object) -> bool:
        return self.key(name) is not None  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self._count
