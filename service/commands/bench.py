"""``dra-solver bench``: the whole-cluster Schedule benchmark through the gRPC service.

    dra-solver bench [--nodes 500,5000] [--shape gpu,mig] [--pods 1000] [--concurrency 1] [--batch 1,8,stream] [--window 1]
                     [--pin python|serve|none] [-o json]

See ``service.bench`` (and ``benchmarks/schedule_service.py``, the same as a script). SIGTERM
ends a run as Ctrl-C does: the child ``serve`` is stopped and the generated cluster removed.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from dra_solver.service.bench import (
    PIN_MODES,
    BenchFailed,
    Pinning,
    format_results,
    results_json,
    run_one,
)
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.files import one_line
from dra_solver.service.quoting import SHOWN_CHARS, clip

MAX_NODES = 100_000
"""Nodes of one generated cluster: the service's candidate nodes per Schedule."""
MAX_PODS = 1_000_000
MAX_CONCURRENCY = 256
MAX_BATCH = 1_024
"""The service's requests per ScheduleBatch."""
MAX_WINDOW = 64
"""Messages in flight on one stream."""

RULES = {
    "--pods": checks.integer(least=1, most=MAX_PODS, too_small="must be positive"),
    "--concurrency": checks.integer(least=1, most=MAX_CONCURRENCY, too_small="must be positive"),
    "--window": checks.integer(least=1, most=MAX_WINDOW, too_small="must be positive"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", default="500,5000", help=f"cluster sizes, comma-separated, each at most {MAX_NODES}")
    parser.add_argument("--shape", default="gpu,mig", help="gpu (8 GPUs/node) and/or mig (8 GPUs x partitions/node)")
    parser.add_argument("--pods", type=int, default=1000, help=f"one-claim pods to schedule per run, at most {MAX_PODS}")
    parser.add_argument("--concurrency", type=int, default=1, help=f"client threads calling Schedule at once, at most {MAX_CONCURRENCY}")
    parser.add_argument("--batch", default="1",
                        help=f"pods per call, comma-separated, each at most {MAX_BATCH}: 1 = a Schedule call per pod, "
                        "more = ScheduleBatch calls, stream = a ScheduleStream message per pod (one stream per client thread)")
    parser.add_argument("--window", type=int, default=1,
                        help=f"stream runs: messages each stream keeps in flight (sent before the earlier ones are answered), at most {MAX_WINDOW}")
    parser.add_argument("--pin", choices=list(PIN_MODES), default="python",
                        help="python (default): serve's Python threads on the last CPU (serve --python-cpu), the client on the others; "
                        "serve: the whole serve process on the last CPU; none: nothing pinned")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")


STREAM = "stream"
"""``--batch stream``: a ScheduleStream message per pod."""


def _plan(args: argparse.Namespace) -> tuple[list[int], list[str], list[int | str]] | str:
    """The cluster sizes, shapes and batches (pods per call, or :data:`STREAM`) to run, or
    the error line."""
    try:
        sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    except ValueError:
        return f"--nodes: not a list of integers: {_echo(args.nodes)}"
    if not sizes:
        return f"--nodes: Required value: a list of cluster sizes: {_echo(repr(args.nodes))}"
    shapes = [s.strip() for s in args.shape.split(",") if s.strip()]
    if any(s not in ("gpu", "mig") for s in shapes):
        return f"--shape: unknown shape in {_echo(args.shape)} (gpu, mig)"
    if not shapes:
        return f"--shape: Required value: gpu and/or mig: {_echo(repr(args.shape))}"
    try:
        batches: list[int | str] = [STREAM if n.strip() == STREAM else int(n) for n in args.batch.split(",") if n.strip()]
    except ValueError:
        batches = []
    sizes_per_call = [n for n in batches if isinstance(n, int)]
    if not batches or any(n < 1 for n in sizes_per_call):
        return f"--batch: not a list of positive integers (or stream): {_echo(args.batch)}"
    if sizes_per_call and max(sizes_per_call) > MAX_BATCH:
        return f"--batch: must be at most {MAX_BATCH}: {max(sizes_per_call)}"
    if any(n < 1 for n in sizes):
        return f"--nodes: must be positive: {_echo(args.nodes)}"
    if max(sizes) > MAX_NODES:
        return f"--nodes: must be at most {MAX_NODES}: {max(sizes)}"
    if args.window > 1 and STREAM not in batches:
        return f"--window: messages in flight on a stream: only with --batch stream: {_echo(args.batch)}"
    return sizes, shapes, batches


def _echo(value: str) -> str:
    """A flag's value quoted back in its error: one line, clipped."""
    return clip(one_line(value), SHOWN_CHARS)


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit (143) in the main thread, so that every ``with`` unwinds: the
    child ``serve`` gets its SIGTERM and the ``dra-bench-*`` directory is removed."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the unwinding must not be cut short
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    try:
        checks.check(args, RULES)
    except checks.FlagError as err:  # also for benchmarks/schedule_service.py, which calls run itself
        print(f"error: {err}", file=sys.stderr)
        return 2
    plan = _plan(args)
    if isinstance(plan, str):
        print(f"error: {plan}", file=sys.stderr)
        return 2
    sizes, shapes, batches = plan
    pin = Pinning.choose(args.pin)
    if pin.cpu is not None:
        what = "serve's Python threads" if pin.mode == "python" else "serve"
        print(f"{what} on CPU {pin.cpu}, the client on CPU {','.join(map(str, pin.client))} (--pin none: nothing pinned)",
              file=sys.stderr, flush=True)
    elif args.pin != "none":
        print("nothing pinned: this command may use fewer than two CPUs, or the platform cannot pin", file=sys.stderr, flush=True)
    results = []
    with _sigterm_exits():
        for shape in shapes:
            for nodes in sizes:
                for batch in batches:
                    per_call = batch if isinstance(batch, int) else 1
                    window = args.window if batch == STREAM else 1
                    ahead = f", {window} in flight" if window > 1 else ""
                    shown = f", one ScheduleStream message each{ahead}" if batch == STREAM else f", {per_call} per ScheduleBatch call" if per_call > 1 else ""
                    print(f"running {shape} x {nodes} nodes, {args.pods} pods{shown} ...", file=sys.stderr, flush=True)
                    try:
                        results.append(run_one(nodes=nodes, shape=shape, pods=args.pods, concurrency=args.concurrency,
                                               batch=per_call, stream=batch == STREAM, window=window, pin=pin))
                    except BenchFailed as err:
                        print(f"error: {err}", file=sys.stderr)
                        return 1
    print(results_json(results) if args.output == "json" else format_results(results))
    return 0
