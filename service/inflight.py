"""A caller's in-flight allocations: what makes solver replicas interchangeable.

A scheduler keeps, like upstream's assume cache, every claim allocation it has decided but
the API server has not shown back yet. When it sends them with each call (``in_flight``, and
``in_flight_complete`` to say it sent them all), a replica needs no memory of its own to
avoid handing the same device out twice: the devices in use are the inventory's claims plus
the caller's in-flight ones. Any replica then gives the same answer, and a replica that
restarts loses nothing (docs/replicas.md).

The merge follows the assume cache's rule: a claim the inventory shows allocated under the
same uid is counted from the inventory (it is the newer copy, or equal); otherwise the
caller's copy counts. Other callers' per-replica reservations still count (they may not send
theirs). :class:`Overlay` presents the sum to the node choice (``model.InFlight``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from dra_solver.model import AllocatedState, DeviceID, PoolKey, state_key
from dra_solver.model import objects as o
from dra_solver.service.inventory import Snapshot
from dra_solver.service.reservations import ReservationStore

MAX_IN_FLIGHT = 4096
"""In-flight claims per call (RESOURCE_EXHAUSTED beyond)."""


@dataclass(frozen=True, slots=True)
class FlightClaim:
    """One in-flight claim as the merge needs it."""

    ref: str
    uid: str
    state: AllocatedState


@dataclass(frozen=True, slots=True)
class CallerFlight:
    """What a call says about its caller's in-flight allocations."""

    claims: tuple[FlightClaim, ...] = ()
    complete: bool = False
    """The caller sends all it has in flight: keep no reservation for it."""

    @property
    def stateless(self) -> bool:
        return self.complete

    def state(self, snap: Snapshot, *, excluding: Iterable[str] = ()) -> AllocatedState:
        """The devices these claims take beyond what ``snap`` already shows (the snapshot's copy
        of a claim with the same uid wins), leaving out the claims named in ``excluding``."""
        if not self.claims:
            return AllocatedState()
        skip = set(excluding)
        counted: list[AllocatedState] = []
        for c in self.claims:
            if c.ref in skip:
                continue
            if snap.shows_allocated(c.ref, c.uid):
                continue  # the API server has it now
            counted.append(c.state)
        return AllocatedState.union(counted)


NO_FLIGHT = CallerFlight()


class FlightDecoder:
    """Decoded in-flight claims by their bytes (a scheduler resends the same ones on every call
    until the API server shows them back), least recently used forgotten first."""

    def __init__(self, size: int = 16_384) -> None:
        self._size = size
        self._entries: OrderedDict[bytes, FlightClaim] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, blob: bytes) -> FlightClaim | None:
        with self._lock:
            hit = self._entries.get(blob)
            if hit is not None:
                self._entries.move_to_end(blob)
            return hit

    def put(self, blob: bytes, claim: FlightClaim) -> None:
        with self._lock:
            self._entries[blob] = claim
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


def flight_claim(claim: o.ResourceClaim) -> FlightClaim:
    return FlightClaim(claim.ref, claim.metadata.uid or "", AllocatedState.from_claims([claim]))


class Overlay:
    """``model.InFlight`` over the replica's reservations plus a caller's in-flight devices.

    Per-pool fingerprints of pools the caller touches are taken over the sum (marked so they
    never equal a reservation-only fingerprint); other pools keep the store's. The store is
    read once, when the overlay is made: fingerprints and the states they stand for then come
    from the same read (what is kept by fingerprint, such as a node's load, relies on it).
    """

    def __init__(self, store: ReservationStore, extra: AllocatedState) -> None:
        self._store = store.now()
        self._extra = extra
        self._extra_pools = _pools_of(extra)
        self._held = frozenset(self._store.held_pools()) | self._extra_pools
        self.version = self._store.version

    def held_pools(self) -> AbstractSet[PoolKey]:
        return self._held

    def fingerprints(self) -> dict[PoolKey, bytes]:
        out = self._store.fingerprints()
        for pool in sorted(self._extra_pools):
            out[pool] = self._caller_pool_key(pool)
        return out

    def changes_since(self, version: int) -> tuple[int, dict[PoolKey, bytes | None] | None]:
        return -1, None  # the caller's devices are not versioned: fingerprints are compared

    def _caller_pool_key(self, pool: PoolKey) -> bytes:
        return b"+" + state_key(self.state([pool]), "")

    def devices(self, pools: Iterable[PoolKey]) -> frozenset[DeviceID]:
        wanted = set(pools)
        mine = frozenset(d for d in self._extra.devices if (d.driver, d.pool) in wanted)
        return self._store.devices(wanted) | mine

    def pool_keys(self, pools: Iterable[PoolKey]) -> tuple[bytes, ...]:
        out: list[bytes] = []
        for pool in pools:
            if pool in self._extra_pools:
                out.append(self._caller_pool_key(pool))
            else:
                out.extend(self._store.pool_keys([pool]))
        return tuple(out)

    def state(self, pools: Iterable[PoolKey] | None = None) -> AllocatedState:
        if pools is None:
            return self._store.state().merge(self._extra)
        pools = list(pools)
        return self._store.state(pools).merge(self._extra.restricted_to(set(pools)))


def _pools_of(state: AllocatedState) -> set[PoolKey]:
    pools = {(d.driver, d.pool) for d in state.devices}
    pools.update((d.driver, d.pool) for d, _ in state.shared)
    pools.update((d.driver, d.pool) for d in state.capacity)
    return pools


def subtract(state: AllocatedState, claims: Sequence[o.ResourceClaim]) -> AllocatedState:
    """``state`` without what ``claims`` (allocated) take: exclusive devices and shares exactly;
    consumed capacity is left as is (counted twice errs on the safe side)."""
    own = AllocatedState.from_claims(claims)
    return AllocatedState(state.devices - own.devices, state.shared - own.shared, state.capacity)
