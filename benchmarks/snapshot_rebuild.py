"""The node index of a new inventory snapshot: laid out from scratch, and carried from the
previous snapshot when only claims changed (what a scheduler writing allocations causes); and
the whole snapshot the service publishes then.

    python benchmarks/snapshot_rebuild.py [--nodes 500,5000] [--fill 0.8] [--changes 1] [--repeat 20]

Nodes of 8 GPUs, ``--fill`` of their GPUs held by one-device claims; each carried rebuild
follows ``--changes`` claims released. The index is what the service builds for every
snapshot (``Snapshot.index``), with the cyclic GC off as there, and each build includes the
visit orders of ``pack`` and ``spread`` (the next Schedule's first need). PUBLISH MS is all a
``dra-solver serve`` on an API server does for such a change once it has the objects: every
object screened again (``screen_objects``, with the verdicts it carries), the inventory
gathered, and the snapshot's carried index. Figures are medians of ``--repeat`` rebuilds,
imports and object decoding excluded.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dra_solver.model import Inventory, NodeIndex
from dra_solver.model import objects as o
from dra_solver.service.bench import device_class, gpu_node
from dra_solver.service.inventory import InventorySource, ObjectDecoder


def objects(nodes: int, fill: float) -> tuple[list[o.TypedObject], list[o.ResourceClaim]]:
    decoder = ObjectDecoder(validate="ignore")
    cluster: list[o.TypedObject] = [decoder.decode(device_class(), source="bench")]
    for i in range(nodes):
        cluster.extend(decoder.decode(raw, source="bench") for raw in gpu_node(f"node-{i:05d}"))
    rng = random.Random(1)
    claims: list[o.ResourceClaim] = []
    for s in (x for x in cluster if isinstance(x, o.ResourceSlice)):
        for d in s.spec.devices or []:
            if rng.random() >= fill:
                continue
            n = len(claims)
            raw: dict[str, Any] = {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": f"claim-{n}", "namespace": "bench", "uid": f"uid-{n}"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": s.spec.driver, "pool": s.spec.pool.name, "device": d.name}]}}},
            }
            claim = decoder.decode(raw, source="bench")
            assert isinstance(claim, o.ResourceClaim)
            claims.append(claim)
    return cluster, claims


def measure(nodes: int, fill: float, changes: int, repeat: int) -> dict[str, float]:
    cluster, claims = objects(nodes, fill)
    gc.freeze()
    gc.disable()
    fresh: list[float] = []
    carried: list[float] = []
    published: list[float] = []
    index = NodeIndex(Inventory.from_objects([*cluster, *claims]))
    for policy in ("pack", "spread"):
        index.preference_order(policy, full_last=True)
    source = InventorySource()
    _orders(source.publish_objects([*cluster, *claims], namespaces_known=True).index)
    current = list(claims)
    for r in range(repeat):
        for k in range(changes):
            i = (r * changes + k) % len(current)
            current[i] = current[i].model_copy(update={"status": None})
        inventory = Inventory.from_objects([*cluster, *current])
        t = time.perf_counter()
        scratch = NodeIndex(inventory)
        for policy in ("pack", "spread"):
            scratch.preference_order(policy, full_last=True)
        fresh.append(time.perf_counter() - t)
        t = time.perf_counter()
        index = NodeIndex(inventory, previous=index)
        for policy in ("pack", "spread"):
            index.preference_order(policy, full_last=True)
        carried.append(time.perf_counter() - t)
        everything = [*cluster, *current]
        t = time.perf_counter()
        _orders(source.publish_objects(everything, namespaces_known=True).index)
        published.append(time.perf_counter() - t)
    gc.enable()
    return {"nodes": nodes, "claims": len(claims), "fresh_ms": statistics.median(fresh) * 1000,
            "carried_ms": statistics.median(carried) * 1000, "publish_ms": statistics.median(published) * 1000}


def _orders(index: NodeIndex) -> None:
    for policy in ("pack", "spread"):
        index.preference_order(policy, full_last=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="500,5000", help="comma-separated node counts")
    parser.add_argument("--fill", type=float, default=0.8, help="share of GPUs held by claims")
    parser.add_argument("--changes", type=int, default=1, help="claims changed between two snapshots")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"{'NODES':>6} {'CLAIMS':>7} {'FROM SCRATCH MS':>16} {'CARRIED MS':>11} {'RATIO':>6} {'PUBLISH MS':>11}")
    for nodes in (int(n) for n in args.nodes.split(",")):
        r = measure(nodes, args.fill, args.changes, args.repeat)
        print(f"{r['nodes']:>6} {r['claims']:>7} {r['fresh_ms']:>16.1f} {r['carried_ms']:>11.1f} {r['fresh_ms'] / r['carried_ms']:>5.0f}x"
              f" {r['publish_ms']:>11.1f}", flush=True)


if __name__ == "__main__":
    main()
