"""A work queue with client-go's guarantees: keys are deduplicated, one key is never processed
by two workers at once, a key added while it is being processed is processed again afterwards,
and failures are retried with per-key exponential backoff.

Controllers put object keys (``namespace/name``) in, not objects: a worker always reads the
newest copy from the cache, so ten events for one object cost one sync.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ExponentialBackoff(Generic[K]):
    """Per-key delay ``base * 2**failures``, capped at ``cap`` (client-go's
    ItemExponentialFailureRateLimiter); ``forget`` resets a key after a success."""

    def __init__(self, *, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[K, int] = {}
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        with self._lock:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        return min(self.cap, self.base * (2.0**n))

    def current(self, key: K) -> float:
        """The delay the key's last failure got (0 when it has not failed since ``forget``)."""
        with self._lock:
            n = self._failures.get(key, 0)
        return 0.0 if n == 0 else min(self.cap, self.base * (2.0 ** (n - 1)))

    def failures(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)


class WorkQueue(Generic[K]):
    def __init__(
        self,
        name: str,
        *,
        backoff: ExponentialBackoff[K] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_depth: Callable[[int], None] | None = None,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        self.name = name
        self.backoff: ExponentialBackoff[K] = backoff or ExponentialBackoff()
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: list[K] = []
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []
        self._ready_at: dict[K, float] = {}
        """Key -> when it leaves ``_waiting`` (a heap entry with another time is stale)."""
        self._seq = itertools.count()
        self._shutdown = False
        self._on_depth = on_depth
        self._on_wait = on_wait
        self._queued_at: dict[K, float] = {}
        """Key -> when it entered the ready queue (for ``on_wait``: client-go's queue duration)."""

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def add(self, key: K) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: K) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._enqueue_locked(key)
        if self._on_depth:
            self._on_depth(len(self._queue))

    def _enqueue_locked(self, key: K) -> None:
        self._queue.append(key)
        if self._on_wait:
            self._queued_at[key] = self._clock()
        self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed (at once for ``delay <= 0``). A key
        already waiting keeps the earlier of its two times (client-go's delaying queue), so a
        retry and an event for the same key run it once."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            at = self._clock() + delay
            if self._ready_at.get(key, at + 1) <= at:
                return
            self._ready_at[key] = at
            heapq.heappush(self._waiting, (at, next(self._seq), key))
            self._cond.notify_all()

    def add_rate_limited(self, key: K) -> None:
        self.add_after(key, self.backoff.when(key))

    def add_unless_backing_off(self, key: K) -> None:
        """An event about ``key``: run it now, or, when its last sync failed, no sooner than that
        failure's backoff. Without this, a failed sync whose own writes (or rollback) raise
        events about the key would retry at once, in a loop, however the failure repeats."""
        self.add_after(key, self.backoff.current(key))

    def forget(self, key: K) -> None:
        self.backoff.forget(key)

    def _promote_locked(self) -> float | None:
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            at, _, key = heapq.heappop(self._waiting)
            if self._ready_at.get(key) == at:
                del self._ready_at[key]
                self._add_locked(key)
        return self._waiting[0][0] - now if self._waiting else None

    def get(self, timeout: float | None = None) -> K | None:
        """The next key (now marked processing), or None on shutdown or timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                wait_for = self._promote_locked()
                if self._queue:
                    key = self._queue.pop(0)
                    self._processing.add(key)
                    self._dirty.discard(key)
                    queued = self._queued_at.pop(key, None)
                    if self._on_wait and queued is not None:
                        self._on_wait(self._clock() - queued)
                    if self._on_depth:
                        self._on_depth(len(self._queue))
                    return key
                if self._shutdown:
                    return None
                if deadline is not None:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return None
                    wait_for = remaining if wait_for is None else min(wait_for, remaining)
                self._cond.wait(wait_for)

    def done(self, key: K) -> None:
        """Processing of ``key`` finished; if it was added meanwhile, queue it again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._enqueue_locked(key)

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutdown

    def pending(self) -> int:
        """Keys queued, being processed or waiting for their delay (for tests and metrics)."""
        with self._cond:
            return len(self._queue) + len(self._processing) + len(self._ready_at)

    def idle(self) -> bool:
        """Nothing queued or being processed right now (delayed keys may still come)."""
        with self._cond:
            self._promote_locked()
            return not self._queue and not self._processing
