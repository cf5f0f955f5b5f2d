"""Where a side's time went: CPU seconds per process over the run, and, for dra-solver, its
scheduler's own histograms (solver calls, API writes, queue waits) read from the controllers'
``/metrics`` when the pods have settled.

The figures are sums over the run divided by the pods bound, so they add up the way a pod's
latency does only roughly (workers and binders overlap); they say which part dominates.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dra_solver.service.procstat import process_cpu_seconds


class CpuMeter:
    """CPU seconds each named process spent between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._start: dict[str, float] = {}
        self._began = 0.0
        self.seconds: dict[str, float] = {}
        self.wall = 0.0
        """Seconds between start and stop."""

    def start(self) -> None:
        self._began = time.monotonic()
        for name, pid in self.pids.items():
            value = process_cpu_seconds(pid)
            if value is not None:
                self._start[name] = value

    def stop(self) -> None:
        self.wall = round(time.monotonic() - self._began, 1)
        for name, begun in self._start.items():
            value = process_cpu_seconds(self.pids[name])
            if value is not None:
                self.seconds[name] = round(value - begun, 1)


def scrape(address: str, timeout: float = 10.0) -> str:
    """The text of ``http://ADDRESS/metrics``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as resp:
        return str(resp.read().decode("utf-8", "replace"))


@dataclass
class Sums:
    """Histogram sums and counts by name and labels, from one scrape."""

    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Sums:
        out = cls()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(("_sum", "_count", "_total")):
                    out.values[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
        return out

    def total(self, name: str, **labels: str) -> float:
        """The sum over every series of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.values.items() if n == name and want <= set(ls))

    def by(self, name: str, label: str, **labels: str) -> dict[str, float]:
        want = set(labels.items())
        out: dict[str, float] = {}
        for (n, ls), v in self.values.items():
            if n == name and want <= set(ls):
                key = dict(ls).get(label, "")
                out[key] = out.get(key, 0.0) + v
        return out


def _ms(seconds: float, pods: int) -> float:
    return round(1000.0 * seconds / pods, 1) if pods else 0.0


def scheduler_split(texts: str | Iterable[str], bound: int) -> dict[str, Any]:
    """dra-solver's scheduler time per bound pod (ms), from its controllers' metrics text (or
    the texts of several controllers processes, added up)."""
    s = Sums()
    for text in [texts] if isinstance(texts, str) else texts:
        for key, value in Sums.parse(text).values.items():
            s.values[key] = s.values.get(key, 0.0) + value
    solver = s.by("dra_solver_scheduler_solver_request_duration_seconds_sum", "rpc")
    writes = s.by("dra_solver_scheduler_api_write_duration_seconds_sum", "operation")
    queues = s.by("workqueue_queue_duration_seconds_sum", "name")
    attempts = s.by("dra_solver_scheduler_schedule_attempts_total", "result") or s.by(
        "dra_solver_scheduler_scheduling_attempt_duration_seconds_count", "result")
    return {
        "perBoundPodMs": {
            "solver": _ms(sum(solver.values()), bound),
            "solverByRpc": {k: _ms(v, bound) for k, v in sorted(solver.items())},
            "apiWrites": _ms(sum(writes.values()), bound),
            "apiWritesByOperation": {k: _ms(v, bound) for k, v in sorted(writes.items())},
            "schedulingQueue": _ms(queues.get("scheduler", 0.0), bound),
            "claimControllerQueue": _ms(sum(v for k, v in queues.items() if k.startswith("resource")), bound),
            "binderQueue": _ms(s.total("dra_solver_scheduler_binding_queue_duration_seconds_sum"), bound),
            "attempt": _ms(s.total("dra_solver_scheduler_scheduling_attempt_duration_seconds_sum"), bound),
        },
        "attempts": {k: int(v) for k, v in sorted(attempts.items()) if v},
        "solverCalls": int(s.total("dra_solver_scheduler_solver_request_duration_seconds_count")),
        "apiWrites": int(s.total("dra_solver_scheduler_api_write_duration_seconds_count")),
    }


def format_split(scheduler: str, split: Mapping[str, Any], cpu: Mapping[str, float], seconds: float, *,
                 window: str = "pods created until all settled") -> Iterable[str]:
    """Lines for the table's footer: one side's time split; ``window``: what the CPU figures cover."""
    if cpu:
        busy = ", ".join(f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
        yield f"  {scheduler}: CPU seconds in {seconds:.0f} s ({window}): {busy}"
    per = split.get("perBoundPodMs") or {}
    if per:
        writes = ", ".join(f"{k} {v:g}" for k, v in (per.get("apiWritesByOperation") or {}).items())
        yield (f"  {scheduler}: per bound pod (ms, summed over workers): solver {per['solver']:g}, API writes "
               f"{per['apiWrites']:g} ({writes}), scheduling queue {per['schedulingQueue']:g}, binder queue "
               f"{per['binderQueue']:g}, claim controller queue {per['claimControllerQueue']:g}; "
               f"attempt {per['attempt']:g}; attempts {split.get('attempts')}")
