"""``dra-solver compare --schedulers WORKLOAD[,WORKLOAD...] [--nodes N] [--pods P] [--report FILE.html]``.

Runs each workload twice, each time on a fresh control plane: first upstream's kube-scheduler
alone, then dra-solver alone; prints the table (or ``-o json``) of :mod:`.report` and, with
``--report``, writes the HTML page of :mod:`.htmlpage`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dra_solver.service.localcluster.controlplane import Binaries, ControlPlaneError, binaries
from dra_solver.service.schedcompare import workloads
from dra_solver.service.schedcompare.htmlpage import render_report
from dra_solver.service.schedcompare.report import WorkloadComparison, format_table
from dra_solver.service.schedcompare.runner import SCHEDULERS, run_side


def parse_workloads(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(workloads.WORKLOADS)
    for name in names:
        if name not in workloads.WORKLOADS:
            supported = ", ".join(f'"{k}"' for k in ("all", *workloads.WORKLOADS))
            raise ValueError(f'--schedulers: Unsupported value: "{name}": supported values: {supported}')
    if not names:
        raise ValueError("--schedulers: Required value: name a workload")
    return names


def names_all(text: str) -> bool:
    """Whether a workload list is ``all``."""
    return [n.strip() for n in text.split(",") if n.strip()] == ["all"]


def backlog_runnable(built: Sequence[workloads.Workload], *, everything: bool) -> tuple[list[workloads.Workload], list[str]]:
    """The workloads a backlog run can run, and the names of those it leaves out: a workload
    that deletes pods as others arrive cannot run as a backlog. ``everything`` (``all`` was
    asked for): left out; else refused (ValueError, one line)."""
    churned = [w.name for w in built if w.churn is not None]
    if churned and not everything:
        raise ValueError(f"--backlog: Forbidden: {', '.join(churned)} deletes pods as others arrive "
                         "(a backlog run creates every pod before the scheduler starts)")
    return [w for w in built if w.churn is None], churned


def compare_workload(workload: workloads.Workload, bins: Binaries, *, schedulers: Sequence[str] = SCHEDULERS,
                     timeout: float = 600.0, policy: str = "", keep_logs: Path | None = None,
                     progress: Callable[[str], None] | None = None, backlog: bool = False) -> WorkloadComparison:
    sides = {}
    for scheduler in schedulers:
        sides[scheduler] = run_side(workload, scheduler, bins, timeout=timeout, policy=policy,
                                    keep_logs=keep_logs, progress=progress, backlog=backlog)
    return WorkloadComparison(workload, sides)


def run(args: argparse.Namespace) -> int:
    """The ``compare --schedulers`` mode; exit 0 when the runs completed, 2 for bad input or
    a control plane that would not start."""

    def progress(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    try:
        names = parse_workloads(args.schedulers)
        built = [workloads.build(n, nodes=args.nodes, pods=args.pods) for n in names]
        backlog = bool(args.backlog)
        if backlog:
            built, left_out = backlog_runnable(built, everything=names_all(args.schedulers))
            if left_out:
                print(f"note: --backlog: {', '.join(left_out)} left out (it deletes pods as others arrive)", file=sys.stderr)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        bins = binaries()
        if not bins.path("kube-scheduler").is_file():
            raise ControlPlaneError(f"{bins.path('kube-scheduler')} is missing: run scripts/build-upstream.sh")
        results = [compare_workload(w, bins, timeout=args.timeout_run, policy=args.policy, progress=progress,
                                    keep_logs=Path(args.keep_logs) if args.keep_logs else None,
                                    backlog=backlog)
                   for w in built]
    except ControlPlaneError as err:
        print(f"error: {' '.join(str(err).split())[:400]}", file=sys.stderr)
        return 2
    if args.output == "json":
        json.dump({"schedulers": [r.to_json() for r in results]}, sys.stdout, indent=2)
        print()
    else:
        print(format_table(results))
    if args.report:
        return write_report(args.report, results)
    return 0


def write_report(path: str, results: Sequence[WorkloadComparison]) -> int:
    """The HTML report (:mod:`.htmlpage`); exit status 2 if it cannot be written (the path was
    checked before the run, but the filesystem may have changed since)."""
    try:
        Path(path).write_text(render_report(results), encoding="utf-8")
    except OSError as err:
        print(f"error: --report: cannot write {json.dumps(path)}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"report written to {path}", file=sys.stderr)
    return 0
