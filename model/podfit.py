"""Whether a pod may go to a node, devices aside: the scheduler's non-DRA filters, as data.

API (pods and nodes are the API's JSON form; a ``Node`` model keeps ``spec``/``status`` as JSON):
- ``pod_requests(pod) -> PodRequests``: CPU (millicores) and memory (bytes) the pod takes from
  a node: per resource the larger of its containers' sum and any init container, plus overhead
  (NodeResourcesFit's arithmetic), rounded up.
- ``node_room(node, bound) -> NodeRoom``: what ``node``'s allocatable leaves after the pods
  bound to it (finished pods take nothing); None where the node does not say.
- ``node_filter(pod, node) -> str``: why the pod cannot go to the node ("" when it can), in
  the scheduler's words: ``spec.unschedulable``, nodeSelector, required node affinity, taints.
- ``candidate_nodes(pod, nodes) -> (names, reasons)``: the nodes that pass ``node_filter``.
- ``PlacementCheck(pod, claim_selectors)``: ``node_filter`` for one pod over many nodes, the
  pod's side read once (``.placement(node)``), and whether a node reaches the devices of the
  pod's allocated claims (``.claims(node)``); ``tolerates_node_taint(toleration, taint)``.

Why in the core: offline gang placement (``dra-solver schedule --group`` on files) and the
gang scheduler filter nodes the same way, and the group model needs the rooms as numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import ceil
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.group_request import NodeRoom
from dra_solver.model.pools import NodeSelectorError, node_selector_matches
from dra_solver.model.quantity import QuantityError, parse_quantity

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PodRequests:
    cpu_millis: int = 0
    memory_bytes: int = 0


def _amount(text: Any) -> Fraction:
    try:
        return parse_quantity(str(text)).to_fraction()
    except (QuantityError, ValueError):
        return Fraction(0)


def _spec(obj: Obj) -> Obj:
    value = obj.get("spec")
    return value if isinstance(value, Mapping) else {}


def _status(obj: Obj) -> Obj:
    value = obj.get("status")
    return value if isinstance(value, Mapping) else {}


def _container_totals(containers: Iterable[Obj]) -> list[dict[str, Fraction]]:
    out = []
    for c in containers:
        req = (c.get("resources") or {}).get("requests") or {}
        out.append({"cpu": _amount(req.get("cpu", "0")), "memory": _amount(req.get("memory", "0"))})
    return out


def pod_requests(pod: Obj) -> PodRequests:
    sp = _spec(pod)
    total = {"cpu": Fraction(0), "memory": Fraction(0)}
    for amounts in _container_totals(sp.get("containers") or []):
        for name, value in amounts.items():
            total[name] += value
    for amounts in _container_totals(sp.get("initContainers") or []):
        for name, value in amounts.items():
            total[name] = max(total[name], value)
    overhead = sp.get("overhead") or {}
    for name in ("cpu", "memory"):
        if name in overhead:
            total[name] += _amount(overhead[name])
    return PodRequests(cpu_millis=ceil(total["cpu"] * 1000), memory_bytes=ceil(total["memory"]))


def _node_json(node: o.Node | Obj) -> tuple[str, Obj, Obj, Obj]:
    """(name, labels, spec, status) of a typed or JSON node."""
    if isinstance(node, o.Node):
        spec = node.spec if isinstance(node.spec, Mapping) else {}
        status = node.status if isinstance(node.status, Mapping) else {}
        return node.name, node.metadata.labels or {}, spec, status
    meta = node.get("metadata") or {}
    return str(meta.get("name") or ""), meta.get("labels") or {}, _spec(node), _status(node)


def node_room(node: o.Node | Obj, bound: Iterable[Obj] = ()) -> NodeRoom:
    _, _, _, status = _node_json(node)
    alloc = status.get("allocatable") or status.get("capacity") or {}
    cpu = ceil(_amount(alloc["cpu"]) * 1000) if "cpu" in alloc else None
    memory = ceil(_amount(alloc["memory"])) if "memory" in alloc else None
    pods = int(_amount(alloc["pods"])) if "pods" in alloc else None
    for pod in bound:
        phase = _status(pod).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        need = pod_requests(pod)
        if cpu is not None:
            cpu -= need.cpu_millis
        if memory is not None:
            memory -= need.memory_bytes
        if pods is not None:
            pods -= 1
    return NodeRoom(cpu, memory, pods)


def fits_room(need: PodRequests, room: NodeRoom) -> str:
    """Why one more pod with ``need`` does not fit ``room`` ("" when it does)."""
    if room.pods is not None and room.pods < 1:
        return "Too many pods"
    if room.cpu_millis is not None and need.cpu_millis and need.cpu_millis > room.cpu_millis:
        return "Insufficient cpu"
    if room.memory_bytes is not None and need.memory_bytes and need.memory_bytes > room.memory_bytes:
        return "Insufficient memory"
    return ""


NOT_MATCHED = "node(s) didn't match Pod's node affinity/selector"
UNREACHABLE_DEVICES = "node(s) cannot reach the devices of an allocated resourceclaim"
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def tolerates_node_taint(toleration: Obj, taint: Obj) -> bool:
    """core/v1 ``Toleration.ToleratesTaint``."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


class PlacementCheck:
    """``node_filter`` for one pod over many nodes, plus whether a node reaches the devices of
    the pod's allocated claims (their ``status.allocation.nodeSelector``): the pod's side is
    read and parsed once, not once per node (at 500 nodes re-reading it was most of a
    scheduling attempt's own time). ``pod`` None: a claim on its own, only the claims' side."""

    def __init__(self, pod: Obj | None, claim_selectors: Sequence[Obj] = ()) -> None:
        sp = _spec(pod) if pod is not None else {}
        self._pod = pod is not None
        self._tolerations: list[Obj] = list(sp.get("tolerations") or [])
        self._node_selector = list((sp.get("nodeSelector") or {}).items())
        self._required_raw = ((sp.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        self._required: o.NodeSelector | None = None
        self._claims_raw = list(claim_selectors)
        self._claims: list[o.NodeSelector] | None = None
        self._tolerates_unschedulable = any(tolerates_node_taint(t, _UNSCHEDULABLE_TAINT) for t in self._tolerations)

    def placement(self, node: o.Node | Obj) -> str:
        """Why kube-scheduler's NodeUnschedulable, NodeAffinity and TaintToleration filters
        keep the pod off ``node``, in their words ("" when they do not)."""
        if not self._pod:
            return ""
        name, labels, spec, _ = _node_json(node)
        if spec.get("unschedulable") and not self._tolerates_unschedulable:
            return "node(s) were unschedulable"
        for k, v in self._node_selector:
            if labels.get(k) != v:
                return NOT_MATCHED
        if self._required_raw:
            try:
                if self._required is None:
                    self._required = o.NodeSelector.model_validate(self._required_raw)
                if not node_selector_matches(self._required, _as_node(name, labels)):
                    return NOT_MATCHED
            except (NodeSelectorError, ValueError) as err:
                return f"invalid node affinity: {err}"
        for taint in spec.get("taints") or []:
            if taint.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(tolerates_node_taint(t, taint) for t in self._tolerations):
                value = f": {taint.get('value')}" if taint.get("value") else ""
                return f"node(s) had untolerated taint {{{taint.get('key')}{value}}}"
        return ""

    @property
    def has_claim_selectors(self) -> bool:
        """Whether :meth:`claims` can refuse a node."""
        return bool(self._claims_raw)

    def claims(self, node: o.Node | Obj) -> str:
        """Why ``node`` cannot reach the devices of the pod's allocated claims ("" when it can)."""
        if not self._claims_raw:
            return ""
        name, labels, _, _ = _node_json(node)
        try:
            if self._claims is None:
                self._claims = [o.NodeSelector.model_validate(raw) for raw in self._claims_raw]
            as_node = _as_node(name, labels)
            for selector in self._claims:
                if not node_selector_matches(selector, as_node):
                    return UNREACHABLE_DEVICES
        except (NodeSelectorError, ValueError) as err:
            return f"invalid allocation node selector: {err}"
        return ""


def _as_node(name: str, labels: Obj) -> o.Node:
    return o.Node(metadata=o.ObjectMeta(name=name, labels=dict(labels)))


def node_filter(pod: Obj, node: o.Node | Obj) -> str:
    return PlacementCheck(pod).placement(node)


def candidate_nodes(pod: Obj, nodes: Iterable[o.Node | Obj]) -> tuple[tuple[str, ...], dict[str, str]]:
    check = PlacementCheck(pod)
    names: list[str] = []
    reasons: dict[str, str] = {}
    for node in nodes:
        why = check.placement(node)
        name = _node_json(node)[0]
        if why:
            reasons[name] = why
        else:
            names.append(name)
    return tuple(sorted(names)), reasons
