"""kube-scheduler v1.37.2 beside the dra-solver scheduler, same real API server (issue 14).

    python benchmarks/scheduler_compare.py [--workloads all|NAME,...] [--nodes N] [--pods P]
        [--size NAME=NODES:PODS ...] [--run-timeout S] [--backlog] [-o json] [--out FILE.json]
        [--report FILE.html]

For each workload (see ``service.schedcompare.workloads``): a fresh control plane (etcd,
kube-apiserver, kube-controller-manager), the same Nodes, ResourceSlices, DeviceClasses and
claim templates; first upstream's kube-scheduler alone (default plugins, DynamicResources on;
upstream's resourceclaim-controller creates the claims), then on another fresh control plane
``dra-solver serve`` + ``dra-solver controllers`` alone. Printed per side: pods bound, claims
placed by size, pods/s (bound pods over first creation to last bind), creation-to-bind p50/p99,
the ratio, devices allocated twice (must be 0), and the reasons for every pod placed
differently. ``dra-solver compare --schedulers`` is the same at one size.

``--backlog``: each side's pods and their claims are all created before its scheduler starts,
and pods/s and bind latency count from the scheduler's start (its start-up included), so the
figure is the scheduler's own rate rather than the rate at which the API server accepts pods;
for workloads that create every pod up front (not steady-state).

Not a test: the figures depend on the machine (``tests/schedcompare`` checks correctness at a
small size).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dra_solver.service.localcluster.controlplane import binaries  # noqa: E402
from dra_solver.service.schedcompare import workloads  # noqa: E402
from dra_solver.service.schedcompare.command import (  # noqa: E402
    backlog_runnable,
    compare_workload,
    names_all,
    parse_workloads,
)
from dra_solver.service.schedcompare.htmlpage import render_report  # noqa: E402
from dra_solver.service.schedcompare.report import WorkloadComparison, format_table  # noqa: E402

FULL_SIZES = {
    "claim-template": (500, 5000),
    "steady-state": (50, 600),
    "mig-whole-first": (20, 300),
    "mig-partitions-first": (20, 300),
    "mixed": (50, 300),
    "first-available": (50, 300),
}
"""(nodes, pods) per workload: issue 14's 500 nodes x 8 devices with 5,000 pods for scheduler_perf's
shape; the others as measured in docs/comparing.md."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="all")
    parser.add_argument("--nodes", type=int, default=0, help="override every workload's node count")
    parser.add_argument("--pods", type=int, default=0, help="override every workload's pod count")
    parser.add_argument("--size", action="append", default=[], metavar="NAME=NODES:PODS")
    parser.add_argument("--run-timeout", type=float, default=1200.0)
    parser.add_argument("--keep-logs", type=Path)
    parser.add_argument("--backlog", action="store_true",
                        help="create every pod and claim before the scheduler starts; count from its start")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--report", type=Path, help="also write the HTML report (plots) here")
    args = parser.parse_args()
    sizes = dict(FULL_SIZES)
    for item in args.size:
        name, _, spec = item.partition("=")
        n, _, p = spec.partition(":")
        sizes[name] = (int(n), int(p))
    built = []
    for name in parse_workloads(args.workloads):
        nodes, pods = sizes[name]
        built.append(workloads.build(name, nodes=args.nodes or nodes, pods=args.pods or pods))
    if args.backlog:
        try:
            built, left_out = backlog_runnable(built, everything=names_all(args.workloads))
        except ValueError as err:
            parser.error(str(err))
        for name in left_out:
            print(f"{name}: left out (it deletes pods as others arrive; a backlog run creates every pod first)",
                  file=sys.stderr, flush=True)
    bins = binaries()
    results: list[WorkloadComparison] = []
    for w in built:
        name = w.name
        t0 = time.monotonic()
        print(f"{name}: {w.description}", file=sys.stderr, flush=True)
        result = compare_workload(w, bins, timeout=args.run_timeout, keep_logs=args.keep_logs, backlog=args.backlog,
                                  progress=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
        print(f"{name}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        results.append(result)
        if args.out:  # after each workload, so a long run leaves what it measured
            args.out.write_text(json.dumps({"schedulers": [r.to_json() for r in results]}, indent=2))
        if args.report:
            args.report.write_text(render_report(results), encoding="utf-8")
    if args.output == "json":
        print(json.dumps({"schedulers": [r.to_json(pods=False) for r in results]}, indent=2))
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
