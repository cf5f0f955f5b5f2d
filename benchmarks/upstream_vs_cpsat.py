"""Upstream's Go allocator vs CP-SAT vs our Python port of upstream's search, same inputs, same run.

    python benchmarks/upstream_vs_cpsat.py [--deadline 10] [--repeat 3] [--max-size N]
                                           [--only families|nodes] [--family NAME]

Needs the Go wrapper (``scripts/build-upstream.sh upstream-allocator``; this script builds it
when Go is there). For every input, each allocator runs once to warm caches (CEL compilation on
both sides), then ``--repeat`` times; the table shows the median wall time of each, their
verdicts, upstream's and the port's search steps, and the ratios measured in this run:
``port/up`` (how much slower the Python port is than the real thing on the same search) and
``cp/up`` (CP-SAT's time over upstream's). Upstream's time is what Go measures around
``Allocate`` alone; the Python sides are timed around ``allocate(validate=False)``, so neither
includes decoding or API validation.

Inputs:
- the hard families of ``benchmarks/compare_families.py`` (exponential for first-fit search);
- realistic nodes: 8 GPUs (claims of 1, 4 and 8 GPUs, and 4 on a half-used node); 8 GPUs
  partitioned MIG-style on shared counters (a mix of partition sizes, a FirstAvailable claim
  that falls back to partitions on a node whose GPUs are partly used); 8 GPUs and 8 NICs on 4
  PCIe roots (2 GPUs + 2 NICs with matchAttribute pcieRoot, with the first roots partly used).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.compare_families import FAMILIES
from dra_solver.model import allocate
from dra_solver.model.allocation import AllocatedState, AllocationRequest, DeviceID, Inventory
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.decode import decode_all
from dra_solver.model.errors import AllocationError, SolveTimeout
from dra_solver.model.objects import ResourceClaim
from dra_solver.service import upstream

GPU = "gpu.example.com"
NIC = "nic.example.com"
NODE = "node-1"


# --- realistic nodes --------------------------------------------------------------------------


def _class(name: str, driver: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]}}


def _slice(name: str, driver: str, pool: str, count: int, *, devices: list[dict[str, Any]] | None = None,
           counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "nodeName": NODE,
                            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}}
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def _claim(name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": {"devices": devices}}


def _exact(name: str, cls: str, count: int, selector: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}
    if selector:
        body["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": body}


def _gpu(i: int, root: int) -> dict[str, Any]:
    return {"name": f"gpu-{i}", "attributes": {
        "productName": {"string": "NVIDIA A100-SXM4-40GB"}, "index": {"int": i},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{root:02x}"}},
        "capacity": {"memory": {"value": "40Gi"}}}


def eight_gpus(claim: dict[str, Any]) -> list[dict[str, Any]]:
    devices = [_gpu(i, i // 2) for i in range(8)]
    return [_class("gpu", GPU), _slice("gpus", GPU, NODE, 1, devices=devices), claim]


MIG_PROFILES = (("1g", 1, range(7)), ("2g", 2, (0, 2, 4)), ("3g", 4, (0, 4)))
"""name, memory slices used, first slice of each placement (A100-40GB-like)."""


def mig_node(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """8 GPUs, each whole or split into partitions; every device draws on its GPU's slices."""
    counter_sets = [{"name": f"gpu-{g}-slices", "counters": {f"memory-slice-{k}": {"value": "1"} for k in range(8)}}
                    for g in range(8)]
    per_slice: list[list[dict[str, Any]]] = [[], []]
    for g in range(8):
        def consumes(first: int, size: int, g: int = g) -> list[dict[str, Any]]:
            return [{"counterSet": f"gpu-{g}-slices",
                     "counters": {f"memory-slice-{k}": {"value": "1"} for k in range(first, first + size)}}]
        mine = [{"name": f"gpu-{g}", "attributes": {"type": {"string": "gpu"}, "index": {"int": g}},
                 "consumesCounters": consumes(0, 8)}]
        for profile, size, starts in MIG_PROFILES:
            for start in starts:
                mine.append({"name": f"gpu-{g}-mig-{profile}-{start}",
                             "attributes": {"type": {"string": "mig"}, "profile": {"string": profile},
                                            "parentIndex": {"int": g}},
                             "consumesCounters": consumes(start, size)})
        per_slice[g // 4].extend(mine)
    return [_class("gpu", GPU),
            _slice("mig-counters", GPU, NODE, 3, counters=counter_sets),
            _slice("mig-devices-0", GPU, NODE, 3, devices=per_slice[0]),
            _slice("mig-devices-1", GPU, NODE, 3, devices=per_slice[1]),
            claim]


def gpu_nic_node(claim: dict[str, Any]) -> list[dict[str, Any]]:
    gpus = [_gpu(i, i // 2) for i in range(8)]
    nics = [{"name": f"nic-{i}", "attributes": {"rdma": {"bool": True},
             "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 2:02x}"}}} for i in range(8)]
    return [_class("gpu", GPU), _class("nic", NIC), _slice("gpus", GPU, NODE, 1, devices=gpus),
            _slice("nics", NIC, NODE, 1, devices=nics), claim]


ALIGNED = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
MIG = f'device.attributes["{GPU}"].type == "mig"'


def _mig_profile(profile: str) -> str:
    # Whole GPUs have no profile: test the type first (a missing key is a CEL runtime error).
    return f'{MIG} && device.attributes["{GPU}"].profile == "{profile}"'


def _first_available(name: str, subs: list[tuple[str, int, str]]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": [
        {"name": s, "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": n,
         "selectors": [{"cel": {"expression": sel}}]} for s, n, sel in subs]}


WHOLE = f'device.attributes["{GPU}"].type == "gpu"'

Node = tuple[list[dict[str, Any]], frozenset[DeviceID]]


def _in_use(driver: str, pool: str, *names: str) -> frozenset[DeviceID]:
    return frozenset(DeviceID(driver, pool, n) for n in names)


NODES: dict[str, Callable[[], Node]] = {
    "8gpu: 1 GPU": lambda: (eight_gpus(_claim("c", [_exact("gpu", "gpu", 1)])), frozenset()),
    "8gpu: 4 GPUs": lambda: (eight_gpus(_claim("c", [_exact("gpu", "gpu", 4)])), frozenset()),
    "8gpu: 8 GPUs": lambda: (eight_gpus(_claim("c", [_exact("gpu", "gpu", 8)])), frozenset()),
    "8gpu: 4 on half-used": lambda: (eight_gpus(_claim("c", [_exact("gpu", "gpu", 4)])),
                                     _in_use(GPU, NODE, "gpu-0", "gpu-2", "gpu-5", "gpu-7")),
    "mig: 1 whole + 2x3g + 4x1g": lambda: (mig_node(_claim("c", [
        _exact("whole", "gpu", 1, WHOLE), _exact("big", "gpu", 2, _mig_profile("3g")),
        _exact("small", "gpu", 4, _mig_profile("1g"))])), frozenset()),
    "mig: firstAvailable, partly used": lambda: (mig_node(_claim("c", [_first_available("r", [
        ("whole", 2, WHOLE), ("halves", 4, _mig_profile("3g")), ("sevenths", 6, _mig_profile("1g"))])])),
        _in_use(GPU, NODE, *[f"gpu-{g}" for g in range(6)], "gpu-6-mig-3g-0", "gpu-7-mig-3g-4")),
    "gpu+nic: 2+2 aligned": lambda: (gpu_nic_node(_claim("c", [_exact("gpu", "gpu", 2), _exact("nic", "nic", 2)],
                                                          ALIGNED)), frozenset()),
    "gpu+nic: 2+2 aligned, roots partly used": lambda: (
        gpu_nic_node(_claim("c", [_exact("gpu", "gpu", 2), _exact("nic", "nic", 2)], ALIGNED)),
        _in_use(GPU, NODE, "gpu-0", "gpu-2", "gpu-4") | _in_use(NIC, NODE, "nic-1")),
}


# --- running ----------------------------------------------------------------------------------


def _request(docs: list[dict[str, Any]], in_use: frozenset[DeviceID], allocator: str, deadline: float) -> AllocationRequest:
    decoded = Inventory.from_objects(decode_all(docs))
    claims = tuple(c for c in decoded.claims if isinstance(c, ResourceClaim))
    inventory = Inventory(classes=decoded.classes, slices=decoded.slices, nodes=decoded.nodes,
                          extra_allocated=AllocatedState(devices=in_use))
    return AllocationRequest(claims=claims, node=inventory.node(NODE), inventory=inventory,
                             allocator=allocator, time_limit=deadline)  # type: ignore[arg-type]


def _python(request: AllocationRequest, cel: CelEnvironment) -> tuple[str, float, int]:
    start = time.perf_counter()
    try:
        outcome = allocate(request, cel=cel, validate=False)
    except SolveTimeout:
        return "deadline", time.perf_counter() - start, 0
    except AllocationError:
        return "error", time.perf_counter() - start, 0
    seconds = time.perf_counter() - start
    if outcome.stats.status == "DEADLINE":
        return "deadline", seconds, outcome.stats.steps
    return ("allocated" if outcome.allocated else "unsat"), seconds, outcome.stats.steps


def _upstream(request: AllocationRequest, runner: upstream.UpstreamAllocator) -> tuple[str, float, int]:
    answer = runner.run(upstream.request_document(request))
    verdict = {"unsatisfiable": "unsat", "timeout": "deadline"}.get(answer.verdict, answer.verdict)
    return verdict, answer.elapsed_seconds, answer.steps or 0


def measure(docs: list[dict[str, Any]], in_use: frozenset[DeviceID], *, deadline: float, repeat: int,
            cel: CelEnvironment, runner: upstream.UpstreamAllocator) -> dict[str, tuple[str, float, int]]:
    out: dict[str, tuple[str, float, int]] = {}
    for side in ("upstream", "cpsat", "backtracking"):
        request = _request(docs, in_use, "cpsat" if side == "upstream" else side, deadline)

        def once(request: AllocationRequest = request, side: str = side) -> tuple[str, float, int]:
            return _upstream(request, runner) if side == "upstream" else _python(request, cel)

        first = once()  # warm caches; a run that hits the deadline is not repeated
        runs = [first] if first[0] == "deadline" else [once() for _ in range(repeat)]
        out[side] = (runs[0][0], statistics.median(r[1] for r in runs), runs[0][2])
    return out


def _ratio(a: float, b: float) -> str:
    if b <= 0:
        return "      inf"
    r = a / b
    return f"{r:9.1f}x" if r >= 0.1 else f"{r:9.4f}x"


def _row(label: str, size: str, m: dict[str, tuple[str, float, int]]) -> str:
    (uv, ut, us), (cv, ct, _), (bv, bt, bs) = m["upstream"], m["cpsat"], m["backtracking"]
    return (f"{label:40} {size:>5} {uv:>9} {ut:10.5f} {us:9d} {cv:>9} {ct:10.5f} {bv:>9} {bt:10.5f} {bs:9d} "
            f"{_ratio(bt, ut)} {_ratio(ct, ut)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deadline", type=float, default=10.0, help="per allocator and input, in seconds")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-size", type=int, default=None, help="largest family size to run")
    parser.add_argument("--only", choices=("families", "nodes"))
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    args = parser.parse_args()
    cel = CelEnvironment()
    print(f"{'input':40} {'size':>5} {'up':>9} {'up s':>10} {'up steps':>9} {'cpsat':>9} {'cp s':>10} "
          f"{'port':>9} {'port s':>10} {'bt steps':>9} {'port/up':>10} {'cp/up':>10}")
    with upstream.UpstreamAllocator(upstream.binary(build=True)) as runner:
        # The first solve in a process pays one-off start-up costs (solver, CEL environment):
        # keep them out of every row.
        warm_docs, warm_in_use = next(iter(NODES.values()))()
        measure(warm_docs, warm_in_use, deadline=args.deadline, repeat=1, cel=cel, runner=runner)
        if args.only != "nodes":
            for name in args.family or list(FAMILIES):
                build, sizes = FAMILIES[name]
                for size in sizes:
                    if args.max_size is not None and size > args.max_size:
                        break
                    m = measure(build(size), frozenset(), deadline=args.deadline, repeat=args.repeat,
                                cel=cel, runner=runner)
                    print(_row(name, str(size), m), flush=True)
                    if "deadline" in (m["upstream"][0], m["backtracking"][0]):
                        break
        if args.only != "families":
            for label, make in NODES.items():
                docs, in_use = make()
                print(_row(label, "-", measure(docs, in_use, deadline=args.deadline, repeat=args.repeat,
                                               cel=cel, runner=runner)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
