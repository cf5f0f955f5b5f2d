"""``dra-solver compare``: CP-SAT vs upstream-style backtracking, per node or over a replay.

    dra-solver compare [--node NAME] [--policy NAME] [-o table|json] [--report FILE.html] FILE...
    dra-solver compare --replay CLUSTER_FILE --workload WORKLOAD_FILE [--node-choice first|score]
                       [-o table|json] [--report FILE.html]

Exit status: 0 when the comparison ran (whatever the allocators answered), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from model import objects as o
from model.cel import CelEnvironment
from model.errors import DraSolverError
from model.features import FeatureGates
from service.compare import CompareRow, compare_scenario, format_table, render_table
from service.files import read_objects
from service.replay import BEST_FIT, DEFAULT_CONFIGS, ReplayResult, replay


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE", help="scenario files (YAML/JSON, - for stdin)")
    parser.add_argument("--node", action="append", help="node to compare on (repeatable; default: all nodes)")
    parser.add_argument("--replay", metavar="CLUSTER_FILE", help="replay a workload against this cluster")
    parser.add_argument("--workload", metavar="WORKLOAD_FILE", help="List of ResourceClaims in arrival order")
    parser.add_argument("--node-choice", choices=("first", "score"), default="first",
                        help="replay: first node in name order that fits (default), or the best "
                             "FirstAvailable score, then the node each row's policy prefers")
    parser.add_argument("--policy", default="", metavar="NAME",
                        help="scenarios: the CP-SAT side's policy (pack, spread, first-fit, score; "
                             "default pack); first-fit returns upstream's devices where the score allows")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="time limit per allocation attempt and allocator (default 10)")
    parser.add_argument("--feature-gates", default="", metavar="Name=bool,...")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    try:
        gates = FeatureGates.parse(args.feature_gates)
        if args.replay or args.workload:
            return _run_replay(args, gates)
        if not args.files:
            print("error: give scenario FILEs, or --replay CLUSTER_FILE --workload WORKLOAD_FILE", file=sys.stderr)
            return 2
        return _run_compare(args, gates)
    except DraSolverError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _progress(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr, flush=True)


def _run_compare(args: argparse.Namespace, gates: FeatureGates) -> int:
    from model.cpsat.problem import checked_policy

    checked_policy(args.policy)  # a typo must not read as "the allocators disagree"
    cel = CelEnvironment()
    rows: list[CompareRow] = []
    for path in args.files:
        objects = read_objects([path])
        _progress(args, f"comparing {path} ...")
        rows.extend(
            compare_scenario(Path(path).stem if path != "-" else "stdin", objects, nodes=args.node,
                             gates=gates, time_limit=args.timeout, cel=cel, policy=args.policy)
        )
    if args.output == "json":
        summary = {"rows": len(rows), "agree": sum(r.agree for r in rows),
                   "devicesDiffer": sum(r.devices_differ for r in rows)}
        json.dump({"rows": [r.to_json() for r in rows], "summary": summary}, sys.stdout, indent=2)
        print()
    else:
        print(format_table(rows))
    if args.report:
        _write_report(args.report, rows=rows)
    return 0


def _run_replay(args: argparse.Namespace, gates: FeatureGates) -> int:
    if not (args.replay and args.workload):
        print("error: --replay CLUSTER_FILE and --workload WORKLOAD_FILE go together", file=sys.stderr)
        return 2
    cluster = read_objects([args.replay])
    workload = [obj for obj in read_objects([args.workload]) if isinstance(obj, o.ResourceClaim)]
    if not workload:
        print(f"error: {args.workload}: no ResourceClaims in the workload", file=sys.stderr)
        return 2
    cel = CelEnvironment()
    results: list[ReplayResult] = []
    step = max(1, len(workload) // 10)

    def progress(name: str, done: int, total: int) -> None:
        if done % step == 0 or done == total:
            _progress(args, f"replay {name}: {done}/{total} claims")

    for config in (*DEFAULT_CONFIGS, BEST_FIT):
        results.append(
            replay(cluster, workload, config, cel=cel, gates=gates, node_choice=args.node_choice,
                   time_limit=args.timeout, progress=progress)
        )
    *runs, best = results
    if args.output == "json":
        doc: dict[str, Any] = {
            "replay": {r.name: r.to_json() for r in runs},
            "bestFit": {"placed": best.placed},
            "nodeChoice": args.node_choice,
        }
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        body = [
            [r.name, str(r.claims), str(r.placed), "-" if r.first_failure is None else str(r.first_failure),
             f"{r.seconds_per_claim * 1e3:.2f}ms",
             " ".join(f"{k}:{v['placed']}/{v['claims']}" for k, v in r.placed_by_size().items()),
             str(r.free_whole_devices),
             ", ".join(f"{k}={v}" for k, v in r.stranded_counters.items()) or "-"]
            for r in runs
        ]
        body.append(["bestFit (bound)", str(best.claims), str(best.placed), "", "", "", "", ""])
        print(render_table(["ALLOCATOR", "CLAIMS", "PLACED", "FIRST FAILURE", "TIME/CLAIM",
                            "PLACED BY SIZE", "FREE WHOLE DEVICES", "STRANDED COUNTERS"], body))
    if args.report:
        _write_report(args.report, replays=runs, best_fit=best.placed)
    return 0


def _write_report(path: str, *, rows: list[CompareRow] | None = None,
                  replays: list[ReplayResult] | None = None, best_fit: int | None = None) -> None:
    from service.report import render_report

    Path(path).write_text(render_report(rows=rows or [], replays=replays or [], best_fit=best_fit),
                          encoding="utf-8")
    print(f"report written to {path}", file=sys.stderr)
