"""The workloads of the scheduler comparison: the same cluster and pods for both schedulers.

A :class:`Workload` is plain API objects (Nodes, DeviceClasses, ResourceSlices published as a
driver would, one pool per node; ResourceClaimTemplates; claims already allocated to make a
cluster "partly used") and the pods in arrival order. Nothing here talks to a server: the
runner (:mod:`service.schedcompare.runner`) creates the objects on a fresh control plane and
sets each pod's ``schedulerName`` for the side it runs.

Every generated claim carries the label :data:`SIZE_LABEL` (copied from its template), which
the report groups placements by. Generation is deterministic (fixed seeds).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dra_solver.service.localcluster.cluster import node_object

NAMESPACE = "bench"
INIT_NAMESPACE = "bench-init"
SIZE_LABEL = "schedcompare.dra-solver.io/size"
POD_LABEL = "schedcompare.dra-solver.io/pod"

PERF_DRIVER = "test-driver.cdi.k8s.io"
PERF_CLASS = "test-class"
GPU_DRIVER = "gpu.example.com"
GPU_CLASS = "gpu.example.com"
GPUS_PER_NODE = 8
MIG_PROFILES = (("1g.10gb", 1, 10, 7), ("2g.20gb", 2, 20, 3), ("3g.40gb", 3, 40, 2), ("4g.40gb", 4, 40, 1))
"""(profile, compute slices, GiB, partitions per GPU): the A100-like layout of examples/replay."""
IN_USE_PATTERN = (0, 0, 0, 3, 0, 2, 2, 1)
"""GPUs already allocated per node, repeated over the cluster (examples/replay/gpu8-cluster.yaml)."""

Obj = dict[str, Any]


@dataclass(frozen=True)
class PodSpec:
    name: str
    template: str
    size: str


@dataclass(frozen=True)
class Churn:
    """Steady state: each bound pod is deleted ``lifetime`` seconds after it was bound, and
    new pods arrive whenever fewer than ``window`` created pods wait for a node."""

    lifetime: float
    window: int


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    nodes: list[Obj]
    cluster: list[Obj]
    """Cluster-scoped objects: DeviceClasses, ResourceSlices."""
    namespaced: list[Obj]
    """ResourceClaimTemplates (namespace :data:`NAMESPACE`) and already-allocated claims
    (namespace :data:`INIT_NAMESPACE`, with ``status``)."""
    pods: list[PodSpec]
    churn: Churn | None = None
    capacity: int | None = None
    """Pods that can be bound at once when known (every pod is schedulable when None)."""
    notes: list[str] = field(default_factory=list)

    def pod_object(self, spec: PodSpec, scheduler_name: str) -> Obj:
        """The pod as created: no container requests (like scheduler_perf's), one claim from
        its template."""
        pod: Obj = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": spec.name, "namespace": NAMESPACE,
                         "labels": {SIZE_LABEL: spec.size, POD_LABEL: "true"}},
            "spec": {
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                                "resources": {"claims": [{"name": "resource"}]}}],
                "resourceClaims": [{"name": "resource", "resourceClaimTemplateName": spec.template}],
                "terminationGracePeriodSeconds": 0,
            },
        }
        if scheduler_name != "default-scheduler":
            pod["spec"]["schedulerName"] = scheduler_name
        return pod


# --- building blocks ------------------------------------------------------------------------


def _node_names(nodes: int, prefix: str = "node") -> list[str]:
    width = max(3, len(str(nodes - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(nodes)]


def device_class(name: str, driver: str) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def resource_slice(name: str, node: str, driver: str, devices: list[Obj], *, count: int = 1,
                   shared_counters: list[Obj] | None = None) -> Obj:
    spec: Obj = {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": count}}
    if shared_counters is not None:
        spec["sharedCounters"] = shared_counters
    else:
        spec["devices"] = devices
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def claim_template(name: str, size: str, requests: list[Obj]) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"metadata": {"labels": {SIZE_LABEL: size}}, "spec": {"devices": {"requests": requests}}},
    }


def exactly(name: str, device_class_name: str, *, count: int = 1, selector: str = "") -> Obj:
    request: Obj = {"deviceClassName": device_class_name, "allocationMode": "ExactCount", "count": count}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": request}


def allocated_claim(name: str, node: str, driver: str, devices: list[str], request: str = "gpu") -> Obj:
    """A claim allocated before the run (a cluster in use): devices taken, nobody reserved."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": INIT_NAMESPACE, "labels": {SIZE_LABEL: "in-use"}},
        "spec": {"devices": {"requests": [exactly(request, GPU_CLASS, count=len(devices))]}},
        "status": {"allocation": {
            "devices": {"results": [{"request": request, "driver": driver, "pool": node, "device": d}
                                    for d in devices]},
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }},
    }


def _pods(sizes: list[str], template_of: Callable[[str], str]) -> list[PodSpec]:
    width = max(5, len(str(len(sizes) - 1)))
    return [PodSpec(f"pod-{i:0{width}d}", template_of(s), s) for i, s in enumerate(sizes)]


def plain_gpus(node: str, gpus: int = GPUS_PER_NODE) -> list[Obj]:
    return [{"name": f"gpu-{g}", "attributes": {"index": {"int": g}},
             "capacity": {"memory": {"value": "80Gi"}}} for g in range(gpus)]


def _gpu_cluster(names: list[str], devices: Callable[[str], list[Obj]] = plain_gpus) -> list[Obj]:
    """The GPU device class and one slice of ``devices(node)`` per node."""
    return [device_class(GPU_CLASS, GPU_DRIVER),
            *(resource_slice(f"{n}-gpus", n, GPU_DRIVER, devices(n)) for n in names)]


def _gpu_count_templates(counts: tuple[int, ...]) -> list[Obj]:
    """One template ``gpu-<c>`` per count, for pods of size ``<c>gpu`` (see ``_count_template``)."""
    return [claim_template(f"gpu-{c}", f"{c}gpu", [exactly("gpu", GPU_CLASS, count=c)]) for c in counts]


def _count_template(size: str) -> str:
    return f"gpu-{size.removesuffix('gpu')}"


# --- (a) scheduler_perf's SchedulingWithResourceClaimTemplate ---------------------------------


def perf_devices(devices: int, pci_roots: int = 2) -> list[Obj]:
    """scheduler_perf's resourceslice-basic-devices.yaml: an Intel-GPU-like device with a
    realistic number of attributes, PCI roots cycling."""
    out = []
    for i in range(devices):
        root = i % pci_roots
        out.append({
            "name": f"basic-device-{i}",
            "attributes": {
                "driver": {"string": "xe"}, "driverVersion": {"version": "1.2.3"},
                "resource.k8s.io/pciRoot": {"string": str(root)},
                "family": {"string": "Arc Pro B-Series"}, "health": {"string": "Healthy"},
                "model": {"string": "B60"}, "pciAddress": {"string": f"0000:0{i}:00.0"},
                "pciId": {"string": "0xe211"}, "pciRoot": {"string": f"0{root}"},
                "resource.kubernetes.io/pciBusID": {"string": f"0000:0{i}:00.0"},
                "resource.kubernetes.io/pciRoot": {"string": f"pci0000:0{root}"},
                "sriov": {"bool": True}, "type": {"string": "gpu"},
            },
            "capacity": {"memory": {"value": "24480Mi"}, "millicores": {"value": "1k"}},
        })
    return out


def claim_template_workload(nodes: int, pods: int, devices: int = GPUS_PER_NODE) -> Workload:
    names = _node_names(nodes, "scheduler-perf-dra")
    slices = [resource_slice(f"resourceslice-{i}", n, PERF_DRIVER, perf_devices(devices)) for i, n in enumerate(names)]
    template = claim_template("test-claim-template", "1dev", [{"name": "req-0", "exactly": {"deviceClassName": PERF_CLASS}}])
    return Workload(
        name="claim-template",
        description=f"scheduler_perf SchedulingWithResourceClaimTemplate: {nodes} nodes x {devices} devices, "
                    f"{pods} pods with one claim each from a template",
        nodes=[node_object(n, cpu="4", memory="32Gi", labels={"node-with-dra": "true"}) for n in names],
        cluster=[device_class(PERF_CLASS, PERF_DRIVER), *slices],
        namespaced=[template],
        pods=_pods(["1dev"] * pods, lambda _: "test-claim-template"),
        capacity=min(pods, nodes * devices),
    )


# --- (b) steady state --------------------------------------------------------------------------


def steady_state_workload(nodes: int, pods: int, *, lifetime: float = 2.0, window: int = 0, seed: int = 5) -> Workload:
    """Pods of 1 or 2 GPUs arrive while earlier ones are deleted: the cluster stays busy and
    freed devices are reused."""
    names = _node_names(nodes)
    rng = random.Random(seed)
    sizes = rng.choices(["1gpu", "2gpu"], weights=[3, 1], k=pods)
    templates = _gpu_count_templates((1, 2))
    return Workload(
        name="steady-state",
        description=f"steady state: {nodes} nodes x {GPUS_PER_NODE} GPUs, {pods} pods of 1-2 GPUs, "
                    f"each deleted {lifetime:g} s after it was bound",
        nodes=[node_object(n) for n in names],
        cluster=_gpu_cluster(names),
        namespaced=templates,
        pods=_pods(sizes, _count_template),
        churn=Churn(lifetime=lifetime, window=window or max(8, nodes * 2)),
    )


# --- (c) MIG replay ------------------------------------------------------------------------------


def mig_devices(gpu: int, order: str) -> list[Obj]:
    counters = f"gpu-{gpu}-counters"

    def device(name: str, profile: str, compute: int, gib: int) -> Obj:
        return {"name": name, "attributes": {"profile": {"string": profile}, "gpu": {"int": gpu}},
                "capacity": {"memory": {"value": f"{gib}Gi"}, "compute": {"value": str(compute)}},
                "consumesCounters": [{"counterSet": counters, "counters": {
                    "compute": {"value": str(compute)}, "memory": {"value": f"{gib}Gi"}}}]}

    whole = device(f"gpu-{gpu}", "whole", 7, 80)
    parts = [device(f"gpu-{gpu}-{p.replace('.', '-')}-{k}", p, c, g)
             for p, c, g, n in MIG_PROFILES for k in range(n)]
    return [whole, *parts] if order == "whole-first" else [*parts, whole]


def mig_slices(node: str, order: str) -> list[Obj]:
    per_slice = 4  # 4 GPUs x 14 devices = 56, within the limit for counter-consuming slices
    count = GPUS_PER_NODE // per_slice + 1
    counters = [{"name": f"gpu-{g}-counters", "counters": {"compute": {"value": "7"}, "memory": {"value": "80Gi"}}}
                for g in range(GPUS_PER_NODE)]
    out = [resource_slice(f"{node}-counters", node, GPU_DRIVER, [], count=count, shared_counters=counters)]
    for s in range(GPUS_PER_NODE // per_slice):
        devices = [d for g in range(s * per_slice, (s + 1) * per_slice) for d in mig_devices(g, order)]
        out.append(resource_slice(f"{node}-devices-{s}", node, GPU_DRIVER, devices, count=count))
    return out


def mig_workload(nodes: int, pods: int, order: str, *, seed: int = 42) -> Workload:
    """examples/replay's MIG stream (claims for at least 10/20/40/80 GiB, 4:3:2:1) on GPUs
    published whole-first or partitions-first."""
    names = _node_names(nodes)
    rng = random.Random(seed)
    sizes = [f"{g}Gi" for g in rng.choices([10, 20, 40, 80], weights=[4, 3, 2, 1], k=pods)]
    selector = "device.capacity['gpu.example.com'].memory.compareTo(quantity('{}')) >= 0"
    templates = [claim_template(f"mem-{g}gi", f"{g}Gi", [exactly("gpu", GPU_CLASS, selector=selector.format(f"{g}Gi"))])
                 for g in (10, 20, 40, 80)]
    return Workload(
        name=f"mig-{order}",
        description=f"MIG replay, {order}: {nodes} nodes x {GPUS_PER_NODE} GPUs as whole devices and "
                    f"partitions sharing counters; {pods} claims for 10/20/40/80 GiB (4:3:2:1)",
        nodes=[node_object(n) for n in names],
        cluster=[device_class(GPU_CLASS, GPU_DRIVER), *(s for n in names for s in mig_slices(n, order))],
        namespaced=templates,
        pods=_pods(sizes, lambda s: f"mem-{s[:-2].lower()}gi"),
    )


# --- (d) mixed 1/2/4/8 GPUs on a partly used cluster -------------------------------------------


def mixed_workload(nodes: int, pods: int, *, seed: int = 11) -> Workload:
    names = _node_names(nodes)
    rng = random.Random(seed)
    sizes = [f"{c}gpu" for c in rng.choices([1, 2, 4, 8], weights=[4, 3, 2, 2], k=pods)]
    in_use = []
    for i, n in enumerate(names):
        taken = IN_USE_PATTERN[i % len(IN_USE_PATTERN)]
        if taken:
            in_use.append(allocated_claim(f"running-on-{n}", n, GPU_DRIVER, [f"gpu-{g}" for g in range(taken)]))
    templates = _gpu_count_templates((1, 2, 4, 8))
    return Workload(
        name="mixed",
        description=f"mixed stream: {pods} pods of 1/2/4/8 GPUs (4:3:2:2) on {nodes} nodes x {GPUS_PER_NODE} GPUs, "
                    f"{sum(IN_USE_PATTERN[i % len(IN_USE_PATTERN)] for i in range(nodes))} GPUs already in use",
        nodes=[node_object(n) for n in names],
        cluster=_gpu_cluster(names),
        namespaced=[*templates, *in_use],
        pods=_pods(sizes, _count_template),
    )


# --- (e) FirstAvailable, the preferred device runs out -------------------------------------------


def first_available_workload(nodes: int, pods: int, *, preferred: int = 2) -> Workload:
    """Each node has ``preferred`` h100s and the rest a100s; every claim asks for one h100,
    else two a100s. Once the h100s are gone, claims fall back."""
    names = _node_names(nodes)

    def gpus() -> list[Obj]:
        return [{"name": f"gpu-{g}", "attributes": {"model": {"string": "h100" if g < preferred else "a100"}}}
                for g in range(GPUS_PER_NODE)]

    def sub(model: str, count: int) -> Obj:
        return {"name": model, "deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": count,
                "selectors": [{"cel": {"expression": f"device.attributes['{GPU_DRIVER}'].model == '{model}'"}}]}

    template = claim_template("h100-else-2xa100", "h100-or-2xa100", [{"name": "gpu", "firstAvailable": [sub("h100", 1), sub("a100", 2)]}])
    per_node = preferred + (GPUS_PER_NODE - preferred) // 2
    return Workload(
        name="first-available",
        description=f"FirstAvailable: {nodes} nodes with {preferred} h100 + {GPUS_PER_NODE - preferred} a100; "
                    f"{pods} claims for one h100, else two a100s",
        nodes=[node_object(n) for n in names],
        cluster=_gpu_cluster(names, lambda _: gpus()),
        namespaced=[template],
        pods=_pods(["h100-or-2xa100"] * pods, lambda _: "h100-else-2xa100"),
        capacity=min(pods, nodes * per_node),
    )


WORKLOADS: dict[str, str] = {
    "claim-template": "scheduler_perf SchedulingWithResourceClaimTemplate (1 device per pod)",
    "steady-state": "pods deleted as others arrive",
    "mig-whole-first": "MIG replay, whole GPUs listed first",
    "mig-partitions-first": "MIG replay, partitions listed first",
    "mixed": "1/2/4/8-GPU stream on a partly used cluster",
    "first-available": "FirstAvailable where the preferred device runs out",
}


def build(name: str, *, nodes: int, pods: int) -> Workload:
    """The workload ``name`` (a key of :data:`WORKLOADS`) at this size."""
    if nodes < 1:
        raise ValueError("--nodes: must be at least 1")
    if pods < 1:
        raise ValueError("--pods: must be at least 1")
    if name == "claim-template":
        return claim_template_workload(nodes, pods)
    if name == "steady-state":
        return steady_state_workload(nodes, pods)
    if name in ("mig-whole-first", "mig-partitions-first"):
        return mig_workload(nodes, pods, name.removeprefix("mig-"))
    if name == "mixed":
        return mixed_workload(nodes, pods)
    if name == "first-available":
        return first_available_workload(nodes, pods)
    supported = ", ".join(f'"{k}"' for k in WORKLOADS)
    raise ValueError(f'--schedulers: Unsupported value: "{name}": supported values: {supported}')
