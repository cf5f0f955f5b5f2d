"""Bounded memory and time per fuzz input (issue 15's "bounded time and memory per input").

``bounded(cap_mib)`` wraps one input's handling: the Python memory it allocates at its peak
(``tracemalloc``, every thread, so an in-process gRPC server's work counts) must stay under
``cap_mib`` above what was live when it started. The caps are generous (several times the
largest peak the long campaign saw, docs/limits-and-errors.md) so they catch a blow-up such as
an alias bomb expanding, never a slow machine. Native memory (CP-SAT's C++ side) is not traced;
``rss_mib`` reads the process's resident size, which the gRPC campaign checks per call too.

The per-input time bound is hypothesis' ``deadline`` on each fuzz test (also generous: a
limit reached while parsing answers in milliseconds, the bound is seconds).

``peaks`` keeps the largest peak seen per campaign, which the suite prints at the end when the
campaigns ran in the main process (``-p no:xdist``; docs/limits-and-errors.md).
"""

from __future__ import annotations

import contextlib
import os
import tracemalloc
from collections.abc import Iterator

MIB = 1 << 20

peaks: dict[str, float] = {}
"""Largest traced peak (MiB) per campaign name, this process."""


@contextlib.contextmanager
def bounded(cap_mib: float, *, campaign: str) -> Iterator[None]:
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    try:
        yield
    finally:
        _, peak = tracemalloc.get_traced_memory()
        if started:
            tracemalloc.stop()
    used = (peak - base) / MIB
    peaks[campaign] = max(peaks.get(campaign, 0.0), used)
    assert used <= cap_mib, f"{campaign}: one input took {used:.1f} MiB of Python memory at its peak (cap {cap_mib} MiB)"


def rss_mib() -> float:
    """This process's resident set size now (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / MIB
