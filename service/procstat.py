"""CPU time of processes and threads, read from Linux's ``/proc`` (nothing elsewhere): what the
benchmarks and the scheduler comparison report per process."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Clock ticks per second, the unit of ``/proc``'s CPU times."""


def cpu_ticks(stat: Path, *, children: bool = False) -> int | None:
    """User plus system clock ticks from a ``/proc`` ``stat`` file (a process's or a thread's);
    None where it cannot be read (gone, or no /proc). ``children``: plus those of its child
    processes that have ended and been waited for."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        return ticks + int(fields[13]) + int(fields[14]) if children else ticks
    except (OSError, IndexError, ValueError):
        return None


def process_cpu_seconds(pid: int, *, children: bool = False) -> float | None:
    """User plus system CPU seconds of process ``pid`` so far (None when it is gone or
    unreadable); ``children``: see :func:`cpu_ticks`."""
    ticks = cpu_ticks(Path(f"/proc/{pid}/stat"), children=children)
    return None if ticks is None else ticks / TICKS
