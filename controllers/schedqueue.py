"""Where a pod goes after a scheduling attempt that found no place, and when it comes back.

The work queue alone loses wakeups: a pod parked as unschedulable waits for the next cluster
change, but a change that lands *while* its attempt is running (a ResourceSlice published, a
claim freed, a node added) finds nothing parked yet and is gone by the time the attempt parks
the pod; the pod then sleeps until the periodic flush. Upstream's scheduling queue closes this
window by recording the cluster events that arrive while pods are in flight and, when an
attempt fails, checking them before parking the pod (``inFlightEvents`` in
pkg/scheduler/backend/queue). :class:`PendingPods` does the same for our scheduler:

- :meth:`begin` marks the start of an attempt (the event sequence number it has seen);
- :meth:`cluster_event` records a change that may make unschedulable pods fit and hands back
  the parked pods to retry, each with the rest of its backoff (upstream's backoffQ: a pod
  parked long ago is retried at once, one that failed a moment ago waits out its backoff);
- :meth:`unschedulable` decides what a failed attempt does: retry at once when an event came in
  during the attempt, else park.

One more window exists because the solver is a separate process with its own watch on the API
server: the scheduler may see a slice (and retry) a moment before the solver's inventory does,
and the solver then answers "no node fits" from an inventory that is behind. So when the
solver gave the verdict, events seen shortly (``solver_lag`` seconds) before the attempt also
count: the pod is retried once that window has passed instead of being parked. Each event
causes at most one such retry per pod, so a pod that truly does not fit still ends up parked.

Pure bookkeeping with an injectable clock; the caller does the queueing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

FLUSH = "UnschedulableTimeout"
"""The event name of a periodic flush (upstream's name for it)."""


@dataclass(frozen=True, slots=True)
class Move:
    """A parked pod to put back into the active queue after ``delay`` seconds."""

    key: str
    delay: float
    event: str


@dataclass(frozen=True, slots=True)
class _Event:
    seq: int
    at: float
    name: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a pod whose attempt found no place."""

    retry_after: float | None
    """None: park it until a cluster event; otherwise retry after this many seconds."""
    event: str = ""
    """The recorded event that makes the retry worthwhile."""


class PendingPods:
    def __init__(
        self,
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 10.0,
        solver_lag: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.solver_lag = solver_lag
        self._clock = clock
        self._lock = threading.Lock()
        self._seq = 0
        self._events: deque[_Event] = deque()
        self._in_flight: dict[str, tuple[int, float]] = {}
        """Pod key -> (event sequence number seen at the start, start time)."""
        self._parked: dict[str, float] = {}
        """Pod key -> when it was parked."""
        self._failures: dict[str, tuple[int, float]] = {}
        """Pod key -> (attempts that found no place in a row, time of the last one)."""
        self._woken: dict[str, str] = {}
        """Pod key in flight -> an event about the pod itself that came in during the attempt."""

    # --- attempts -----------------------------------------------------------------------------

    def begin(self, key: str) -> None:
        """An attempt for ``key`` starts: events from now on are in flight for it."""
        with self._lock:
            self._parked.pop(key, None)
            self._woken.pop(key, None)
            self._in_flight[key] = (self._seq, self._clock())

    def end(self, key: str) -> bool:
        """The attempt is over, whatever its outcome (no-op after :meth:`unschedulable`).
        True when an event about the pod came in during it (see :meth:`pod_event`)."""
        with self._lock:
            self._in_flight.pop(key, None)
            self._prune_locked()
            return self._woken.pop(key, None) is not None

    def unschedulable(self, key: str, *, by_solver: bool) -> Verdict:
        """The attempt for ``key`` found no place: retry (and when) or park it.

        ``by_solver``: the verdict came from the solver service (so events it may not have
        seen yet when the attempt started count too).
        """
        with self._lock:
            now = self._clock()
            count, _ = self._failures.get(key, (0, 0.0))
            self._failures[key] = (count + 1, now)
            start_seq, started = self._in_flight.pop(key, (self._seq, now))
            woken = self._woken.pop(key, None)
            verdict = Verdict(0.0, woken) if woken else self._verdict_locked(key, start_seq, started, now, by_solver=by_solver)
            if verdict.retry_after is None:
                self._parked[key] = now
            self._prune_locked()
            return verdict

    def _verdict_locked(self, key: str, start_seq: int, started: float, now: float, *, by_solver: bool) -> Verdict:
        during = [e for e in self._events if e.seq > start_seq]
        if during:
            return Verdict(0.0, during[0].name)
        if by_solver:
            recent = [e for e in self._events if e.at > started - self.solver_lag]
            if recent:
                last = recent[-1]
                return Verdict(max(0.0, last.at + self.solver_lag - now), last.name)
        return Verdict(None)

    def scheduled(self, key: str) -> None:
        """The pod is bound, gone or no longer ours: forget everything about it."""
        with self._lock:
            self._parked.pop(key, None)
            self._failures.pop(key, None)
            self._in_flight.pop(key, None)
            self._woken.pop(key, None)

    # --- events -------------------------------------------------------------------------------

    def cluster_event(self, name: str) -> list[Move]:
        """Something changed that may make unschedulable pods fit: record it for the attempts
        in flight and move every parked pod back, each after the rest of its backoff."""
        with self._lock:
            now = self._clock()
            self._seq += 1
            self._events.append(_Event(self._seq, now, name))
            moves = [Move(k, self._backoff_left_locked(k, now), name) for k in sorted(self._parked)]
            self._parked.clear()
            self._prune_locked()
            return moves

    def wake(self, key: str) -> bool:
        """An event about this pod itself (its spec changed): unpark it.
        True when it was parked (the caller queues it either way)."""
        with self._lock:
            return self._parked.pop(key, None) is not None

    def pod_event(self, key: str, name: str) -> bool:
        """An event about this pod itself (one of its claims appeared, changed or went away):
        True to queue it now (unparked if it was parked). False while its attempt is in
        flight: the event is kept for the outcome to decide (one that found no place is
        retried at once; a failed one keeps its backoff, as the event may be its own write)."""
        with self._lock:
            if key in self._in_flight:
                self._woken[key] = name
                return False
            self._parked.pop(key, None)
            return True

    def flush(self) -> list[Move]:
        """The periodic safety net: every parked pod back, at once."""
        with self._lock:
            moves = [Move(k, 0.0, FLUSH) for k in sorted(self._parked)]
            self._parked.clear()
            return moves

    def _backoff_left_locked(self, key: str, now: float) -> float:
        count, last = self._failures.get(key, (0, now))
        if count <= 0:
            return 0.0
        backoff = min(self.backoff_max, self.backoff_initial * 2.0 ** (count - 1))
        return max(0.0, last + backoff - now)

    def _prune_locked(self) -> None:
        """Drop events no attempt in flight can still need and too old for the solver window."""
        oldest_seq = min((seq for seq, _ in self._in_flight.values()), default=self._seq)
        earliest = min((started for _, started in self._in_flight.values()), default=self._clock())
        horizon = earliest - self.solver_lag
        while self._events and self._events[0].seq <= oldest_seq and self._events[0].at <= horizon:
            self._events.popleft()

    # --- reading --------------------------------------------------------------------------------

    def parked(self) -> list[str]:
        with self._lock:
            return sorted(self._parked)

    def in_flight(self) -> list[str]:
        with self._lock:
            return sorted(self._in_flight)

    def recorded_events(self) -> int:
        with self._lock:
            return len(self._events)

    def cluster_events(self) -> int:
        """Cluster events seen since the queue was made (only ever grows; ``recorded_events``
        is how many are still kept for attempts in flight)."""
        with self._lock:
            return self._seq
