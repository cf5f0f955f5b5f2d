"""Keeping a serving process's Python threads on one CPU.

Python runs one thread at a time. A streamed Schedule goes through three of them: gRPC's
polling thread takes each message from the network layer, hands it to the serving thread, and
takes the answer back. When the kernel runs these threads on different cores, every hand-off
leaves the serving thread's data in another core's caches: on the 2-core development machine
the same Python work took 40% longer after four hand-offs across cores than after four on one
core (docs/deploying.md, "One CPU for Python"). gRPC's own C threads (``event_engine``: the
socket reads and writes) need no interpreter and are left alone, free to run beside them.

:func:`pin_python_threads` puts every thread the interpreter knows (``threading.enumerate``)
on one CPU; threads those start later (gRPC's serving threads, started by its polling thread
when calls come) inherit it. Linux only; process-wide, so only ``dra-solver serve`` does it,
and only when asked (``--python-cpu``): on a busy shared node, a pinned thread cannot move off
a CPU that others keep busy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

AUTO = "auto"
NONE = "none"


def allowed_cpus() -> tuple[int, ...]:
    """The CPUs this thread may run on (empty where the platform cannot pin threads)."""
    if not hasattr(os, "sched_getaffinity"):
        return ()
    return tuple(sorted(os.sched_getaffinity(0)))


def choose_cpu(choice: str, allowed: Sequence[int]) -> int | None:
    """The CPU ``--python-cpu`` names: ``none`` (None), ``auto`` (the last allowed one, or None
    with fewer than two), or a CPU number among ``allowed``. Raises ValueError, saying why."""
    value = choice.strip()
    if value == NONE:
        return None
    if not allowed:
        if value == AUTO:
            return None
        raise ValueError("this platform cannot pin threads to a CPU: use none")
    if value == AUTO:
        return allowed[-1] if len(allowed) >= 2 else None
    try:
        cpu = int(value)
    except ValueError:
        raise ValueError(f"not none, auto or a CPU number: {value!r}") from None
    if cpu not in allowed:
        raise ValueError(f"CPU {cpu} is not one this process may run on ({','.join(map(str, allowed))})")
    return cpu


def pin_python_threads(cpu: int) -> Callable[[], None]:
    """Every Python thread of this process on ``cpu`` from now on (and the threads they start);
    returns what gives the pinned threads back the CPUs they had."""
    before: dict[int, set[int]] = {}
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None:  # not started yet: it will inherit from the thread that starts it
            continue
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
        except OSError:  # ended meanwhile
            before.pop(tid, None)

    def undo() -> None:
        for tid, cpus in before.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                continue

    return undo
