"""Families of growing size where first-fit backtracking is exponential; CP-SAT is not.

    python benchmarks/compare_families.py [--deadline 10] [--max-size N] [--family NAME]

For each family and size, both allocators run on the same input in the same process; the
table reports backtracking time / CP-SAT time (the ratio measured in this run, never an
absolute target), backtracking steps, and where backtracking hits its deadline.

Families:
- distinct-unsat: 4 NUMA values, ``size`` GPUs per value, 5 one-GPU requests with a
  distinctAttribute constraint. Unsatisfiable; first-fit tries every assignment of GPUs with
  pairwise different values (about (4·size)^4) before giving up.
- counters-unsat: one GPU split into ``n`` 1/8th partitions on a shared memory counter, a claim
  for 9 partitions. Unsatisfiable; first-fit enumerates every 8-subset of partitions.
- match-pairs: ``v`` values with 3 GPUs each and a claim with two requests of 2 GPUs each
  that must share a value, on a node where one value is already half used. Satisfiable late.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dra_solver.model import allocate
from dra_solver.model.allocation import AllocationRequest, Inventory
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.decode import decode_all
from dra_solver.model.errors import SolveTimeout
from dra_solver.model.objects import ResourceClaim

DRIVER = "gpu.example.com"


def _cls() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}


def _slice(devices: list[dict[str, Any]], name: str = "gpus", count: int = 1,
           counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": DRIVER, "nodeName": "node-1",
                            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": count}}
    if counters is not None:
        spec["sharedCounters"] = counters
    else:
        spec["devices"] = devices
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def _claim(requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "claim", "namespace": "default"}, "spec": {"devices": devices}}


def _req(name: str, count: int) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}}


def distinct_unsat(d: int, v: int = 4) -> list[dict[str, Any]]:
    devices = [{"name": f"gpu-{i}", "attributes": {"numa": {"int": i % v}}} for i in range(d * v)]
    # One request per GPU: upstream only checks distinctness between requests (README quirks).
    requests = [_req(f"gpu-{r}", 1) for r in range(v + 1)]
    return [_cls(), _slice(devices), _claim(requests, [{"distinctAttribute": f"{DRIVER}/numa"}])]


def counters_unsat(n: int) -> list[dict[str, Any]]:
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]
    devices = [
        {"name": f"part-{i}", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}}]}
        for i in range(n)
    ]
    return [_cls(), _slice(devices, "devices", 2), _slice([], "counters", 2, counters),
            _claim([_req("parts", 9)])]


def match_pairs(v: int) -> list[dict[str, Any]]:
    devices = [{"name": f"gpu-{i}", "attributes": {"numa": {"int": i // 3}}} for i in range(3 * v)]
    return [_cls(), _slice(devices),
            _claim([_req("a", 2), _req("b", 2)], [{"matchAttribute": f"{DRIVER}/numa"}])]


FAMILIES: dict[str, tuple[Callable[[int], list[dict[str, Any]]], list[int]]] = {
    "distinct-unsat": (distinct_unsat, [2, 3, 4, 5, 6, 7, 8, 9, 10, 12]),
    "counters-unsat": (counters_unsat, [10, 12, 14, 16, 18, 20, 22, 24]),
    "match-pairs": (match_pairs, [2, 4, 8, 16, 32, 42]),
}


def run_once(docs: list[dict[str, Any]], allocator: str, deadline: float, cel: CelEnvironment) -> tuple[str, float, int]:
    inventory = Inventory.from_objects(decode_all(docs))
    claims = tuple(c for c in inventory.claims if isinstance(c, ResourceClaim))
    request = AllocationRequest(claims=claims, node=inventory.node("node-1"), inventory=inventory,
                                allocator=allocator, time_limit=deadline)  # type: ignore[arg-type]
    start = time.perf_counter()
    try:
        outcome = allocate(request, cel=cel)
    except SolveTimeout:
        return "deadline", time.perf_counter() - start, 0
    seconds = time.perf_counter() - start
    verdict = "allocated" if outcome.allocated else "unsat"
    if outcome.stats.status == "DEADLINE":
        verdict = "deadline"
    return verdict, seconds, outcome.stats.steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deadline", type=float, default=10.0, help="backtracking deadline in seconds")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    parser.add_argument("--max-size", type=int, default=None)
    args = parser.parse_args()
    cel = CelEnvironment()
    print(f"{'family':16} {'size':>5} {'bt verdict':>10} {'bt time':>10} {'bt steps':>10} "
          f"{'cp verdict':>10} {'cp time':>10} {'bt/cp':>8}")
    for name in args.family or list(FAMILIES):
        build, sizes = FAMILIES[name]
        best_ratio_within_deadline: tuple[int, float] | None = None
        for size in sizes:
            if args.max_size is not None and size > args.max_size:
                break
            docs = build(size)
            run_once(docs, "cpsat", args.deadline, cel)  # warm the CEL caches
            cp_verdict, cp_time, _ = run_once(docs, "cpsat", args.deadline, cel)
            bt_verdict, bt_time, steps = run_once(docs, "backtracking", args.deadline, cel)
            ratio = bt_time / cp_time if cp_time > 0 else float("inf")
            print(f"{name:16} {size:5d} {bt_verdict:>10} {bt_time:10.4f} {steps:10d} "
                  f"{cp_verdict:>10} {cp_time:10.4f} {ratio:8.1f}x", flush=True)
            if bt_verdict == "deadline":
                print(f"{name:16}  backtracking hit its {args.deadline:g}s deadline at size {size}")
                break
            best_ratio_within_deadline = (size, ratio)
        if best_ratio_within_deadline:
            size, ratio = best_ratio_within_deadline
            print(f"{name:16}  largest size within deadline: {size}, backtracking/CP-SAT = {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
