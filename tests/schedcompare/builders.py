"""Run outcomes as the scheduler comparison's runner records them, built by hand."""

from __future__ import annotations

import dataclasses

from dra_solver.service.schedcompare import workloads
from dra_solver.service.schedcompare.runner import Hold, PodOutcome
from dra_solver.service.schedcompare.workloads import GPU_DRIVER, PodSpec, Workload

N0, N1 = "node-000", "node-001"
FULL = "0/2 nodes are available: 2 cannot allocate all claims."


def gpus(node: str, *indices: int) -> tuple[str, ...]:
    return tuple(sorted(f"{GPU_DRIVER}/{node}/gpu-{i}" for i in indices))


def bound(name: str, size: str, node: str, devices: tuple[str, ...], start: float, end: float | None = None,
           subrequests: tuple[str, ...] = ()) -> PodOutcome:
    subs = subrequests or tuple("gpu" for _ in devices)
    return PodOutcome(name, size, created=0.0, bound_at=start + 0.01, node=node, devices=devices, subrequests=subs,
                      holds=[Hold(devices, subs, start, end)])


def pending(name: str, size: str, verdict: str = FULL) -> PodOutcome:
    return PodOutcome(name, size, created=0.0, unschedulable=verdict)


def gpu_workload(sizes: dict[str, str], nodes: int = 2) -> Workload:
    """``nodes`` empty 8-GPU nodes and the pods ``name -> size`` (1gpu, 8gpu, ...)."""
    w = workloads.build("mixed", nodes=nodes, pods=1)
    return dataclasses.replace(w, pods=[PodSpec(n, f"gpu-{s.removesuffix('gpu')}", s) for n, s in sizes.items()])


