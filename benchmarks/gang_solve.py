"""Gang placement latency (``ScheduleGroup``'s path, in process, no gRPC) against the issue's targets.

    python benchmarks/gang_solve.py [--repeat 5] [--only NAME] [--path auto|aggregated|joint] [--json]

Clusters: racks of 16 nodes (label ``topology.example.com/rack``), 8 GPUs each
(``gpu.example.com``, one pool per node), some GPUs in use (every rack except a few has nodes
with 2 or 4 GPUs busy, so the rack choice matters), one fabric device per rack reachable from
its nodes (``fabric.example.com``, node selector on the rack label); node room 64 CPU.

Rows (targets from issue 17):

- ``16x8 rack @ 1000``: 16 pods x 8 GPUs, rack constraint, a shared fabric claim, 1,000 nodes
  (63 racks): p50 <= 1 s.
- ``64x2 rack @ 5000``: 64 pods x 2 GPUs in one rack (16 nodes x 8 GPUs: exactly one whole
  rack's worth), a shared fabric claim, 5,000 nodes (313 racks): <= 5 s, anytime.
- ``64x8 any @ 5000``: 64 pods x 8 GPUs, no topology key (the cluster is one domain), 5,000
  nodes: <= 5 s, anytime.

Each row runs the engine's group path (``service.groups.schedule_group``: the core's
``model.schedule_group`` with the engine's per-node solves, then ``model.check_group`` on the
answer) over a served snapshot, after one warm-up call on a different gang size (imports, CEL
compilation and the snapshot's index are outside the timed calls; the per-node verdict cache
is not shared between calls). The time limit is the target: an answer cut short is reported
FEASIBLE with its gap. Printed per row: p50 and max seconds, status, gap, path, domains
evaluated/total, solves. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dra_solver.model import GroupPod  # noqa: E402
from dra_solver.model.decode import decode_object  # noqa: E402
from dra_solver.model.objects import ResourceClaim  # noqa: E402
from dra_solver.service import engine as e  # noqa: E402
from dra_solver.service import groups  # noqa: E402
from dra_solver.service.inventory import StaticSource  # noqa: E402
from dra_solver.service.metrics import Metrics  # noqa: E402
from dra_solver.service.reservations import ReservationStore  # noqa: E402

RACK = "topology.example.com/rack"
RACK_SIZE = 16
FREE_RACKS = (5, 17, 41)
"""Racks with no GPU in use (the others each have busy nodes)."""

Obj = dict[str, Any]


def cluster(nodes: int) -> list[Obj]:
    objs: list[Obj] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
         "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "fabric.example.com"},
         "spec": {"selectors": [{"cel": {"expression": 'device.driver == "fabric.example.com"'}}]}},
    ]
    racks = (nodes + RACK_SIZE - 1) // RACK_SIZE
    for i in range(nodes):
        r, j = divmod(i, RACK_SIZE)
        name = f"r{r}-n{j}"
        objs.append({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RACK: f"r{r}"}},
                     "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}})
        objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-gpus"},
                     "spec": {"driver": "gpu.example.com", "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                              "devices": [{"name": f"gpu-{k}", "attributes": {"model": {"string": "a100"}}} for k in range(8)]}})
        busy = 0 if r in FREE_RACKS else (2 if (r + j) % 5 == 0 else 4 if (r * 3 + j) % 7 == 0 else 0)
        if busy:
            objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": f"busy-{name}", "namespace": "default"},
                         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": busy}}]}},
                         "status": {"allocation": {
                             "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": name, "device": f"gpu-{k}"} for k in range(busy)]},
                             "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]}},
                             "reservedFor": [{"resource": "pods", "name": f"busy-{name}", "uid": f"00000000-0000-4000-8000-{i:012d}"}]}})
    for r in range(racks):
        objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"r{r}-fabric"},
                     "spec": {"driver": "fabric.example.com", "pool": {"name": f"r{r}-fabric", "generation": 1, "resourceSliceCount": 1},
                              "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": RACK, "operator": "In", "values": [f"r{r}"]}]}]},
                              "devices": [{"name": "link-0", "attributes": {"rack": {"string": f"r{r}"}}}]}})
    return objs


def claim(name: str, cls: str, count: int) -> ResourceClaim:
    obj = decode_object({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "default"},
                         "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": cls, "count": count}}]}}})
    assert isinstance(obj, ResourceClaim)
    return obj


def gang(pods: int, gpus: int, *, key: str, shared: bool, path: str, prefix: str = "w") -> groups.GroupSpec:
    fabric = claim(f"{prefix}-fabric", "fabric.example.com", 1) if shared else None
    members = tuple(
        GroupPod(f"{prefix}-{i:03d}", (claim(f"{prefix}-{i:03d}-gpu", "gpu.example.com", gpus),), (fabric.ref,) if fabric else (), None, 4000, 16 << 30)
        for i in range(pods)
    )
    return groups.GroupSpec(f"default/{prefix}", members, (fabric,) if fabric else (), pods, key, None, path)  # type: ignore[arg-type]


ROWS: list[tuple[str, int, int, int, str, bool, float]] = [
    # name, nodes, pods, gpus per pod, topology key, shared fabric, target seconds
    ("16x8 rack @ 1000", 1000, 16, 8, RACK, True, 1.0),
    ("64x2 rack @ 5000", 5000, 64, 2, RACK, True, 5.0),
    ("64x8 any @ 5000", 5000, 64, 8, "", False, 5.0),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    parser.add_argument("--path", default="auto", choices=("auto", "aggregated", "joint"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: list[dict[str, Any]] = []
    engines: dict[int, e.Engine] = {}
    for name, nodes, pods, gpus, key, shared, target in ROWS:
        if args.only and args.only not in name:
            continue
        if nodes not in engines:
            source = StaticSource([decode_object(x) for x in cluster(nodes)], name=f"racks-{nodes}")
            source.start()
            engines[nodes] = e.Engine(source=source, reservations=ReservationStore(), metrics=Metrics(),
                                      limits=e.Limits(default_solve_seconds=60.0))
        engine = engines[nodes]
        engine.current().index  # noqa: B018  (build the snapshot's index outside the timed calls)
        with contextlib.suppress(e.DeadlineExceeded):  # untimed
            groups.schedule_group(engine, gang(2, 1, key=key, shared=shared, path=args.path, prefix="warm"), deadline=engine.clock() + 4 * target)
        times: list[float] = []
        answer = None
        for _ in range(args.repeat):
            spec = gang(pods, gpus, key=key, shared=shared, path=args.path)
            start = time.perf_counter()
            try:
                answer = groups.schedule_group(engine, spec, deadline=engine.clock() + target)
            except e.DeadlineExceeded:
                answer = None  # nothing found in time: no incumbent to return
            times.append(time.perf_counter() - start)
        if answer is None:
            out.append({"row": name, "target_s": target, "p50_s": round(statistics.median(times), 3), "placed": None, "met": False})
            if not args.json:
                print(f"{name:<18} no placement found within {target:.0f}s (DEADLINE_EXCEEDED)", flush=True)
            continue
        s = answer.outcome.stats
        row = {
            "row": name, "target_s": target, "p50_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
            "placed": answer.outcome.placed, "pods": answer.outcome.pods_placed, "domain": answer.outcome.domain,
            "status": s.status, "gap": round(s.gap, 4), "path": s.path, "domains": f"{s.domains_evaluated}/{s.domains_total}",
            "solves": s.solves, "met": statistics.median(times) <= target,
        }
        out.append(row)
        if not args.json:
            print(f"{name:<18} p50 {row['p50_s']:>6.3f}s  max {row['max_s']:>6.3f}s  (target {target:.0f}s: {'met' if row['met'] else 'MISSED'})  "
                  f"placed {row['pods']} in {row['domain']}  {s.status} gap {100 * s.gap:.1f}%  {s.path}  domains {row['domains']}  solves {s.solves}",
                  flush=True)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
