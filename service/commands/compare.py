"""``dra-solver compare``: CP-SAT vs upstream-style backtracking (and upstream's own Go
allocator, when it is built: ``--upstream``), per node or over a replay.

    dra-solver compare [--node NAME] [--policy NAME] [-o table|json] [--report FILE.html]
                       [--validate strict|warn|ignore] FILE...
    dra-solver compare [--kubeconfig FILE | --in-cluster] [-n NAMESPACE] [--node NAME] [--policy NAME]
                       [--upstream auto|on|off] [-o table|json] [--report FILE.html]
                       pod/NAME | resourceclaim/NAME
    dra-solver compare --replay CLUSTER_FILE --workload WORKLOAD_FILE [--node-choice first|score]
                       [--upstream auto|on|off] [-o table|json] [--report FILE.html]
                       [--validate strict|warn|ignore]

``pod/NAME`` (or ``resourceclaim/NAME``) compares on a live cluster: the pod's claims (made
from their templates when not created yet) on each node the scheduler would consider
(``explain pod/NAME`` reads the same, ``service.clusterinputs``), once per group of alike nodes:
verdicts, devices, scores and why CP-SAT's answer differs from upstream's.

Exit status: 0 when the comparison ran (whatever the allocators answered), 2 for bad input
(checked before anything runs: the files, every --node, and that --report can be written; a
missing pod or claim, a kubeconfig that does not work), 4 when the API server does not answer.
Each FILE is one self-contained scenario, the cluster and the claims to allocate in it: a FILE
with no claims to allocate or no node to allocate on, and a FILE given twice, are errors, not
an empty table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dra_solver.model import (
    AllocationOutcome,
    AllocationRequest,
    CelEnvironment,
    DraSolverError,
    FeatureGates,
    InvalidInput,
    Inventory,
    checked_policy,
)
from dra_solver.model import objects as o
from dra_solver.service.clusterinputs import Live, Target, parse_target
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.commands import liveopts
from dra_solver.service.commands.allocate import known_node
from dra_solver.service.commands.gateflag import add_feature_gates_argument
from dra_solver.service.compare import CompareRow, compare_scenario, format_table, render_table
from dra_solver.service.files import add_validate_argument, one_line, read_objects
from dra_solver.service.quoting import SHOWN_CHARS, clip, shown
from dra_solver.service.replay import (
    DEFAULT_CONFIGS,
    SMALLEST_FIRST,
    Allocate,
    ReplayConfig,
    ReplayResult,
    replay,
)
from dra_solver.service.report import render_report
from dra_solver.service.schedcompare.command import run as run_schedulers
from dra_solver.service.upstream import (
    UpstreamAllocator,
    UpstreamNotBuilt,
    allocate_upstream,
    binary,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE", help="scenario files (YAML/JSON, - for stdin)")
    parser.add_argument("--node", action="append", help="node to compare on (repeatable; default: all nodes)")
    parser.add_argument("--replay", metavar="CLUSTER_FILE", help="replay a workload against this cluster")
    parser.add_argument("--workload", metavar="WORKLOAD_FILE", help="List of ResourceClaims in arrival order")
    parser.add_argument("--node-choice", choices=("first", "score"), default=None,
                        help="replay: first node in name order that fits (default), or the best "
                             "FirstAvailable score, then the node each row's policy prefers")
    parser.add_argument("--policy", default="", metavar="NAME",
                        help="scenarios: the CP-SAT side's policy (pack, spread, first-fit, score; "
                             "default pack); first-fit returns upstream's devices where the score allows")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help=f"time limit per allocation attempt and allocator, at most {checks.MAX_SECONDS:g} (default 10)")
    add_feature_gates_argument(parser)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    parser.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sched = parser.add_argument_group("whole schedulers (kube-scheduler vs dra-solver on a real API server)")
    sched.add_argument("--schedulers", metavar="WORKLOAD[,...]",
                       help="run kube-scheduler, then dra-solver, each on a fresh control plane: claim-template, "
                            "steady-state, mig-whole-first, mig-partitions-first, mixed, first-available, or all")
    sched.add_argument("--nodes", type=int, default=None, help=f"--schedulers: nodes, at most {MAX_NODES} (default 50)")
    sched.add_argument("--pods", type=int, default=None, help=f"--schedulers: pods, at most {MAX_PODS} (default 300)")
    sched.add_argument("--run-timeout", dest="timeout_run", type=float, default=None, metavar="SECONDS",
                       help=f"--schedulers: time limit per scheduler and workload, at most {checks.MAX_SECONDS:g} (default 600)")
    sched.add_argument("--keep-logs", metavar="DIR", help="--schedulers: copy the components' logs here")
    sched.add_argument("--backlog", action="store_true",
                       help="--schedulers: create every pod and its claims before the scheduler starts, and count "
                            "pods/s from its start (the scheduler's own rate, not the API server's creation rate)")
    parser.add_argument("--upstream", choices=("auto", "on", "off"), default="auto",
                        help="a third column (scenarios) or an upstream row (--replay) from upstream's own "
                             "Go allocator: auto (default: when built), on (an error if not built), off; build "
                             "it with scripts/build-upstream.sh upstream-allocator")
    add_validate_argument(parser)
    liveopts.add_live_arguments(parser)


MAX_NODES = 10_000
MAX_PODS = 100_000
"""``--schedulers``: the largest cluster and workload (each runs on a real control plane)."""

RULES = {
    "--timeout": checks.seconds(),
    "--run-timeout": checks.seconds(),
    "--nodes": checks.integer(least=1, most=MAX_NODES),
    "--pods": checks.integer(least=1, most=MAX_PODS),
}

DEFAULTS = {"timeout": 10.0, "node_choice": "first", "nodes": 50, "pods": 300, "timeout_run": 600.0}
"""The defaults of the flags only some modes use (None until parsed, so that a flag given to a
mode that would ignore it is refused rather than ignored)."""

MODES = {"scenarios": "scenario FILEs or pod/NAME", "replay": "--replay", "schedulers": "--schedulers"}

USED_BY: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("--replay", "replay", frozenset({"replay"})),
    ("--workload", "workload", frozenset({"replay"})),
    ("--node-choice", "node_choice", frozenset({"replay"})),
    ("--node", "node", frozenset({"scenarios"})),
    ("--policy", "policy", frozenset({"scenarios", "schedulers"})),
    ("--timeout", "timeout", frozenset({"scenarios", "replay"})),
    ("--feature-gates", "feature_gates", frozenset({"scenarios", "replay"})),
    ("--nodes", "nodes", frozenset({"schedulers"})),
    ("--pods", "pods", frozenset({"schedulers"})),
    ("--run-timeout", "timeout_run", frozenset({"schedulers"})),
    ("--keep-logs", "keep_logs", frozenset({"schedulers"})),
    ("--backlog", "backlog", frozenset({"schedulers"})),
    ("--kubeconfig", "kubeconfig", frozenset({"scenarios"})),
    ("--in-cluster", "in_cluster", frozenset({"scenarios"})),
    ("--namespace", "namespace", frozenset({"scenarios"})),
)
"""Which modes read each flag: given to another mode, it is refused, not silently ignored."""


def check_flags(args: argparse.Namespace) -> None:
    """Bounds of the numeric flags, and no flag or FILE the chosen mode would ignore; then the
    defaults of the mode-specific flags."""
    checks.check(args, RULES, dests={"--run-timeout": "timeout_run"})
    mode = "schedulers" if args.schedulers else "replay" if args.replay or args.workload else "scenarios"
    if mode != "scenarios" and args.files:
        raise checks.FlagError(f"{clip(args.files[0], SHOWN_CHARS)}: Forbidden: a scenario FILE is not read with {MODES[mode]} "
                               "(it would be ignored)")
    for flag, dest, modes in USED_BY:
        if mode not in modes and checks.given(args, dest):
            raise checks.FlagError(f"{flag}: Forbidden: only with {' or '.join(MODES[m] for m in sorted(modes))} "
                                   f"(not with {MODES[mode]}: it would be ignored)")
    for dest, default in DEFAULTS.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    try:
        if args.report:
            _check_writable(args.report)  # a typo must not cost the whole run
        if args.schedulers:
            return run_schedulers(args)
        gates = FeatureGates.parse(args.feature_gates)
        if args.replay or args.workload:
            return _run_replay(args, gates)
        if not args.files:
            print("error: give scenario FILEs, or --replay CLUSTER_FILE --workload WORKLOAD_FILE", file=sys.stderr)
            return 2
        targets = [parse_target(path) for path in args.files]
        if any(targets):
            return _run_live(args, liveopts.one_target(targets), gates)
        liveopts.refuse_without_target(args)
        return _run_compare(args, gates)
    except DraSolverError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2


def scenario_names(paths: list[str]) -> list[str]:
    """A scenario's name is its file's stem (``agree`` for examples/compare/agree.yaml); files
    that share a stem are named by as much of their path as tells them apart
    (``gpu/cluster`` and ``mig/cluster``), so no two scenarios read as one."""
    def name(path: str, depth: int) -> str:
        if path == "-":
            return "stdin"
        parts = Path(path).with_suffix("").parts
        return "/".join(parts[-depth:])

    depth = {path: 1 for path in paths}
    for _ in range(64):  # path depth bound: each round lengthens the names that still clash
        names = [name(p, depth[p]) for p in paths]
        clashing = {p for p, n in zip(paths, names, strict=True) if names.count(n) > 1}
        longer = {p for p in clashing if depth[p] < len(Path(p).with_suffix("").parts)}
        if not longer:
            return names
        for p in longer:
            depth[p] += 1
    return [name(p, depth[p]) for p in paths]


def _progress(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr, flush=True)


def _run_compare(args: argparse.Namespace, gates: FeatureGates) -> int:
    checked_policy(args.policy)  # a typo must not read as "the allocators disagree"
    cel = CelEnvironment()
    rows: list[CompareRow] = []
    _check_distinct(args.files)
    scenarios = [(path, read_objects([path], validate=args.validate)) for path in args.files]
    _check_scenarios(scenarios, nodes_given=bool(args.node))
    _check_nodes(args.node or [], scenarios)
    names = scenario_names([path for path, _ in scenarios])
    with _upstream_runner(args) as upstream:
        for (path, objects), name in zip(scenarios, names, strict=True):
            _progress(args, f"comparing {path} ...")
            rows.extend(
                compare_scenario(name, objects, nodes=args.node,
                                 gates=gates, time_limit=args.timeout, cel=cel, policy=args.policy,
                                 validate=args.validate != "ignore", upstream=upstream)
            )
    if args.output == "json":
        json.dump({"rows": [r.to_json() for r in rows], "summary": _rows_summary(rows)}, sys.stdout, indent=2)
        print()
    else:
        print(format_table(rows))
    if args.report:
        with_upstream = any(r.upstream is not None for r in rows)
        _write_report(args.report, rows=rows, title=UPSTREAM_TITLE if with_upstream else "")
    return 0


def _rows_summary(rows: list[CompareRow]) -> dict[str, Any]:
    summary: dict[str, Any] = {"rows": len(rows), "agree": sum(r.agree for r in rows),
                               "devicesDiffer": sum(r.devices_differ for r in rows)}
    if any(r.upstream is not None for r in rows):
        summary["backtrackingMatchesUpstream"] = sum(bool(r.port_matches_upstream) for r in rows)
        summary["cpsatDiffersFromUpstream"] = sum(bool(r.why) for r in rows)
    return summary


def _run_live(args: argparse.Namespace, target: Target, gates: FeatureGates) -> int:
    """A pod's (or claim's) live objects, per candidate node: each allocator's verdict,
    devices and score, and why CP-SAT differs from upstream."""
    checked_policy(args.policy)
    live = liveopts.read(args, target)
    if isinstance(live, int):
        return live
    asked = [n for node in args.node or [None] for n in liveopts.nodes_asked(live, node)]
    groups = live.alike(asked) if live.claims.to_allocate and not live.claims.wait else []
    rows: list[CompareRow] = []
    if groups:
        _progress(args, f"comparing {live.subject} on {len(asked)} nodes ({len(groups)} alike groups) ...")
        with _upstream_runner(args) as upstream:
            rows = compare_scenario(str(target), _live_objects(live), nodes=[g[0] for g in groups], gates=gates,
                                    time_limit=args.timeout, cel=CelEnvironment(), policy=args.policy,
                                    validate=False, upstream=upstream)  # the API server validated them
    alike = {g[0]: list(g[1:]) for g in groups if len(g) > 1}
    if args.output == "json":
        doc = {
            "subject": live.subject,
            "claims": [c.ref for c in live.claims.to_allocate],
            "notes": list(live.claims.notes),
            "wait": live.claims.wait,
            "nodes": {"total": len(live.nodes.candidates) + len(live.nodes.reasons),
                      "candidates": list(live.nodes.candidates), "filtered": dict(sorted(live.nodes.reasons.items()))},
            "alike": alike,
            "rows": [r.to_json() for r in rows],
            "summary": _rows_summary(rows),
        }
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        _print_live(live, rows, alike)
    if args.report:
        _write_report(args.report, rows=rows, title=UPSTREAM_TITLE if any(r.upstream is not None for r in rows) else "")
    return 0


def _print_live(live: Live, rows: list[CompareRow], alike: dict[str, list[str]]) -> None:
    claims = ", ".join(c.ref for c in live.claims.to_allocate)
    print(f"{live.subject}: " + (f"cannot be scheduled yet: {live.claims.wait}" if live.claims.wait
                                  else f"claims to allocate: {claims}" if claims else "no claims to allocate"))
    for note in live.claims.notes:
        print(f"  {note}")
    for node, why in sorted(live.nodes.reasons.items()):
        print(f"node {node}: {why}")
    if rows:
        print(format_table(rows))
        for row in rows:
            print(_devices_text(row, alike.get(row.node, [])))


def _live_objects(live: Live) -> list[o.TypedObject]:
    """The inventory as the scenario of ``compare_scenario``: its unallocated claims are the
    question, so other pods' pending claims stay out."""
    inv = live.snapshot.inventory
    allocated = [c for c in inv.claims if c.allocated]
    return [*inv.classes, *inv.slices, *inv.taint_rules, *inv.nodes, *allocated, *live.claims.to_allocate]


def _devices_text(row: CompareRow, alike: list[str]) -> str:
    lines = [f"node {row.node}" + (f" (alike: {', '.join(alike)})" if alike else "") + ":"]
    sides = [row.cpsat, row.backtracking, *([row.upstream] if row.upstream is not None else [])]
    for side in sides:
        if side.verdict != "allocated":
            what = side.verdict + (f": {one_line(side.message)}" if side.message and side.verdict != "unsatisfiable" else "")
        elif side is not row.cpsat and side.devices == row.cpsat.devices:
            what = f"allocated, score {side.score}: the same devices as cpsat"
        else:
            what = f"allocated, score {side.score}: {', '.join(side.devices)}"
        lines.append(f"  {side.allocator:<13}{what}")
    if row.why:
        lines.append(f"  why CP-SAT differs from upstream: {row.why}")
    return "\n".join(lines)


@contextlib.contextmanager
def _upstream_runner(args: argparse.Namespace, what: str = "column") -> Iterator[UpstreamAllocator | None]:
    """One upstream process for the whole run, or None (with a note) when it is not wanted or
    not built; ``--upstream on`` turns "not built" into the one-line error saying how to build."""
    if args.upstream == "off":
        yield None
        return
    try:
        path = binary()
    except UpstreamNotBuilt as err:
        if args.upstream == "on":
            raise
        # Not progress: the table has fewer columns than documented, so --quiet still says why.
        print(f"note: no upstream {what}: {err}", file=sys.stderr, flush=True)
        yield None
        return
    with UpstreamAllocator(path) as runner:
        yield runner


def _run_replay(args: argparse.Namespace, gates: FeatureGates) -> int:
    if not (args.replay and args.workload):
        print("error: --replay CLUSTER_FILE and --workload WORKLOAD_FILE go together", file=sys.stderr)
        return 2
    cluster = read_objects([args.replay], validate=args.validate)
    workload = [obj for obj in read_objects([args.workload], validate=args.validate) if isinstance(obj, o.ResourceClaim)]
    if not workload:
        print(f"error: {args.workload}: no ResourceClaims in the workload", file=sys.stderr)
        return 2
    cel = CelEnvironment()
    results: list[ReplayResult] = []
    step = max(1, len(workload) // 10)

    def progress(name: str, done: int, total: int) -> None:
        if done % step == 0 or done == total:
            _progress(args, f"replay {name}: {done}/{total} claims")

    with _upstream_runner(args, "row") as upstream:
        configs: list[tuple[ReplayConfig, Allocate | None]] = [(c, None) for c in DEFAULT_CONFIGS]
        if upstream is not None:
            configs.append((UPSTREAM_REPLAY, _upstream_allocate(upstream)))
        for config, allocate_with in (*configs, (SMALLEST_FIRST, None)):
            results.append(
                replay(cluster, workload, config, cel=cel, gates=gates, node_choice=args.node_choice,
                       time_limit=args.timeout, progress=progress, validate=args.validate != "ignore",
                       allocate_with=allocate_with)
            )
    *runs, best = results
    if args.output == "json":
        doc: dict[str, Any] = {
            "replay": {r.name: r.to_json() for r in runs},
            "bestFit": {"placed": best.placed},  # the old name of the next key: kept for scripts
            "smallestFirstBacktracking": best.to_json(),
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
            for r in results
        ]
        print(render_table(["ALLOCATOR", "CLAIMS", "PLACED", "FIRST FAILURE", "TIME/CLAIM",
                            "PLACED BY SIZE", "FREE WHOLE DEVICES", "STRANDED COUNTERS"], body))
    if args.report:
        _write_report(args.report, replays=results)
    return 0


UPSTREAM_REPLAY = ReplayConfig("upstream", "backtracking")
"""The replay row of upstream's Go allocator: nodes in name order, like the backtracking row."""


def _upstream_allocate(runner: UpstreamAllocator) -> Allocate:
    def run(request: AllocationRequest) -> AllocationOutcome:
        # The rows before it validated the same objects (and the node's slices are a subset).
        return allocate_upstream(request, allocator=runner, validate=False)

    return run


def _shown(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _check_distinct(paths: list[str]) -> None:
    """A scenario given twice would only print its rows twice: name it instead."""
    seen: dict[str, str] = {}
    for path in paths:
        key = path if path == "-" else os.path.realpath(path)
        if key in seen:
            same = "" if seen[key] == path else f" (the same file as {seen[key]})"
            raise InvalidInput("", (), f"given twice{same}: each FILE is a scenario of its own", source=_shown(path))
        seen[key] = path


def _check_scenarios(scenarios: list[tuple[str, list[o.TypedObject]]], *, nodes_given: bool) -> None:
    """Each scenario has claims to allocate and a node to allocate them on: a claims file
    alone (its cluster in another FILE) would otherwise compare nothing and exit 0."""
    for path, objects in scenarios:
        inventory = Inventory.from_objects(objects)
        if not inventory.claims:
            raise InvalidInput("", (), "no ResourceClaims: a scenario file holds the claims to allocate "
                               "and the cluster they go to", source=_shown(path))
        if all(c.allocated for c in inventory.claims):
            raise InvalidInput("", (), "no ResourceClaims to allocate: every claim in it is allocated already",
                               source=_shown(path))
        if not nodes_given and not inventory.node_names():
            raise InvalidInput("", (), "no nodes (no Node and no node-local ResourceSlice): a scenario file "
                               "holds the cluster too, not only claims", source=_shown(path))


def _check_nodes(nodes: list[str], scenarios: list[tuple[str, list[o.TypedObject]]]) -> None:
    """Every --node must be known to every scenario (a Node, or a ResourceSlice on it)."""
    for path, objects in scenarios:
        inventory = Inventory.from_objects(objects)
        for node in nodes:
            try:
                known_node(inventory, node)
            except InvalidInput as err:
                raise InvalidInput(err.obj, err.field_path, err.detail, source=_shown(path)) from None


def _check_writable(path: str) -> None:
    """``--report``'s directory exists and the file can be created, before any work."""
    target = Path(path)
    if target.is_dir():
        raise InvalidInput("", ("--report",), f"Invalid value: {shown(path)}: is a directory")
    parent = target.parent
    if not parent.is_dir():
        raise InvalidInput("", ("--report",), f"Invalid value: {shown(path)}: no such directory: {shown(str(parent))}")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise InvalidInput("", ("--report",), f"Invalid value: {shown(path)}: permission denied")


UPSTREAM_TITLE = "dra-solver: CP-SAT vs backtracking vs upstream's allocator"


def _write_report(path: str, *, rows: list[CompareRow] | None = None,
                  replays: list[ReplayResult] | None = None, title: str = "") -> None:
    titled = {"title": title} if title else {}
    try:
        Path(path).write_text(render_report(rows=rows or [], replays=replays or [], **titled),
                              encoding="utf-8")
    except OSError as err:  # checked before the run; the filesystem may still change
        raise InvalidInput("", ("--report",), f"cannot write {shown(path)}: {err.strerror or err}") from None
    print(f"report written to {path}", file=sys.stderr)
