"""In-process Explain latency on one node: why claims do not fit, and the fewest changes.

    python benchmarks/explain_node.py [--repeat 20] [--json]

Scenarios (the service's engine, in process, no gRPC; the inventory is sent inline, except for
the demo rows, which use the served demo cluster with its claims in use and its taint):

- ``demo / big-training @ node-X``: the demo's claim that fits nowhere, on each node;
- ``gpu8 / 9 GPUs``: more devices than the node has;
- ``gpu8 / 2 x h100``: a selector rejects every device;
- ``gpu8 / 2 GPUs, distinct-index-pairs``: matchAttribute over an attribute no two GPUs share;
- ``mig8x7 / 8 GPUs + 1 partition``: the shared counters decide (64 devices, 8 counter sets).

Each row times ``Engine.explain`` after one warm-up call (imports, compiled selectors and the
CEL match cache are outside the timed calls). Printed: p50 and p99 in milliseconds and the
number of reasons and fixes (deterministic: the same before and after a refactoring). Not a
test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_allocate import _claim, _request, gpu8, mig8x7  # noqa: E402

from dra_solver.service import engine as e  # noqa: E402
from dra_solver.service.files import read_objects  # noqa: E402
from dra_solver.service.inventory import StaticSource  # noqa: E402
from dra_solver.service.metrics import Metrics  # noqa: E402
from dra_solver.service.reservations import ReservationStore  # noqa: E402

NODE = "node-1"


def _blobs(objects: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(x).encode() for x in objects]


def _with_selector(claim: dict[str, Any], expression: str) -> dict[str, Any]:
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": expression}}]
    return claim


def _scenarios() -> list[tuple[str, dict[str, Any], str, list[dict[str, Any]]]]:
    demo_claim = next(c for c in read_objects([str(ROOT / "examples/demo/workload.yaml")]) if c.name == "big-training")
    out: list[tuple[str, dict[str, Any], str, list[dict[str, Any]]]] = [
        (f"demo / big-training @ {node}", demo_claim.to_api(), node, []) for node in ("node-a", "node-b", "node-c")
    ]
    out.append(("gpu8 / 9 GPUs", _claim("c", [_request("gpu", "gpu", 9)]), NODE, gpu8()))
    out.append(
        (
            "gpu8 / 2 x h100",
            _with_selector(_claim("c", [_request("gpu", "gpu", 2)]), "device.attributes['gpu.example.com'].model == 'h100'"),
            NODE,
            gpu8(),
        )
    )
    matched = _claim("c", [_request("gpu", "gpu", 2)])
    matched["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.example.com/index"}]
    out.append(("gpu8 / 2 GPUs, matchAttribute index", matched, NODE, gpu8()))
    out.append(
        (
            "mig8x7 / 8 GPUs + 1 partition",
            _claim("c", [_request("gpu", "gpu", 8), _request("mig", "mig-1g", 1)]),
            NODE,
            mig8x7(),
        )
    )
    return out


def run(repeat: int) -> list[dict[str, Any]]:
    demo = read_objects([str(ROOT / "examples/demo/cluster.yaml")])
    engine = e.Engine(source=StaticSource(demo, name="demo"), reservations=ReservationStore(), metrics=Metrics())
    engine.source.start()
    rows: list[dict[str, Any]] = []
    for name, claim, node, objects in _scenarios():
        blobs = _blobs(objects)

        def call(claim: dict[str, Any] = claim, node: str = node, blobs: list[bytes] = blobs) -> Any:
            return engine.explain([json.dumps(claim).encode()], node, objects=blobs)

        answer = call()  # warm-up: imports, compiled selectors, CEL match cache
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            answer = call()
            samples.append((time.perf_counter() - start) * 1000)
        ordered = sorted(samples)
        rows.append(
            {
                "scenario": name,
                "allocatable": answer.allocatable,
                "reasons": len(answer.reasons),
                "fixes": len(answer.fixes),
                "minimal": answer.minimal,
                "p50_ms": statistics.median(samples),
                "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    args = parser.parse_args(argv)
    rows = run(args.repeat)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'scenario':42} {'reasons':>7} {'fixes':>5} {'minimal':>7} {'p50 ms':>8} {'p99 ms':>8}")
    for r in rows:
        print(f"{r['scenario']:42} {r['reasons']:7d} {r['fixes']:5d} {r['minimal']!s:>7} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
