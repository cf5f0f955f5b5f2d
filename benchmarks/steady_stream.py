"""Streamed Schedule+Reserve in a steady state: reservations expire while pods keep coming.

    python benchmarks/steady_stream.py [--nodes 5000] [--pods 25000] [--ttl 4] [--block 5000] [--window 2]
                                      [--pin python|serve|none] [-o json]

``dra-solver bench`` holds every reservation for an hour, so its pods fill the cluster from
empty and nothing is ever released. A scheduler's reservations end instead (the API server
shows the claims, or they expire): here ``dra-solver serve`` (a child process, reservations
expiring after ``--ttl`` seconds) answers one ScheduleStream carrying ``--pods`` one-GPU pods,
``--window`` messages in flight, on ``--nodes`` nodes of 8 GPUs. After the first block the
service holds about ``ttl`` seconds' worth of pods, releasing as many as it reserves: each row
is one block of ``--block`` pods, with pods/s, a message's p50/p99/max latency (sent to
answered), the service's RSS and the solves it made. Time to start the service and imports
are excluded; the first call (which builds the node index) is a warm-up outside the blocks.
``--pin`` places the service and the client as ``dra-solver bench`` does (by default serve's Python
threads on a CPU of their own).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dra_solver.service.bench import (
    PIN_MODES,
    Pinning,
    busiest_thread_cpus,
    on_cpus,
    pod_claim,
    serve_process,
    write_cluster,
)
from dra_solver.service.client import Client


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) // 1024


def run(nodes: int, pods: int, ttl: float, block: int, window: int, pin: Pinning | None = None) -> list[dict[str, Any]]:
    pin = pin or Pinning()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dra-steady-") as tmp:
        cluster = write_cluster(Path(tmp) / "gpu", nodes=nodes, shape="gpu")
        flags = ("--reservation-ttl", str(ttl), "--poll-interval", "3600",
                 "--max-reservations-per-caller", str(max(2000, pods)), "--max-reservations", str(max(10_000, pods)))
        with serve_process(cluster, *flags, *pin.serve_flags(), cpus=pin.serve_cpus()) as (proc, target), on_cpus(pin.client), \
                Client(target, timeout=120) as client:
            rng = random.Random(1)
            client.wait_ready(timeout=900)
            client.schedule([pod_claim(0, shape="gpu", rng=rng)], nodes=[], reserve=False)
            latencies: list[float] = []
            sent: collections.deque[float] = collections.deque()
            solves = 0
            first = 0  # the block's first pod
            started = time.perf_counter()
            with client.schedule_stream(timeout=3600) as stream:
                made = 0
                while len(latencies) < pods:
                    while made < pods and len(sent) < window:
                        made += 1
                        request = client.schedule_request([pod_claim(made, shape="gpu", rng=rng)], reserve=True, ttl=ttl, chosen_verdict_only=True)
                        sent.append(time.perf_counter())
                        stream.send(request)
                    answer = stream.receive()
                    latencies.append(time.perf_counter() - sent.popleft())
                    if answer.status.code or not answer.response.node:
                        raise SystemExit(f"pod {len(latencies)}: not placed: {answer.status.message or answer.response.reason}")
                    solves += answer.response.schedule_stats.solves
                    if len(latencies) % block == 0 or len(latencies) == pods:
                        now = time.perf_counter()
                        done = latencies[first:]
                        ordered = sorted(done)
                        rows.append({
                            "through": len(latencies), "pods": len(done), "pods_per_second": len(done) / (now - started),
                            "p50_ms": ordered[len(ordered) // 2] * 1000, "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
                            "max_ms": ordered[-1] * 1000, "rss_mib": _rss_mib(proc.pid), "solves": solves,
                            "serving_thread_cpus": list(busiest_thread_cpus(proc.pid)),
                        })
                        print(f"  {len(latencies):,}/{pods:,} pods", file=sys.stderr, flush=True)
                        solves = 0
                        first = len(latencies)
                        started = now
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=25000)
    parser.add_argument("--ttl", type=float, default=4.0, help="reservation lifetime, seconds")
    parser.add_argument("--block", type=int, default=5000, help="pods per row")
    parser.add_argument("--window", type=int, default=2, help="messages in flight")
    parser.add_argument("--pin", choices=list(PIN_MODES), default="python",
                        help="python (default): serve's Python threads on the last CPU, the client on the others; serve: the whole "
                        "serve process there; none: nothing pinned")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args()
    pin = Pinning.choose(args.pin)
    for name in ("nodes", "pods", "block", "window"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: must be at least 1")
    if args.ttl <= 0:
        parser.error("--ttl: must be positive")
    rows = run(args.nodes, args.pods, args.ttl, args.block, args.window, pin)
    if args.output == "json":
        print(json.dumps({"nodes": args.nodes, "ttl": args.ttl, "window": args.window, "pin": pin.describe(), "blocks": rows}, indent=2))
        return 0
    print(f"pin: {pin.describe()}")
    print(f"{'THROUGH':>8}  {'PODS/S':>7}  {'P50 MS':>6}  {'P99 MS':>6}  {'MAX MS':>6}  {'RSS MIB':>7}  {'SOLVES':>6}")
    for r in rows:
        print(f"{r['through']:>8}  {r['pods_per_second']:>7.0f}  {r['p50_ms']:>6.2f}  {r['p99_ms']:>6.2f}  {r['max_ms']:>6.1f}  {r['rss_mib']:>7}  {r['solves']:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
