"""What each side's cluster held when it placed a pod, and whether another placement fitted.

The report says why a pod was placed differently by checking, not by assuming: "kube-scheduler
put it on node-a, dra-solver on node-b" becomes "node-a still had room on dra-solver's side
when it placed the pod" (a choice) or "node-a was full on dra-solver's side by then" (capacity
used differently earlier). Two pieces answer that:

- :class:`Timeline`: the devices one side's claims held on a node at a moment, from the claim
  watch (each pod claim's allocation and release, :class:`runner.Hold`) plus the claims
  allocated before the run;
- :class:`Probe`: whether a pod's claim (optionally one FirstAvailable subrequest, or exactly
  given devices) can be allocated on a node with given devices in use. It runs our port of
  upstream's allocator (``backtracking``: an exhaustive search, so "no" means no room) on that
  node's slices, counters included.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from typing import Any

from dra_solver.model import (
    AllocatedState,
    AllocationRequest,
    CelEnvironment,
    DeviceID,
    DeviceParseCache,
    DraSolverError,
    Inventory,
    allocate,
    decode_all,
    decode_object,
)
from dra_solver.model import objects as o
from dra_solver.service.schedcompare.runner import SideResult
from dra_solver.service.schedcompare.workloads import INIT_NAMESPACE, NAMESPACE, Workload

PROBE_SECONDS = 5.0


def device_id(key: str) -> DeviceID:
    """``driver/pool/device`` (the runner's form) as a DeviceID."""
    driver, pool, device = key.split("/", 2)
    return DeviceID(driver, pool, device)


class Timeline:
    """Devices held per node over one side's run."""

    def __init__(self, side: SideResult, workload: Workload, node_of_pool: dict[tuple[str, str], str]) -> None:
        self.node_of_pool = node_of_pool
        self.base: dict[str, set[DeviceID]] = {}
        for obj in workload.namespaced:
            if obj["kind"] == "ResourceClaim" and obj["metadata"]["namespace"] == INIT_NAMESPACE:
                for r in obj["status"]["allocation"]["devices"]["results"]:
                    dev = DeviceID(r["driver"], r["pool"], r["device"])
                    self.base.setdefault(self.node(dev), set()).add(dev)
        self.spans: dict[str, list[tuple[float, float, str, frozenset[DeviceID]]]] = {}
        for pod in side.pods.values():
            holds = [(h.start, math.inf if h.end is None else h.end, h.devices) for h in pod.holds]
            if not holds and pod.bound_at is not None and pod.devices:  # the claim watch missed it
                holds = [(pod.bound_at, math.inf, pod.devices)]
            for start, end, keys in holds:
                devices = frozenset(device_id(k) for k in keys)
                for node in sorted({self.node(d) for d in devices}):
                    self.spans.setdefault(node, []).append((start, end, pod.name, devices))

    def node(self, dev: DeviceID) -> str:
        return self.node_of_pool.get((dev.driver, dev.pool), dev.pool)

    def held(self, node: str, at: float | None, *, but: str = "") -> frozenset[DeviceID]:
        """Devices in use on ``node`` just before ``at`` (None: when the run ended), the
        claims of pod ``but`` left out."""
        out = set(self.base.get(node, ()))
        for start, end, pod, devices in self.spans.get(node, ()):
            if pod == but:
                continue
            if (end == math.inf) if at is None else (start < at < end):
                out |= devices
        return frozenset(out)


class Probe:
    """Would a pod's claim fit on a node with these devices in use?"""

    def __init__(self, workload: Workload) -> None:
        # Decoded per node on first use: a report probes few of a large cluster's nodes.
        self._raw_nodes = {n["metadata"]["name"]: n for n in workload.nodes}
        self._raw_slices: dict[str, list[dict[str, Any]]] = {}
        self.node_of_pool: dict[tuple[str, str], str] = {}
        for obj in workload.cluster:
            node = obj["spec"].get("nodeName") if obj["kind"] == "ResourceSlice" else None
            if node:
                self._raw_slices.setdefault(node, []).append(obj)
                self.node_of_pool[(obj["spec"]["driver"], obj["spec"]["pool"]["name"])] = node
        self.classes = tuple(x for x in decode_all([o_ for o_ in workload.cluster if o_["kind"] == "DeviceClass"],
                                                   source=workload.name) if isinstance(x, o.DeviceClass))
        self._decoded: dict[str, tuple[o.Node, list[o.ResourceSlice]]] = {}
        self.templates = {t["metadata"]["name"]: t["spec"]["spec"] for t in workload.namespaced
                          if t["kind"] == "ResourceClaimTemplate"}
        self.template_of = {p.name: p.template for p in workload.pods}
        self.cel = CelEnvironment()
        self.parsed = DeviceParseCache()
        self._cache: dict[tuple[Any, ...], bool] = {}
        self._claims: dict[tuple[str, tuple[str, ...]], o.ResourceClaim] = {}
        self.probes = 0

    @property
    def node_names(self) -> list[str]:
        return sorted(self._raw_nodes)

    def node(self, name: str) -> tuple[o.Node, list[o.ResourceSlice]] | None:
        """The Node and its ResourceSlices, decoded (None: no such node)."""
        if name not in self._raw_nodes:
            return None
        if name not in self._decoded:
            objects = decode_all([self._raw_nodes[name], *self._raw_slices.get(name, [])], source=name)
            node = next(x for x in objects if isinstance(x, o.Node))
            self._decoded[name] = (node, [x for x in objects if isinstance(x, o.ResourceSlice)])
        return self._decoded[name]

    def subrequest_rank(self, pod: str, subrequests: Iterable[str]) -> int:
        """Sum of the FirstAvailable indices of ``request/subrequest`` names (lower: preferred)."""
        requests = {r["name"]: r for r in self.templates[self.template_of[pod]]["devices"]["requests"]}
        rank = 0
        for name in set(subrequests):
            request, _, sub = name.partition("/")
            subs = [s["name"] for s in requests.get(request, {}).get("firstAvailable") or []]
            rank += subs.index(sub) if sub in subs else 0
        return rank

    def claim(self, pod: str, subrequests: tuple[str, ...] = ()) -> o.ResourceClaim:
        """The pod's claim from its template; ``request/sub`` entries keep only that
        FirstAvailable subrequest."""
        template = self.template_of[pod]
        key = (template, tuple(sorted(set(subrequests))))
        if key not in self._claims:
            self._claims[key] = self._from_template(template, key[1])
        return self._claims[key]

    def _from_template(self, template: str, subrequests: tuple[str, ...]) -> o.ResourceClaim:
        spec = copy.deepcopy(self.templates[template])
        chosen = {}
        for name in subrequests:
            request, _, sub = name.partition("/")
            if sub:
                chosen[request] = sub
        for request in spec["devices"]["requests"]:
            if request["name"] in chosen and request.get("firstAvailable"):
                request["firstAvailable"] = [s for s in request["firstAvailable"] if s["name"] == chosen[request["name"]]]
        claim = decode_object({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                               "metadata": {"name": f"{template}-probe", "namespace": NAMESPACE,
                                            "uid": f"{template}-probe"},
                               "spec": spec}, source="probe")
        assert isinstance(claim, o.ResourceClaim)
        return claim

    def fits(self, pod: str, node: str, held: frozenset[DeviceID], *, subrequests: tuple[str, ...] = (),
             only: tuple[str, ...] = ()) -> bool:
        """Whether ``pod``'s claim can be allocated on ``node`` while ``held`` are in use;
        ``subrequests`` (``request/sub``) pins FirstAvailable choices, ``only`` (device keys)
        restricts it to exactly those devices."""
        key = (self.template_of[pod], node, held, tuple(sorted(set(subrequests))), only)
        if key in self._cache:
            return self._cache[key]
        decoded = self.node(node)
        if decoded is None:
            return False
        node_obj, slices = decoded
        if only:
            wanted = {device_id(k) for k in only}
            slices = [s.model_copy(update={"spec": s.spec.model_copy(update={"devices": [
                d for d in s.spec.devices if DeviceID(s.spec.driver, s.spec.pool.name, d.name) in wanted]})})
                if s.spec.devices else s for s in slices]
        request = AllocationRequest(
            claims=(self.claim(pod, key[3]),), node=node_obj,
            inventory=Inventory(classes=self.classes, slices=tuple(slices), nodes=(node_obj,),
                                extra_allocated=AllocatedState(devices=held)),
            allocator="backtracking", time_limit=PROBE_SECONDS, device_cache=self.parsed,
        )
        self.probes += 1
        try:
            answer = allocate(request, cel=self.cel, validate=False).allocated
        except DraSolverError:
            answer = False  # a timeout on a node this small: treat as no room
        self._cache[key] = answer
        return answer

    def room_anywhere(self, pod: str, timeline: Timeline, at: float | None, *,
                      subrequests: tuple[str, ...] = ()) -> str:
        """The first node (name order) where the pod's claim fitted on this side at ``at``."""
        for node in self.node_names:
            if self.fits(pod, node, timeline.held(node, at, but=pod), subrequests=subrequests):
                return node
        return ""

