"""In-process allocation latency of the CP-SAT allocator on one node (issue 2, item 13).

    python benchmarks/core_allocate.py [--repeat 200] [--json]

Scenarios:
- ``gpu8``: a node with 8 GPUs; one claim for 1, 2, 4 or 8 GPUs.
- ``mig8x7``: a node with 8 GPUs, each published as the whole GPU plus 7 one-slice partitions
  drawing on the GPU's shared counters (64 devices, 8 counter sets); one claim for 1, 2, 4 or 8
  partitions, and one for a whole GPU next to 4 partitions (the counters decide).

Each row times ``allocate_cpsat`` (selectors are compiled and the CEL match cache is warm
after the first call, as in a running service) in three ways: ``fast`` is the default path
(first-fit when that is provably enough), ``model`` forces the CP-SAT model, and ``front``
is ``model.allocate`` including API validation of every object. Printed: p50 and p99
in milliseconds, the status and the model size (variables/constraints of the forced model).

Placement policy cost (issue 8): the forced model with the default ``pack`` objective against
the same model with no objective at all (feasibility only: policy ``score`` on claims without
``firstAvailable``), measured in the same run; ``pack/feas`` is the ratio of their p50s.
Every answer is checked once with ``model.check``. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dra_solver.model import allocate, allocate_cpsat
from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest, Inventory
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.check import assert_valid
from dra_solver.model.decode import decode_all

DRIVER = "gpu.example.com"
NODE = "node-1"
GPUS = 8
PARTITIONS = 7


def _class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _slice(name: str, devices: list[dict[str, Any]], *, count: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": count},
            **({"devices": devices} if devices else {}),
            **spec,
        },
    }


def _gpu(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "type": {"string": "gpu"},
            "model": {"string": "a100"},
            "index": {"int": i},
            "uuid": {"string": f"GPU-{i:08d}"},
            "driverVersion": {"version": "1.2.3"},
        },
        "capacity": {"memory": {"value": "40Gi"}},
        **extra,
    }


def _claim(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": requests}},
    }


def _request(name: str, device_class: str, count: int) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "count": count}}


def gpu8() -> list[dict[str, Any]]:
    return [
        _class("gpu", f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"),
        _slice("gpus", [_gpu(i) for i in range(GPUS)]),
    ]


def mig8x7() -> list[dict[str, Any]]:
    counters = [
        {"name": f"gpu-{i}-counters", "counters": {"slices": {"value": str(PARTITIONS)}, "memory": {"value": "40Gi"}}}
        for i in range(GPUS)
    ]
    objects = [
        _class("gpu", f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"),
        _class("mig-1g", f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'"),
        _slice("counters", [], count=GPUS + 1, sharedCounters=counters),
    ]
    for i in range(GPUS):
        whole = _gpu(i, consumesCounters=[
            {"counterSet": f"gpu-{i}-counters", "counters": {"slices": {"value": str(PARTITIONS)}, "memory": {"value": "40Gi"}}}
        ])
        parts = [
            {
                "name": f"gpu-{i}-mig-{p}",
                "attributes": {
                    "type": {"string": "mig"},
                    "profile": {"string": "1g.5gb"},
                    "parentIndex": {"int": i},
                },
                "capacity": {"memory": {"value": "5Gi"}},
                "consumesCounters": [
                    {"counterSet": f"gpu-{i}-counters", "counters": {"slices": {"value": "1"}, "memory": {"value": "5Gi"}}}
                ],
            }
            for p in range(PARTITIONS)
        ]
        objects.append(_slice(f"gpu-{i}", [whole, *parts], count=GPUS + 1))
    return objects


def _request_for(cluster: list[dict[str, Any]], claim: dict[str, Any], *, policy: str = "") -> AllocationRequest:
    objects = decode_all([*cluster, claim])
    inventory = Inventory.from_objects(objects)
    claims = tuple(c for c in objects if isinstance(c, o.ResourceClaim))
    return AllocationRequest(claims=claims, node=inventory.node(NODE), inventory=inventory, policy=policy)


def _time(fn: Callable[[], AllocationOutcome], repeat: int) -> tuple[list[float], AllocationOutcome]:
    outcome = fn()  # warm: compiles selectors, fills the CEL match cache
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        outcome = fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples, outcome


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(repeat: int) -> list[dict[str, Any]]:
    cel = CelEnvironment()
    rows: list[dict[str, Any]] = []
    cases: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = []
    for n in (1, 2, 4, 8):
        cases.append((f"gpu8 / {n} GPU", gpu8(), _claim("c", [_request("gpu", "gpu", n)])))
    for n in (1, 2, 4, 8):
        cases.append((f"mig8x7 / {n} partition", mig8x7(), _claim("c", [_request("mig", "mig-1g", n)])))
    cases.append(
        (
            "mig8x7 / 1 GPU + 4 partitions",
            mig8x7(),
            _claim("c", [_request("gpu", "gpu", 1), _request("mig", "mig-1g", 4)]),
        )
    )
    for name, cluster, claim in cases:
        request = _request_for(cluster, claim)

        def default_path(r: AllocationRequest = request) -> AllocationOutcome:
            return allocate_cpsat(r, cel=cel)

        def forced_model(r: AllocationRequest = request) -> AllocationOutcome:
            return allocate_cpsat(r, cel=cel, fast_path=False)

        def front_door(r: AllocationRequest = request) -> AllocationOutcome:
            return allocate(r, cel=cel)

        fast, outcome = _time(default_path, repeat)
        assert outcome.allocated, f"{name}: {outcome.reason}"
        assert_valid(request, outcome, cel=cel)
        forced, modeled = _time(forced_model, repeat)
        assert_valid(request, modeled, cel=cel)
        assert modeled.stats.policy == "pack"
        feasibility_request = _request_for(cluster, claim, policy="score")

        def feasibility_only(r: AllocationRequest = feasibility_request) -> AllocationOutcome:
            return allocate_cpsat(r, cel=cel, fast_path=False)

        feasible, feasible_outcome = _time(feasibility_only, repeat)
        assert_valid(feasibility_request, feasible_outcome, cel=cel)
        front, _ = _time(front_door, max(10, repeat // 4))
        rows.append(
            {
                "scenario": name,
                "devices": sum(len(s["spec"].get("devices", [])) for s in cluster if s["kind"] == "ResourceSlice"),
                "fast_status": outcome.stats.status,
                "fast_p50_ms": statistics.median(fast),
                "fast_p99_ms": _pct(fast, 0.99),
                "model_status": modeled.stats.status,
                "model_p50_ms": statistics.median(forced),
                "model_p99_ms": _pct(forced, 0.99),
                "front_p50_ms": statistics.median(front),
                "feasibility_p50_ms": statistics.median(feasible),
                "pack_over_feasibility": statistics.median(forced) / statistics.median(feasible),
                "variables": modeled.stats.variables,
                "constraints": modeled.stats.constraints,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    args = parser.parse_args(argv)
    rows = run(args.repeat)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    header = f"{'scenario':34} {'dev':>4} {'fast':>8} {'p50':>7} {'p99':>7} | {'model':>8} {'p50':>7} {'p99':>7} {'vars':>5} {'cons':>5} | {'front p50':>9} | {'feas p50':>8} {'pack/feas':>9}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['scenario']:34} {r['devices']:>4} {r['fast_status']:>8} {r['fast_p50_ms']:7.2f} {r['fast_p99_ms']:7.2f} | "
            f"{r['model_status']:>8} {r['model_p50_ms']:7.2f} {r['model_p99_ms']:7.2f} {r['variables']:>5} {r['constraints']:>5} | "
            f"{r['front_p50_ms']:9.2f} | {r['feasibility_p50_ms']:8.2f} {r['pack_over_feasibility']:8.2f}x"
        )
    print("times in ms; fast = default path, model = CP-SAT model forced (policy pack), "
          "front = allocate() with API validation, feas = forced model without objective")
    worst = max(r["pack_over_feasibility"] for r in rows)
    print(f"pack objective vs feasibility only: worst p50 ratio {worst:.2f}x (target: within 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
