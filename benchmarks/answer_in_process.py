"""What an answer costs without gRPC around it: ``Engine.schedule`` in one process.

    python benchmarks/answer_in_process.py [--nodes 5000] [--shape gpu] [--pods 1500]
        [--between 0,100,1000] [-o json]

Builds ``dra-solver bench``'s cluster (``--shape gpu``: 8 GPUs a node; ``mig``: partitions
sharing counters), loads it into an engine in this process and asks, pod by pod, what ``dra-solver
bench`` asks through gRPC (Schedule with reserve, one claim), after the same 64 warm-up pods
(released again):
the engine's CPU per pod (thread CPU time around each call, imports, load and warm-up
excluded). ``--between N``: before each call, a JSON round trip of N small dicts, unrelated
work that takes the engine's objects out of the CPU's caches as a server's work between
messages does; one engine per value, in the same run. Compare with the ``serve CPU ms/pod`` of
``dra-solver bench`` (docs/placement.md, "Where a whole-GPU pod's time goes now").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dra_solver.service import bench  # noqa: E402
from dra_solver.service import engine as e  # noqa: E402
from dra_solver.service.client import encode  # noqa: E402
from dra_solver.service.inventory import FileSource  # noqa: E402
from dra_solver.service.metrics import Metrics  # noqa: E402
from dra_solver.service.reservations import ReservationStore  # noqa: E402


def _loaded(cluster: Path) -> e.Engine:
    """An engine on ``cluster`` (loaded when this returns) with the bench's serve flags: every
    pod's reservation held for the whole run, files not polled."""
    held = ReservationStore(max_ttl=3600, max_total=1_000_000, max_per_caller=1_000_000)
    engine = e.Engine(source=FileSource(str(cluster), poll_interval=3600), reservations=held, metrics=Metrics())
    engine.source.start()
    return engine


def measure(cluster: Path, *, shape: str, pods: int, between: int) -> dict[str, float]:
    """Microseconds of this thread's CPU per ``Engine.schedule`` call, and pods placed."""
    engine = _loaded(cluster)
    try:
        rng = random.Random(1)
        # As the bench warms up: through the same call, its reservations then released.
        for i in range(bench.WARM_UP_PODS):
            warm = engine.schedule([encode(bench.warm_up_claim(i, shape=shape, rng=rng))], reserve=True, ttl=3600, caller="bench")
            if warm.reservation is not None:
                engine.unreserve(warm.reservation.id, [])
        blobs = [encode(bench.pod_claim(i, shape=shape, rng=rng)) for i in range(pods)]
        junk = [{"name": f"item-{i}", "index": i, "values": [i] * 4} for i in range(between)]
        spent = 0.0
        placed = 0
        for blob in blobs:
            if junk:
                json.loads(json.dumps(junk))
            started = time.thread_time()
            answer = engine.schedule([blob], reserve=True, ttl=3600, caller="bench")
            spent += time.thread_time() - started
            placed += bool(answer.node)
    finally:
        engine.source.stop()
    return {"between": between, "us_per_pod": round(spent / pods * 1e6, 1), "placed": placed}


def _sizes(text: str) -> list[int]:
    """``--between``'s values; ValueError says what is wrong with them."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--between: not a comma-separated list of integers: {text!r}") from None
    if not values or any(not 0 <= v <= 100_000 for v in values):
        raise ValueError(f"--between: each value must be in [0, 100000], got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--shape", choices=("gpu", "mig"), default="gpu")
    parser.add_argument("--pods", type=int, default=1500)
    parser.add_argument("--between", default="0,100,1000", help="small dicts round-tripped through JSON before each call, comma-separated")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 100_000:
        print(f"error: --nodes: must be in [1, 100000], got {args.nodes}", file=sys.stderr)
        return 2
    if not 1 <= args.pods <= 8 * args.nodes:
        print(f"error: --pods: must be in [1, {8 * args.nodes}] (8 GPUs a node), got {args.pods}", file=sys.stderr)
        return 2
    try:
        betweens = _sizes(args.between)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="answer-in-process-") as tmp:
        cluster = bench.write_cluster(Path(tmp) / "cluster", nodes=args.nodes, shape=args.shape)
        for between in betweens:
            print(f"{args.pods} pods on {args.nodes} {args.shape} nodes, {between} dicts round-tripped between calls ...",
                  file=sys.stderr, flush=True)
            rows.append(measure(cluster, shape=args.shape, pods=args.pods, between=between))
    if args.output == "json":
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'BETWEEN':>8} {'US/POD':>8} {'PLACED':>7}")
    for row in rows:
        print(f"{row['between']:>8} {row['us_per_pod']:>8.1f} {row['placed']:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
