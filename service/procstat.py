"""CPU time of processes and threads, read from Linux's ``/proc`` (nothing elsewhere): what the
benchmarks and the scheduler comparison report per process."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Clock ticks per second, the unit of ``/proc``'s CPU times."""


def cpu_ticks(stat: Path) -> int | None:
    """User plus system clock ticks from a ``/proc`` ``stat`` file (a process's or a thread's);
    None where it cannot be read (gone, or no /proc)."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` so far (None when it is gone or unreadable)."""
    ticks = cpu_ticks(Path(f"/proc/{pid}/stat"))
    return None if ticks is None else ticks / TICKS
