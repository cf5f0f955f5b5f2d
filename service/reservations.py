"""Allocations held in flight, so concurrent callers never get the same device.

Like the scheduler's assume cache: between "the solver chose these devices" and "the API shows
the claim allocated", a reservation makes every later solve see those devices as in use. A
reservation ends when it is released, when its TTL passes, or when a new inventory snapshot
shows all its claims allocated (the API now holds the devices itself).

Reservations are indexed by pool so that whole-cluster scheduling can fingerprint a node's
in-flight devices without scanning every reservation. ``enabled=False`` turns tracking off
(reserve then records nothing); it exists to prove, in tests, that tracking is what prevents
double allocation.

A gang's answer is one reservation (``reserve_group``): every device of every pod and shared
claim, on every node, held and released together.

Reservations are bounded: at most ``max_total`` held at once and ``max_per_caller`` per caller
(the client certificate's name, else the peer host); a new one beyond either limit is refused
with :class:`ReservationLimit` (RESOURCE_EXHAUSTED) instead of growing without end. Refreshing
a reservation already held never counts against the limits.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from dra_solver.model import AllocatedState, DeviceID, PoolKey, state_key, with_changes
from dra_solver.service.inventory import Snapshot


@dataclass(frozen=True, slots=True)
class Reservation:
    id: str
    node: str
    claims: tuple[tuple[str, str], ...]
    """(namespace/name, uid) of each claim held."""
    state: AllocatedState
    """The devices, shares and capacity the allocation takes."""
    expires_at: float
    pod: str = ""
    caller: str = ""
    """Who asked for it (per-caller limit)."""
    nodes: tuple[str, ...] = ()
    """A gang's reservation (``reserve_group``): every node its pods go to (``node`` is "")."""
    pod_group: str = ""

    @property
    def claim_refs(self) -> tuple[str, ...]:
        return tuple(ref for ref, _ in self.claims)

    def pools(self) -> set[PoolKey]:
        pools = {(d.driver, d.pool) for d in self.state.devices}
        pools.update((d.driver, d.pool) for d, _ in self.state.shared)
        pools.update((d.driver, d.pool) for d in self.state.capacity)
        return pools


class ReservationConflict(Exception):
    """The allocation takes a device already held; solve again."""


class ReservationLimit(Exception):
    """Too many reservations held (in total or by this caller); release some or wait."""


DEFAULT_MAX_TOTAL = 10_000
DEFAULT_MAX_PER_CALLER = 2_000


class UnknownReservation(Exception):
    """No reservation with that id (or for those claims)."""


PoolState = tuple[AllocatedState, bytes]
"""A pool's devices in flight and the fingerprint of that state."""

_HISTORY_MAX = 64
"""Reads a read remembers the changes from: a caller that last looked further back compares
every pool's fingerprint instead."""

_RECENT_MAX = 64
"""Pools a read keeps apart from its base table before one is made with them: a read costs
O(this) plus, once in this many changes, O(pools held)."""


class HeldNow:
    """``model.InFlight`` over one read of a ``ReservationStore`` (``now()``): what a Schedule
    call visits nodes with, without taking the store's lock for every node. ``version`` is the
    store's at the read, so a reservation made from an answer is checked again when the store
    changed since (``ReservationStore.reserve(solved_at=...)``).

    ``history``: the last reads' versions and the pools each changed, so that a caller that
    kept what it derived from one of them (``model.FlightOrder``) re-reads only the pools
    changed since (``changes_since``), even when other reads came in between (a reservation
    made or expired by the same call).

    Pool states are a base table shared by successive reads (never changed once made) and the
    pools changed since it (``None``: no longer held), so that a read after a change costs
    O(changes since the base), not a copy of every pool held: a scheduler holding thousands
    of pods' devices changes one pool per call."""

    def __init__(
        self, version: int, pools: dict[PoolKey, PoolState], *, history: tuple[tuple[int, frozenset[PoolKey]], ...] = (),
        recent: dict[PoolKey, PoolState | None] | None = None, count: int | None = None,
    ) -> None:
        self.version = version
        self._table = pools
        self._recent: dict[PoolKey, PoolState | None] = recent or {}
        self._count = len(pools) if count is None else count
        self._history = history
        """(version of a read before this one, the pools changed from it to the next read),
        oldest first, the last one leading to this read."""
        self._keys = _HeldPools(self)

    def then(self, version: int, changes: dict[PoolKey, PoolState | None], changed: frozenset[PoolKey]) -> HeldNow:
        """The read after this one: ``changes`` (a pool's new state, or None when it holds
        nothing any more) on top of this read's pools."""
        recent = {**self._recent, **changes}
        count = self._count
        for pool, entry in changes.items():
            count += (entry is not None) - (self._entry(pool) is not None)
        table = self._table
        if len(recent) > _RECENT_MAX:
            table, recent = with_changes(table, recent), {}
        history = (*self._history[1 - _HISTORY_MAX:], (self.version, changed))
        return HeldNow(version, table, history=history, recent=recent, count=count)

    def _entry(self, pool: PoolKey) -> PoolState | None:
        entry = self._recent.get(pool, _ABSENT)
        return self._table.get(pool) if entry is _ABSENT else entry  # type: ignore[return-value]

    def _items(self) -> Iterable[tuple[PoolKey, PoolState]]:
        recent = self._recent
        for pool, entry in self._table.items():
            if pool not in recent:
                yield pool, entry
        for pool, maybe in recent.items():
            if maybe is not None:
                yield pool, maybe

    def held_pools(self) -> AbstractSet[PoolKey]:
        return self._keys

    def fingerprints(self) -> dict[PoolKey, bytes]:
        return {p: entry[1] for p, entry in self._items()}

    def changes_since(self, version: int) -> tuple[int, dict[PoolKey, bytes | None] | None]:
        if version == self.version:
            return self.version, {}
        pools: set[PoolKey] = set()
        for base, changed in reversed(self._history):
            pools |= changed
            if base == version:
                return self.version, {p: (entry[1] if (entry := self._entry(p)) is not None else None) for p in pools}
            if base < version:
                break
        return self.version, None

    def devices(self, pools: Iterable[PoolKey]) -> frozenset[DeviceID]:
        held = [entry[0].devices for p in pools if (entry := self._entry(p)) is not None]
        if not held:
            return frozenset()
        return held[0] if len(held) == 1 else frozenset().union(*held)

    def pool_keys(self, pools: Iterable[PoolKey]) -> tuple[bytes, ...]:
        return tuple(entry[1] for p in pools if (entry := self._entry(p)) is not None)

    def state(self, pools: Iterable[PoolKey] | None = None) -> AllocatedState:
        if pools is None:
            held = [entry[0] for _, entry in self._items()]
        else:
            held = [found[0] for pool in pools if (found := self._entry(pool)) is not None]
        if not held:
            return _NOTHING_HELD
        out = held[0]  # states are immutable: one pool's is returned as it is
        for more in held[1:]:
            out = out.merge(more)
        return out


_NOTHING_HELD = AllocatedState()


_ABSENT = object()


class _HeldPools(AbstractSet[PoolKey]):
    """The pools a read holds devices in, as a set (read-only, like the read)."""

    __slots__ = ("_read",)

    def __init__(self, read: HeldNow) -> None:
        self._read = read

    def __contains__(self, pool: object) -> bool:
        return self._read._entry(pool) is not None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[PoolKey]:
        return (pool for pool, _ in self._read._items())

    def __len__(self) -> int:
        return self._read._count

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        entry = self._read._entry
        return not any(entry(pool) is not None for pool in other)


@dataclass
class _PoolEntry:
    ids: set[str] = field(default_factory=set)
    cached: tuple[AllocatedState, bytes] | None = None
    node: str = ""
    """The node ``cached``'s fingerprint factors out (``_pool_state``)."""


class ReservationStore:
    def __init__(
        self,
        *,
        enabled: bool = True,
        default_ttl: float = 30.0,
        max_ttl: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, int], None] | None = None,
        max_total: int = DEFAULT_MAX_TOTAL,
        max_per_caller: int = DEFAULT_MAX_PER_CALLER,
    ) -> None:
        self.enabled = enabled
        self.max_total = max_total
        self.max_per_caller = max_per_caller
        self._per_caller: dict[str, int] = {}
        self.default_ttl = default_ttl
        self.max_ttl = max_ttl
        self._clock = clock
        self._lock = threading.RLock()
        self._by_id: dict[str, Reservation] = {}
        self._by_claim: dict[str, str] = {}
        self._by_pool: dict[PoolKey, _PoolEntry] = {}
        self._seen: dict[str, set[str]] = {}
        """Reservation id -> its claims already seen in an inventory snapshot."""
        self._expiry: list[tuple[float, str]] = []
        self._ids = itertools.count(1)
        self.version = 0
        """Bumped on every change; an answer solved at the current version needs no re-check."""
        self._grown_at = 0
        """The version of the last reservation added. Changes after an answer's version that
        only took reservations away (expired, released, allocated) cannot make it conflict:
        what it must share devices, capacity and counters with only shrank."""
        self._held_now: HeldNow | None = None
        """The last ``now()``; the next one copies it and re-reads only the pools changed since."""
        self._changed: set[PoolKey] = set()
        """Pools whose reservations changed (or that gained their first or lost their last)
        since the last ``now()``."""
        self.on_change = on_change
        """Called with (event, count): reserved, released, expired, allocated, conflict."""

    # --- queries ---------------------------------------------------------------------------

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._by_id)

    def count_unlocked(self) -> int:
        """The number held, without expiring (safe from within ``on_change``)."""
        return len(self._by_id)

    def get(self, reservation_id: str) -> Reservation | None:
        with self._lock:
            self._expire()
            return self._by_id.get(reservation_id)

    def all(self) -> list[Reservation]:
        with self._lock:
            self._expire()
            return sorted(self._by_id.values(), key=lambda r: r.id)

    def held_claims(self, refs: Iterable[str]) -> list[str]:
        """Which of ``refs`` (namespace/name) a reservation holds."""
        with self._lock:
            self._expire()
            return [ref for ref in refs if ref in self._by_claim]

    # The reads below are ``now()``'s (one read, kept until the next change).

    def held_pools(self) -> AbstractSet[PoolKey]:
        """Pools with devices in flight."""
        return self.now().held_pools()

    def state(self, pools: Iterable[PoolKey] | None = None) -> AllocatedState:
        """In-flight devices, of every pool or of the given ones."""
        return self.now().state(pools)

    def devices(self, pools: Iterable[PoolKey]) -> frozenset[DeviceID]:
        """Exclusive devices held in the given pools."""
        return self.now().devices(pools)

    def pool_keys(self, pools: Iterable[PoolKey]) -> tuple[bytes, ...]:
        """Fingerprints of the in-flight state of each given pool that has any (grouping)."""
        return self.now().pool_keys(pools)

    def fingerprints(self) -> dict[PoolKey, bytes]:
        """Every pool with devices in flight -> the fingerprint of its in-flight state."""
        return self.now().fingerprints()

    def changes_since(self, version: int) -> tuple[int, dict[PoolKey, bytes | None] | None]:
        """See ``model.InFlight.changes_since``."""
        return self.now().changes_since(version)

    def now(self) -> HeldNow:
        """The allocations in flight as of this moment (one lock, per-pool states cached)."""
        with self._lock:
            self._expire()
            last = self._held_now
            if last is not None and last.version == self.version:
                return last
            changed = frozenset(self._changed)
            self._changed.clear()
            if last is None:
                self._held_now = HeldNow(self.version, {p: self._pool_state(p) for p in sorted(self._by_pool)})
            else:
                # Only the changed pools are read again (a Schedule with reserve changes one
                # pool, while hundreds may hold devices).
                changes = {p: self._pool_state(p) if p in self._by_pool else None for p in sorted(changed)}
                self._held_now = last.then(self.version, changes, changed)
            return self._held_now

    def holders(self) -> dict[DeviceID, str]:
        """Device -> "reserved for <claims>" (explanations)."""
        with self._lock:
            self._expire()
            out: dict[DeviceID, str] = {}
            for r in self._by_id.values():
                for d in r.state.devices:
                    out[d] = ", ".join(r.claim_refs)
            return out

    def _pool_state(self, pool: PoolKey) -> tuple[AllocatedState, bytes]:
        entry = self._by_pool[pool]
        if entry.cached is None:
            parts: list[AllocatedState] = []
            node = ""
            for rid in sorted(entry.ids):
                r = self._by_id[rid]
                node = node or r.node
                parts.append(_restrict(r.state, pool))
            # One pass, not a merge per reservation: each merge copied the sum so far, and a
            # pool's state is built again whenever one of its reservations comes or goes.
            state = AllocatedState.union(parts) if parts else AllocatedState()
            entry.cached = (state, state_key(state, node))
            entry.node = node
        return entry.cached

    # --- changes ---------------------------------------------------------------------------

    def reserve(
        self,
        *,
        node: str,
        claims: Iterable[tuple[str, str]],
        state: AllocatedState,
        taken: AllocatedState,
        ttl: float = 0.0,
        pod: str = "",
        validate: Callable[[AllocatedState], None] | None = None,
        solved_at: int | None = None,
        caller: str = "",
        nodes: tuple[str, ...] = (),
        pod_group: str = "",
        latest_taken: Callable[[], AllocatedState] | None = None,
    ) -> Reservation:
        """Hold ``state`` for ``claims``; atomic with respect to every other reservation.

        ``solved_at``: the version the allocation was solved against; when no reservation was
        added since, it already accounts for every other reservation (some may have ended since,
        which only frees what it shares) and ``validate`` is skipped.
        ``taken``: what the inventory snapshot already shows in use. Raises
        ReservationConflict when an exclusive device is already in use or held, or when
        ``validate`` (given the other in-flight state) rejects the allocation.
        ``latest_taken``: what the newest snapshot shows in use, read under the lock. A snapshot
        that shows a reservation's claims allocated ends the reservation (:meth:`observe`); an
        allocation solved on an older snapshot would otherwise find neither the reservation nor
        the allocation that replaced it, and take the device a second time.
        """
        claims = tuple(claims)
        ttl = min(ttl if ttl > 0 else self.default_ttl, self.max_ttl)
        with self._lock:
            self._expire()
            now = self._clock()
            if not self.enabled:
                return Reservation(f"r{next(self._ids)}", node, claims, state, now + ttl, pod, nodes=nodes, pod_group=pod_group)
            for ref, _ in claims:
                held = self._by_claim.get(ref)
                if held is not None:
                    existing = self._by_id[held]
                    if existing.state == state and existing.claims == claims:
                        return self._refresh(existing, now + ttl)
                    self._notify("conflict", 1)
                    raise ReservationConflict(f"claim {ref} is already reserved ({held}) with other devices")
            if len(self._by_id) >= self.max_total:
                self._notify("limited", 1)
                raise ReservationLimit(f"too many reservations in flight: {len(self._by_id)} held, at most {self.max_total} (serve --max-reservations); release or let some expire")
            mine = self._per_caller.get(caller, 0)
            if mine >= self.max_per_caller:
                self._notify("limited", 1)
                raise ReservationLimit(f"too many reservations in flight for this caller: {mine} held, at most {self.max_per_caller} (serve --max-reservations-per-caller); release or let some expire")
            others = self.state(_pools_of(state))
            latest = latest_taken() if latest_taken is not None else taken
            for dev in sorted(state.devices):
                if dev in taken.devices or dev in latest.devices:
                    self._notify("conflict", 1)
                    raise ReservationConflict(f"device {dev} is already allocated")
                if dev in others.devices:
                    holder = next((r for r in self._by_id.values() if dev in r.state.devices), None)
                    self._notify("conflict", 1)
                    who = f" for claim {', '.join(holder.claim_refs)}" if holder else ""
                    raise ReservationConflict(f"device {dev} is already reserved{who}")
            if validate is not None and (solved_at is None or self._grown_at > solved_at):
                try:
                    validate(others)
                except ReservationConflict:
                    self._notify("conflict", 1)
                    raise
            r = Reservation(f"r{next(self._ids)}", node, claims, state, now + ttl, pod, caller, nodes, pod_group)
            self._add(r)
            self._notify("reserved", 1)
            return r

    def reserve_group(
        self,
        *,
        pod_group: str,
        nodes: Iterable[str],
        claims: Iterable[tuple[str, str]],
        state: AllocatedState,
        taken: AllocatedState,
        ttl: float = 0.0,
        validate: Callable[[AllocatedState], None] | None = None,
        solved_at: int | None = None,
        caller: str = "",
        latest_taken: Callable[[], AllocatedState] | None = None,
    ) -> Reservation:
        """Hold a gang's whole answer (every pod's and shared claim's devices, on every node)
        under one id: taken or refused as a whole, released as a whole (``release``)."""
        return self.reserve(
            node="",
            claims=claims,
            state=state,
            taken=taken,
            ttl=ttl,
            pod=pod_group,
            validate=validate,
            solved_at=solved_at,
            caller=caller,
            nodes=tuple(sorted(set(nodes))),
            pod_group=pod_group,
            latest_taken=latest_taken,
        )

    def release(self, reservation_id: str = "", *, claims: Iterable[str] = ()) -> int:
        with self._lock:
            ids = set()
            if reservation_id:
                if reservation_id not in self._by_id:
                    raise UnknownReservation(f"reservation {reservation_id} not found")
                ids.add(reservation_id)
            for ref in claims:
                rid = self._by_claim.get(ref)
                if rid is not None:
                    ids.add(rid)
            if not ids and not reservation_id and claims:
                raise UnknownReservation(f"no reservation holds {', '.join(sorted(claims))}")
            for rid in ids:
                self._remove(rid)
            if ids:
                self._notify("released", len(ids))
            return len(ids)

    def supersede(self, claims: Iterable[str], caller: str, pod: str = "") -> int:
        """Release ``caller``'s reservations that hold only claims among ``claims``
        (namespace/name): the caller is scheduling those claims again, so its earlier answer
        for them no longer stands (as upstream's scheduler forgets an assumed claim when its
        pod goes back to the queue). Another caller's reservation is left alone: a second
        scheduler asking for the same claims still gets ABORTED when it reserves. When both
        name their pod, only a hold for the same pod is released (callers without TLS are told
        apart by their host only: two schedulers on one host are one caller)."""
        asked = set(claims)
        with self._lock:
            self._expire()
            ids = {rid for ref in asked if (rid := self._by_claim.get(ref)) is not None}
            mine = [
                rid for rid in sorted(ids)
                if (r := self._by_id[rid]).caller == caller and set(r.claim_refs) <= asked and (not pod or not r.pod or r.pod == pod)
            ]
            for rid in mine:
                self._remove(rid)
            if mine:
                self._notify("released", len(mine))
            return len(mine)

    def observe(self, snapshot: Snapshot) -> int:
        """Listener: drop reservations whose claims the snapshot shows allocated (the API holds
        the devices now), or whose claims were seen in an earlier snapshot and are gone
        (deleted before they were allocated). Claims never seen in the inventory (callers that
        bring their own) are held until released or expired."""
        with self._lock:
            if not self._by_id:
                return 0
        present = snapshot.claims_by_ref()
        with self._lock:
            done: list[str] = []
            gone: list[str] = []
            for r in self._by_id.values():
                if r.claims and all(snapshot.shows_allocated(ref, uid) for ref, uid in r.claims):
                    done.append(r.id)
                    continue
                seen = self._seen.setdefault(r.id, set())
                if any(ref in seen and ref not in present for ref in r.claim_refs):
                    gone.append(r.id)
                    continue
                seen.update(ref for ref in r.claim_refs if ref in present)
            for rid in done + gone:
                self._remove(rid)
            if done:
                self._notify("allocated", len(done))
            if gone:
                self._notify("deleted", len(gone))
            return len(done) + len(gone)

    def _refresh(self, r: Reservation, expires_at: float) -> Reservation:
        fresh = replace(r, expires_at=expires_at)
        self._by_id[r.id] = fresh
        heapq.heappush(self._expiry, (expires_at, r.id))
        return fresh

    def _add(self, r: Reservation) -> None:
        self.version += 1
        self._grown_at = self.version
        self._by_id[r.id] = r
        self._per_caller[r.caller] = self._per_caller.get(r.caller, 0) + 1
        for ref, _ in r.claims:
            self._by_claim[ref] = r.id
        for pool in r.pools():
            entry = self._by_pool.get(pool)
            if entry is None:
                entry = self._by_pool[pool] = _PoolEntry()
            entry.ids.add(r.id)
            mine = _restrict(r.state, pool)
            if entry.cached is not None and not mine.capacity and (not r.node or not entry.node or r.node == entry.node):
                # One more reservation in a held pool: merged into the pool's state rather than
                # the pool rebuilt from all of them (a node filling up holds dozens). Sets are
                # merged in any order alike; consumed capacity (sums) is left to a rebuild. The
                # fingerprint's node is a rebuild's: the only one named.
                state = entry.cached[0].merge(mine)
                entry.node = entry.node or r.node
                entry.cached = (state, state_key(state, entry.node))
            else:
                entry.cached = None
            self._changed.add(pool)
        heapq.heappush(self._expiry, (r.expires_at, r.id))

    def _remove(self, rid: str) -> None:
        r = self._by_id.pop(rid, None)
        if r is None:
            return
        self.version += 1
        self._seen.pop(rid, None)
        left = self._per_caller.get(r.caller, 0) - 1
        if left > 0:
            self._per_caller[r.caller] = left
        else:
            self._per_caller.pop(r.caller, None)
        for ref, _ in r.claims:
            if self._by_claim.get(ref) == rid:
                del self._by_claim[ref]
        for pool in r.pools():
            entry = self._by_pool.get(pool)
            if entry is None:
                continue
            entry.ids.discard(rid)
            entry.cached = None
            self._changed.add(pool)
            if not entry.ids:
                del self._by_pool[pool]

    def _expire(self) -> None:
        now = self._clock()
        expired = 0
        while self._expiry and self._expiry[0][0] <= now:
            at, rid = heapq.heappop(self._expiry)
            r = self._by_id.get(rid)
            if r is not None and r.expires_at == at:
                self._remove(rid)
                expired += 1
        if expired:
            self._notify("expired", expired)

    def _notify(self, event: str, count: int) -> None:
        if self.on_change is not None:
            self.on_change(event, count)


def _pools_of(state: AllocatedState) -> set[PoolKey]:
    pools = {(d.driver, d.pool) for d in state.devices}
    pools.update((d.driver, d.pool) for d, _ in state.shared)
    pools.update((d.driver, d.pool) for d in state.capacity)
    return pools


def _restrict(state: AllocatedState, pool: PoolKey) -> AllocatedState:
    """``state``'s part in ``pool``: the state itself when all of it is there (most
    reservations hold one pool's devices)."""
    if _pools_of(state) == {pool}:
        return state

    def mine(d: DeviceID) -> bool:
        return (d.driver, d.pool) == pool

    capacity = {d: a for d, a in state.capacity.items() if mine(d)}
    return AllocatedState(
        frozenset(d for d in state.devices if mine(d)),
        frozenset((d, s) for d, s in state.shared if mine(d)),
        capacity,
    )
