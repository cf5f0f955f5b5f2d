"""``dra-solver bench``: the whole-cluster Schedule benchmark through the gRPC service.

    dra-solver bench [--nodes 500,5000] [--shape gpu,mig] [--pods 1000] [--concurrency 1] [--batch 1,8,stream] [-o json]

See ``service.bench`` (and ``benchmarks/schedule_service.py``, the same as a script).
"""

from __future__ import annotations

import argparse
import sys

from dra_solver.service.bench import BenchFailed, format_results, results_json, run_one


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", default="500,5000", help="cluster sizes, comma-separated")
    parser.add_argument("--shape", default="gpu,mig", help="gpu (8 GPUs/node) and/or mig (8 GPUs x partitions/node)")
    parser.add_argument("--pods", type=int, default=1000, help="one-claim pods to schedule per run")
    parser.add_argument("--concurrency", type=int, default=1, help="client threads calling Schedule at once")
    parser.add_argument("--batch", default="1",
                        help="pods per call, comma-separated: 1 = a Schedule call per pod, more = ScheduleBatch calls, "
                        "stream = a ScheduleStream message per pod (one stream per client thread)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")


def run(args: argparse.Namespace) -> int:
    try:
        sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    except ValueError:
        print(f"error: --nodes: not a list of integers: {args.nodes}", file=sys.stderr)
        return 2
    shapes = [s.strip() for s in args.shape.split(",") if s.strip()]
    if any(s not in ("gpu", "mig") for s in shapes):
        print(f"error: --shape: unknown shape in {args.shape} (gpu, mig)", file=sys.stderr)
        return 2
    try:
        batches = [0 if n.strip() == "stream" else int(n) for n in args.batch.split(",") if n.strip()]
    except ValueError:
        batches = []
    if not batches or any(n < 0 for n in batches) or (0 in batches and "stream" not in args.batch):
        print(f"error: --batch: not a list of positive integers (or stream): {args.batch}", file=sys.stderr)
        return 2
    for flag, value in (("--pods", args.pods), ("--concurrency", args.concurrency)):
        if value < 1:
            print(f"error: {flag}: must be positive: {value}", file=sys.stderr)
            return 2
    if any(n < 1 for n in sizes):
        print(f"error: --nodes: must be positive: {args.nodes}", file=sys.stderr)
        return 2
    results = []
    for shape in shapes:
        for nodes in sizes:
            for batch in batches:
                shown = ", one ScheduleStream message each" if batch == 0 else f", {batch} per ScheduleBatch call" if batch > 1 else ""
                print(f"running {shape} x {nodes} nodes, {args.pods} pods{shown} ...", file=sys.stderr, flush=True)
                try:
                    results.append(run_one(nodes=nodes, shape=shape, pods=args.pods, concurrency=args.concurrency, batch=max(batch, 1),
                                           stream=batch == 0))
                except BenchFailed as err:
                    print(f"error: {err}", file=sys.stderr)
                    return 1
    print(results_json(results) if args.output == "json" else format_results(results))
    return 0
