"""Nodes with allocations in flight, in a policy's visiting order, kept up to date across calls.

API:
- ``FlightOrder()``: owned by a caller that schedules call after call (the service's engine);
  ``visit_order`` (``model.schedule``) reads and updates it.
- ``FlightOrder.ordered(index, in_flight, generation, policy, full_last) -> (order, pools_of)``:
  the nodes that have devices in flight, sorted by ``(no free device, *node_key)`` (the key
  ``NodeIndex.preference_order`` gives the other nodes), and each one's pools in flight.

Why: the nodes a visit re-keys are those whose free units change with their devices in
flight. A scheduler holding thousands of reservations (pods assumed, bindings not yet seen)
re-keyed each of them on every call; this remembers every pool's in-flight fingerprint and
each node's key, and a call re-keys only the nodes whose pools changed since the last call.
One per snapshot: a new ``generation`` (other devices in use) starts again.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from typing import Protocol

from dra_solver.model.cluster import AllocatedState, DeviceID
from dra_solver.model.node_index import NodeIndex, PoolKey
from dra_solver.model.node_load import node_key

OrderKey = tuple[int, float, str]


class FlightState(Protocol):
    """What this reads of ``model.schedule.InFlight``."""

    def fingerprints(self) -> dict[PoolKey, bytes]: ...

    def devices(self, pools: Iterable[PoolKey]) -> frozenset[DeviceID]: ...

    def state(self, pools: Iterable[PoolKey] | None = None) -> AllocatedState: ...


class FlightOrder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = -1
        self._fingerprints: dict[PoolKey, bytes] = {}
        self._pools_of: dict[str, tuple[PoolKey, ...]] = {}
        self._loads: dict[str, tuple[float, bool]] = {}
        """Node -> (free units, no free device) with its devices in flight."""
        self._orders: dict[tuple[str, bool], tuple[list[tuple[OrderKey, str]], dict[str, OrderKey]]] = {}

    def ordered(
        self, index: NodeIndex, in_flight: FlightState, generation: int, policy: str, full_last: bool
    ) -> tuple[list[tuple[OrderKey, str]], dict[str, tuple[PoolKey, ...]]]:
        """Copies (the caller iterates them lazily while other calls update this)."""
        fingerprints = in_flight.fingerprints()
        with self._lock:
            self._update(index, in_flight, generation, fingerprints)
            known = self._orders.get((policy, full_last))
            if known is None:
                keys = {name: self._key(name, policy, full_last) for name in self._loads}
                known = self._orders[(policy, full_last)] = (sorted((k, n) for n, k in keys.items()), keys)
            return list(known[0]), dict(self._pools_of)

    def _update(self, index: NodeIndex, in_flight: FlightState, generation: int, fingerprints: dict[PoolKey, bytes]) -> None:
        if generation != self._generation:
            self._generation = generation
            self._fingerprints = {}
            self._pools_of = {}
            self._loads = {}
            self._orders = {}
        old = self._fingerprints
        touched = {p for p, fp in fingerprints.items() if old.get(p) != fp}
        touched.update(p for p in old if p not in fingerprints)
        self._fingerprints = fingerprints
        if not touched:
            return
        by_owner: dict[str, set[PoolKey]] = {}
        for pool in touched:
            owner = index.pool_node.get(pool)
            if owner and owner in index.views:
                by_owner.setdefault(owner, set()).add(pool)
        for name in sorted(by_owner):
            pools = tuple(sorted(p for p in {*self._pools_of.get(name, ()), *by_owner[name]} if p in fingerprints))
            if pools:
                self._pools_of[name] = pools
                self._loads[name] = (
                    index.free_units(name, in_flight.state(pools)),
                    index.no_free_device(name, in_flight.devices(pools)),
                )
            else:
                self._pools_of.pop(name, None)
                self._loads.pop(name, None)
            for (policy, full_last), (order, keys) in self._orders.items():
                previous = keys.pop(name, None)
                if previous is not None:
                    del order[bisect.bisect_left(order, (previous, name))]
                if pools:
                    key = keys[name] = self._key(name, policy, full_last)
                    bisect.insort(order, (key, name))

    def _key(self, name: str, policy: str, full_last: bool) -> OrderKey:
        free, full = self._loads[name]
        return (int(full_last and full), *node_key(policy, free, name))
