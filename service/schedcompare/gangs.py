"""Gangs on both schedulers: kube-scheduler v1.37.2 (gang and topology-aware scheduling on)
and dra-solver, the same PodGroups on the same fragmented cluster, each side on a fresh
control plane, in the same run.

API:
- :class:`GangWorkload`: racks of GPU nodes (label :data:`RACK_LABEL`, 8 GPUs per node, some
  in use, a fabric slice per rack reachable through a node selector on the label) and a stream
  of :class:`Gang` (pods with 1-8 GPUs each from count templates, ``minCount`` = all pods, some
  with a rack constraint, some sharing a standalone fabric claim named in the PodGroup's
  ``spec.resourceClaims``).
- :func:`gang_stream` (seeded) and :func:`sequential_fails` (the case where one pod at a time
  fails but a joint placement exists: a rack with a big node and a small one, the small pod
  seen first); :data:`GANG_WORKLOADS` by name.
- :func:`run_gang_side`: fresh control plane, the cluster, one scheduler, the gangs one at a
  time (the next starts when the previous is bound, reported Unschedulable, or timed out; a
  gang that was not placed is deleted so neither side keeps working on it) ->
  :class:`GangSideResult` (per gang: placed, seconds, nodes, the PodGroup's message; GPUs
  idle; devices allocated twice).
- :func:`same_state` (with :func:`static_objects`): dra-solver's answer for a gang on the
  cluster as the API server shows it (kube-scheduler's side judges both on the same states).
- :func:`format_comparison`: the figures of both sides as a Markdown table.

Each side runs in the pod runner's :func:`runner.live_side` (control plane, cluster, scheduler,
canary); kube-controller-manager runs upstream's ``resourceclaim-controller`` and
``podgroup-protection-controller`` on the kube-scheduler side.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_solver import model
from dra_solver.service import groups
from dra_solver.service.engine import DeadlineExceeded
from dra_solver.service.localcluster.cluster import node_object
from dra_solver.service.localcluster.controlplane import (
    Binaries,
)
from dra_solver.service.schedcompare import runner
from dra_solver.service.schedcompare.kubehttp import Client, HTTPError
from dra_solver.service.schedcompare.workloads import (
    GPU_CLASS,
    GPU_DRIVER,
    GPUS_PER_NODE,
    IN_USE_PATTERN,
    NAMESPACE,
    Workload,
    allocated_claim,
    claim_template,
    device_class,
    exactly,
    resource_slice,
)

RACK_LABEL = "topology.example.com/rack"
GANG_LABEL = "schedcompare.dra-solver.io/gang"
FABRIC_DRIVER = "fabric.example.com"
FABRIC_CLASS = "fabric.example.com"
PODGROUP_API = "scheduling.k8s.io/v1beta1"
PODGROUPS = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NAMESPACE}/podgroups"
GPU_COUNTS = (1, 2, 4, 8)

Obj = dict[str, Any]


@dataclass(frozen=True)
class GangPod:
    name: str
    gpus: int
    cpu: str


@dataclass(frozen=True)
class Gang:
    name: str
    pods: tuple[GangPod, ...]
    rack: bool = False
    """``schedulingConstraints.topology`` on the rack label."""
    shared: bool = False
    """A standalone fabric claim ``<gang>-fabric`` in the PodGroup's ``spec.resourceClaims``."""

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pods)


@dataclass(frozen=True)
class GangWorkload:
    name: str
    description: str
    nodes: list[Obj]
    cluster: list[Obj]
    namespaced: list[Obj]
    gangs: list[Gang]
    gpus_total: int

    def base(self) -> Workload:
        """The cluster part as the pod runner's workload (no pods of its own)."""
        return Workload(self.name, self.description, self.nodes, self.cluster, self.namespaced, [])

    def objects(self, gang: Gang, scheduler_name: str) -> list[Obj]:
        """What creating ``gang`` means, in order: its shared claim, the PodGroup, the pods."""
        out: list[Obj] = []
        fabric = {"name": "fabric", "resourceClaimName": f"{gang.name}-fabric"}
        if gang.shared:
            out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": f"{gang.name}-fabric", "namespace": NAMESPACE},
                        "spec": {"devices": {"requests": [exactly("link", FABRIC_CLASS)]}}})
        spec: Obj = {"schedulingPolicy": {"gang": {"minCount": len(gang.pods)}}}
        if gang.rack:
            spec["schedulingConstraints"] = {"topology": [{"key": RACK_LABEL}]}
        if gang.shared:
            spec["resourceClaims"] = [fabric]
        out.append({"apiVersion": PODGROUP_API, "kind": "PodGroup", "metadata": {"name": gang.name, "namespace": NAMESPACE},
                    "spec": spec})
        for p in gang.pods:
            claims = [{"name": "gpu", "resourceClaimTemplateName": f"gpu-{p.gpus}"}] + ([fabric] if gang.shared else [])
            pod: Obj = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": p.name, "namespace": NAMESPACE, "labels": {GANG_LABEL: gang.name}},
                "spec": {
                    "schedulingGroup": {"podGroupName": gang.name},
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                                    "resources": {"requests": {"cpu": p.cpu, "memory": "1Gi"},
                                                  "claims": [{"name": c["name"]} for c in claims]}}],
                    "resourceClaims": claims,
                    "terminationGracePeriodSeconds": 0,
                },
            }
            if scheduler_name != "default-scheduler":
                pod["spec"]["schedulerName"] = scheduler_name
            out.append(pod)
        return out


def _rack_objects(racks: list[tuple[str, list[tuple[str, int, int]]]], fabric_links: int) -> tuple[list[Obj], list[Obj], list[Obj], int]:
    """Nodes, cluster-scoped objects and claims in use for racks of (node, cpu, GPUs in use)."""
    nodes: list[Obj] = []
    cluster: list[Obj] = [device_class(GPU_CLASS, GPU_DRIVER), device_class(FABRIC_CLASS, FABRIC_DRIVER)]
    namespaced: list[Obj] = [claim_template(f"gpu-{c}", f"{c}gpu", [exactly("gpu", GPU_CLASS, count=c)]) for c in GPU_COUNTS]
    total = 0
    for rack, members in racks:
        for name, cpu, busy in members:
            nodes.append(node_object(name, cpu=str(cpu), memory="512Gi", labels={RACK_LABEL: rack}))
            cluster.append(resource_slice(f"{name}-gpus", name, GPU_DRIVER,
                                          [{"name": f"gpu-{g}", "attributes": {"index": {"int": g}}} for g in range(GPUS_PER_NODE)]))
            total += GPUS_PER_NODE
            if busy:
                namespaced.append(allocated_claim(f"in-use-{name}", name, GPU_DRIVER, [f"gpu-{g}" for g in range(busy)]))
        cluster.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{rack}-fabric"},
            "spec": {"driver": FABRIC_DRIVER, "pool": {"name": f"{rack}-fabric", "generation": 1, "resourceSliceCount": 1},
                     "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": RACK_LABEL, "operator": "In", "values": [rack]}]}]},
                     "devices": [{"name": f"link-{i}", "attributes": {"rack": {"string": rack}}} for i in range(fabric_links)]},
        })
    return nodes, cluster, namespaced, total


def gang_stream(*, racks: int = 4, gangs: int = 40, seed: int = 17, min_rack: int = 8, max_rack: int = 16) -> GangWorkload:
    """Racks of ``min_rack``-``max_rack`` nodes x 8 GPUs (CPU 16-64, GPUs in use by
    :data:`IN_USE_PATTERN`) and ``gangs`` gangs of 2-16 pods x 1-8 GPUs (mixed within a gang),
    about half with a rack constraint and a third sharing a fabric claim."""
    rng = random.Random(seed)
    layout: list[tuple[str, list[tuple[str, int, int]]]] = []
    i = 0
    for r in range(racks):
        members = []
        for n in range(rng.randint(min_rack, max_rack)):
            members.append((f"r{r}-n{n:02d}", rng.choice((16, 32, 64)), IN_USE_PATTERN[i % len(IN_USE_PATTERN)]))
            i += 1
        layout.append((f"r{r}", members))
    nodes, cluster, namespaced, total = _rack_objects(layout, fabric_links=4)
    stream = []
    for g in range(gangs):
        size = rng.randint(2, 16)
        big = rng.random() < 0.5
        counts = (4, 8) if big else (1, 2, 4)
        pods = tuple(GangPod(f"g{g:02d}-p{p:02d}", gpus := rng.choice(counts), str(gpus * rng.choice((1, 2))))
                     for p in range(size))
        stream.append(Gang(f"g{g:02d}", pods, rack=rng.random() < 0.5, shared=rng.random() < 0.3))
    return GangWorkload("gang-stream", f"{racks} racks of {min_rack}-{max_rack} nodes x 8 GPUs, {gangs} gangs of 2-16 pods (seed {seed})",
                        nodes, cluster, namespaced, stream, total)


def sequential_fails() -> GangWorkload:
    """Rack r2 holds n-c (64 CPU, 8 GPUs) and n-d (8 CPU, 4 GPUs in reach: 4 in use); the gang
    is a-small (4 GPUs, created first) and b-big (8 GPUs), one rack, minCount 2. One pod at a
    time puts a-small on the emptier n-c and b-big then fits nowhere; a-small on n-d and b-big
    on n-c is the joint placement. Rack r1's nodes have 4 free GPUs each."""
    layout = [("r1", [("n-a", 16, 4), ("n-b", 16, 4)]), ("r2", [("n-c", 64, 0), ("n-d", 8, 4)])]
    nodes, cluster, namespaced, total = _rack_objects(layout, fabric_links=1)
    gang = Gang("train", (GangPod("a-small", 4, "4"), GangPod("b-big", 8, "4")), rack=True, shared=True)
    return GangWorkload("sequential-fails", "one pod at a time fails, a joint placement exists", nodes, cluster, namespaced, [gang], total)


GANG_WORKLOADS: dict[str, Callable[[], GangWorkload]] = {"gang-stream": gang_stream, "sequential-fails": sequential_fails}


# --- running one side -------------------------------------------------------------------------


@dataclass
class GangOutcome:
    name: str
    pods: int
    gpus: int
    placed: bool = False
    seconds: float | None = None
    """From the first object created to the last pod bound (placed) or to the verdict."""
    nodes: dict[str, str] = field(default_factory=dict)
    racks: list[str] = field(default_factory=list)
    message: str = ""
    """The PodGroup's PodGroupInitiallyScheduled message when it was not placed."""
    timed_out: bool = False
    same_state: SameState | None = None
    """kube-scheduler's side only: what dra-solver answers for this gang on the cluster state
    kube-scheduler had when the gang arrived (nothing applied)."""

    def to_json(self) -> Obj:
        out: Obj = {"name": self.name, "pods": self.pods, "gpus": self.gpus, "placed": self.placed, "seconds": self.seconds,
                    "nodes": self.nodes, "racks": self.racks, "message": self.message, "timedOut": self.timed_out}
        if self.same_state is not None:
            out["sameState"] = self.same_state.to_json()
        return out


@dataclass(frozen=True)
class SameState:
    """dra-solver's answer for a gang on the other side's cluster state, checked by the validator."""

    placed: bool
    nodes: dict[str, str]
    seconds: float
    """The group solve alone (in process)."""
    message: str = ""

    def to_json(self) -> Obj:
        return {"placed": self.placed, "nodes": self.nodes, "seconds": self.seconds, "message": self.message}


@dataclass
class GangSideResult:
    scheduler: str
    workload: str
    gangs: list[GangOutcome]
    gpus_total: int = 0
    gpus_allocated: int = 0
    gpus_stranded: int = 0
    """Free GPUs on nodes where some GPU is allocated (fragments a whole-node pod cannot use)."""
    double_allocations: list[str] = field(default_factory=list)
    setup_seconds: float = 0.0

    @property
    def placed(self) -> int:
        return sum(1 for g in self.gangs if g.placed)

    @property
    def pods_bound(self) -> int:
        return sum(g.pods for g in self.gangs if g.placed)

    @property
    def gpus_idle(self) -> int:
        return self.gpus_total - self.gpus_allocated

    def seconds_quantile(self, q: float) -> float | None:
        values = sorted(g.seconds for g in self.gangs if g.placed and g.seconds is not None)
        if not values:
            return None
        if len(values) == 1:
            return values[0]
        return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, round(q * 100) - 1))]

    def to_json(self) -> Obj:
        return {"scheduler": self.scheduler, "workload": self.workload, "gangsPlaced": self.placed, "gangs": len(self.gangs),
                "podsBound": self.pods_bound, "gpusTotal": self.gpus_total, "gpusIdle": self.gpus_idle,
                "gpusStranded": self.gpus_stranded, "doubleAllocations": self.double_allocations,
                "secondsP50": self.seconds_quantile(0.5), "secondsP99": self.seconds_quantile(0.99),
                "setupSeconds": self.setup_seconds, "perGang": [g.to_json() for g in self.gangs]}


def _create(client: Client, obj: Obj) -> None:
    kind = obj["kind"]
    path = {"Pod": f"/api/v1/namespaces/{NAMESPACE}/pods", "PodGroup": PODGROUPS,
            "ResourceClaim": f"{runner.RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"}[kind]
    client.request("POST", path, obj)


def _condition(client: Client, name: str) -> Obj | None:
    try:
        group = client.request("GET", f"{PODGROUPS}/{name}")
    except HTTPError:
        return None
    for c in (group.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodGroupInitiallyScheduled":
            return dict(c)
    return None


def _bound(client: Client, gang: Gang) -> dict[str, str]:
    pods = client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={GANG_LABEL}%3D{gang.name}")["items"]
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def drive_gang(client: Client, workload: GangWorkload, gang: Gang, scheduler_name: str, racks: dict[str, str], *,
               timeout: float, poll: float = 0.05) -> GangOutcome:
    out = GangOutcome(gang.name, len(gang.pods), gang.gpus)
    start = time.monotonic()
    for obj in workload.objects(gang, scheduler_name):
        _create(client, obj)
    deadline = start + timeout
    while True:
        bound = _bound(client, gang)
        now = time.monotonic()
        if len(bound) == len(gang.pods):
            out.placed, out.seconds, out.nodes = True, now - start, dict(sorted(bound.items()))
            out.racks = sorted({racks.get(n, "") for n in bound.values()})
            return out
        cond = _condition(client, gang.name)
        if cond is not None and cond.get("status") == "False":
            out.seconds, out.message, out.nodes = now - start, str(cond.get("message") or cond.get("reason") or ""), dict(bound)
            break
        if now > deadline:
            out.timed_out, out.seconds, out.nodes = True, now - start, dict(bound)
            out.message = str((cond or {}).get("message") or "no verdict in time")
            break
        time.sleep(poll)
    # Not placed: its pods go, so that neither scheduler keeps working on it (a partly bound
    # gang keeps what it holds: that counts against the side that bound it).
    for p in gang.pods:
        if p.name not in out.nodes:
            with contextlib.suppress(HTTPError):
                client.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{p.name}?gracePeriodSeconds=0")
    return out


def static_objects(workload: GangWorkload) -> list[model.objects.TypedObject]:
    """The workload's objects that no scheduler changes (nodes, slices, classes, templates),
    decoded once for every :func:`same_state` of a run."""
    docs = [d for d in (*workload.cluster, *workload.namespaced, *workload.nodes) if d.get("kind") != "ResourceClaim"]
    return [model.decode_object(d, source=workload.name, validate="ignore") for d in docs]


def same_state(client: Client, workload: GangWorkload, gang: Gang, *, static: Sequence[model.objects.TypedObject],
               timeout: float = 30.0) -> SameState:
    """dra-solver's placement of ``gang`` on the cluster as the API server shows it now (the
    claims and bound pods the other scheduler left; ``static``: :func:`static_objects`), through
    the path of ``dra-solver schedule --group``: the group solve and the independent validator,
    nothing written."""
    # A list's items carry no kind; the claims in use live in their own namespace.
    live_claims = [{**c, "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
                   for c in client.list_all(f"{runner.RESOURCE}/resourceclaims")]
    bound = [{**p, "apiVersion": "v1", "kind": "Pod"} for p in client.list_all("/api/v1/pods") if (p.get("spec") or {}).get("nodeName")]
    docs = [c for c in live_claims if (c.get("status") or {}).get("allocation")]
    raw: list[Obj] = []
    for obj in workload.objects(gang, "default-scheduler"):
        (raw if obj["kind"] in ("Pod", "PodGroup") else docs).append(obj)
    typed = [*static, *(model.decode_object(d, source="api", validate="ignore") for d in docs)]
    podgroup = next(d for d in raw if d["kind"] == "PodGroup")
    members = [d for d in raw if d["kind"] == "Pod"]
    claims = {c.ref: c for c in typed if isinstance(c, model.objects.ResourceClaim)}
    templates = {t.ref: t for t in typed if isinstance(t, model.objects.ResourceClaimTemplate)}
    resolved = model.resolve_group(podgroup, members, claims=claims, templates=templates, generate=True)
    return judge_offline(resolved, typed, bound, min_count=len(gang.pods), timeout=timeout)


def judge_offline(resolved: model.ResolvedGroup, typed: Sequence[model.objects.TypedObject], bound: Sequence[Obj], *,
                  min_count: int, timeout: float) -> SameState:
    """:func:`same_state`'s answer on objects already read: ``dra-solver schedule --group``'s
    path (``groups.place_offline``); out of time is an answer too (not placed), not an error."""
    t0 = time.perf_counter()
    try:
        answer = groups.place_offline(resolved, typed, bound, min_count=min_count, policy="pack", gates="", timeout=timeout)
    except (DeadlineExceeded, model.SolveTimeout):
        return SameState(False, {}, time.perf_counter() - t0, "no placement found in time")
    seconds = time.perf_counter() - t0
    outcome = answer.outcome
    if not outcome.placed:
        return SameState(False, {}, seconds, outcome.explanation.summary if outcome.explanation else "")
    return SameState(True, {p.name: p.node for p in outcome.pods}, seconds)


def _collect(client: Client, result: GangSideResult, nodes: list[Obj]) -> None:
    claims = client.list_all(f"{runner.RESOURCE}/resourceclaims")
    holders: dict[str, str] = {}
    per_node: dict[str, int] = {}
    for claim in claims:
        key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or []:
            device = f"{r['driver']}/{r['pool']}/{r['device']}"
            if device in holders:
                result.double_allocations.append(f"{device}: {holders[device]} and {key}")
            holders[device] = key
            if r["driver"] == GPU_DRIVER:
                result.gpus_allocated += 1
                per_node[r["pool"]] = per_node.get(r["pool"], 0) + 1
    result.gpus_stranded = sum(GPUS_PER_NODE - used for used in per_node.values() if 0 < used < GPUS_PER_NODE)


def run_gang_side(workload: GangWorkload, scheduler: str, bins: Binaries, *, gang_timeout: float = 30.0,
                  progress: Callable[[str], None] | None = None) -> GangSideResult:
    """Fresh control plane, the workload's cluster, ``scheduler`` alone, the gangs one at a time.

    On kube-scheduler's side, before each gang is created: dra-solver's answer
    for it on the state kube-scheduler's earlier choices left (:func:`same_state`), so both
    schedulers are judged on identical inputs as well as on their own streams."""
    upstream = scheduler == "kube-scheduler"
    upstream_controllers = ("resourceclaim-controller", "podgroup-protection-controller")
    with runner.live_side(workload.base(), scheduler, bins, upstream_controllers=upstream_controllers) as side:
        result = GangSideResult(scheduler, workload.name, [], gpus_total=workload.gpus_total, setup_seconds=side.setup_seconds)
        racks = {n["metadata"]["name"]: n["metadata"]["labels"].get(RACK_LABEL, "") for n in workload.nodes}
        static = static_objects(workload) if upstream else []
        for gang in workload.gangs:
            shadow = same_state(side.client, workload, gang, static=static, timeout=gang_timeout) if upstream else None
            outcome = drive_gang(side.client, workload, gang, side.scheduler_name, racks, timeout=gang_timeout)
            outcome.same_state = shadow
            result.gangs.append(outcome)
            if progress:
                progress(f"{scheduler}: {gang.name} ({len(gang.pods)} pods, {gang.gpus} GPUs): "
                         f"{'placed in ' + ','.join(outcome.racks) if outcome.placed else 'not placed'} after {outcome.seconds or 0:.2f} s")
        _collect(side.client, result, workload.nodes)
        return result


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_comparison(results: list[GangSideResult]) -> str:
    """Both sides' figures (Markdown), then the gangs placed differently."""
    lines = ["| scheduler | gangs placed | pods bound | GPUs idle | stranded GPUs | time per gang p50 / p99 (s) | devices allocated twice |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r.scheduler} | {r.placed}/{len(r.gangs)} | {r.pods_bound} | {r.gpus_idle}/{r.gpus_total} | {r.gpus_stranded} | "
                     f"{_seconds(r.seconds_quantile(0.5))} / {_seconds(r.seconds_quantile(0.99))} | {len(r.double_allocations)} |")
    lines += same_state_lines(results)
    if len(results) == 2:
        a, b = results
        differ = [(x, y) for x, y in zip(a.gangs, b.gangs, strict=True) if x.placed != y.placed]
        if differ:
            lines += ["", f"Gangs placed by one side only ({a.scheduler} / {b.scheduler}):", ""]
            for x, y in differ:
                lost = x if not x.placed else y
                lines.append(f"- {x.name} ({x.pods} pods, {x.gpus} GPUs): {'yes' if x.placed else 'no'} / {'yes' if y.placed else 'no'}"
                             f" — {lost.message[:300]}")
    return "\n".join(lines)


def same_state_lines(results: list[GangSideResult]) -> list[str]:
    """The same-state figures (Markdown): on the cluster state kube-scheduler had when each gang
    arrived, the gangs kube-scheduler placed and those dra-solver places (must include every
    one kube-scheduler placed)."""
    judged = [(g, g.same_state) for r in results for g in r.gangs if g.same_state is not None]
    if not judged:
        return []
    theirs = sum(1 for g, _ in judged if g.placed)
    ours = sum(1 for _, s in judged if s.placed)
    only_theirs = [(g, s) for g, s in judged if g.placed and not s.placed]
    only_ours = [g for g, s in judged if s.placed and not g.placed]
    solve = sorted(s.seconds for _, s in judged)
    lines = ["", f"Same states (kube-scheduler's cluster as each gang arrived, {len(judged)} gangs): kube-scheduler placed {theirs}, "
             f"dra-solver places {ours} (group solve p50 {solve[len(solve) // 2]:.2f} s, max {solve[-1]:.2f} s); "
             f"placed by kube-scheduler only: {len(only_theirs)}; by dra-solver only: {len(only_ours)}.", ""]
    for g, s in only_theirs:
        lines.append(f"- {g.name} ({g.pods} pods, {g.gpus} GPUs): kube-scheduler only — dra-solver: {s.message[:300]}")
    for g in only_ours:
        lines.append(f"- {g.name} ({g.pods} pods, {g.gpus} GPUs): dra-solver only — kube-scheduler: {g.message[:300]}")
    return lines
