"""Keeping the cyclic garbage collector's pauses short in a serving process.

Python's collector stops every thread while it scans. ``Service.load`` freezes what the
inventory load leaves, so the inventory itself is never scanned again; what a busy service
keeps afterwards (reservations, per-node fingerprints, caches) is. Left to its defaults:

- a young collection (generations 0 and 1) ran every ten minor ones and scanned everything
  that survived since the last: about 1 ms every 150-300 ms while streaming whole-GPU pods, a
  pause that lands in one or two answers (a message's answer takes about 0.7 ms);
- a full collection ran whenever the survivors grew by a quarter of everything kept: every
  few thousand pods under steady reserving and releasing, each 13-35 ms on 5,000 nodes (and
  0.33 s on 21,869 fingerprinted nodes, docs/placement.md).

:func:`hold_full_collections` makes generation 1 collect after every second young
collection (the same work in shorter pauses: at most about 0.3 ms in the same run) and runs
full collections on a clock instead of by growth, so that garbage in reference cycles is still
freed, within ``interval`` seconds or a thousand times the last full collection's length.
Process-wide, like the collector: ``dra-solver serve`` turns it on, and ``dra-solver
controllers`` (whose caches hold every pod and claim) from its start.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

FULL_COLLECTION_INTERVAL = 60.0
"""Seconds between the full collections a serving process makes on its own clock, at least."""

FULL_COLLECTION_SHARE = 0.001
"""The share of wall time full collections may take: one that took longer than
``FULL_COLLECTION_INTERVAL * FULL_COLLECTION_SHARE`` holds the next one off longer (0.33 s on
21,869 fingerprinted nodes: the next after 330 s)."""

_SERVING_THRESHOLDS = (700, 1, 1_000_000_000)
"""Generation 0 as by default; generation 1 after every second young collection; generation 2
never by count (a billion generation-1 collections), only by :func:`hold_full_collections`'s
clock."""


def hold_full_collections(interval: float = FULL_COLLECTION_INTERVAL, *, share: float = FULL_COLLECTION_SHARE) -> Callable[[], None]:
    """Switch the collector to the serving thresholds and start a daemon thread that makes a
    full collection every ``interval`` seconds (longer after a slow one, so that they take at
    most ``share`` of the time). Returns ``stop``: ends the thread and puts
    the thresholds back (idempotent)."""
    if interval <= 0:
        raise ValueError(f"interval: must be positive, got {interval}")
    if not 0 < share <= 1:
        raise ValueError(f"share: must be in (0, 1], got {share}")
    before = gc.get_threshold()
    gc.set_threshold(*_SERVING_THRESHOLDS)
    stopping = threading.Event()

    def collect_on_the_clock() -> None:
        wait = interval
        while not stopping.wait(wait):
            started = time.perf_counter()
            found = gc.collect()
            took = time.perf_counter() - started
            wait = max(interval, took / share)
            log.debug("full garbage collection: %d unreachable objects, %.1f ms; the next in %.0f s", found, took * 1000, wait)

    thread = threading.Thread(target=collect_on_the_clock, name="gc-full-collections", daemon=True)
    thread.start()
    once = threading.Lock()

    def stop() -> None:
        with once:
            if stopping.is_set():
                return
            stopping.set()
        thread.join(timeout=5.0)
        gc.set_threshold(*before)

    return stop
