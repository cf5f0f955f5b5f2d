"""Whether a pod may go to a node, devices and node resources aside, in the scheduler's words.

API (pure functions over objects in their JSON form; nothing here does I/O):
- ``placement_mismatch(pod, node) -> str``: why kube-scheduler's NodeUnschedulable,
  NodeAffinity (``nodeSelector`` and required node affinity) and TaintToleration filters keep
  ``pod`` off ``node`` ("" when they do not), with their messages ("node(s) didn't match Pod's
  node affinity/selector", "node(s) had untolerated taint {gpu: broken}").
- ``allocated_claims_mismatch(node, selectors) -> str``: why ``node`` cannot reach the devices
  of claims the pod has allocated already (their ``status.allocation.nodeSelector``).
- ``PlacementCheck(pod, claim_selectors)``: both for one pod over many nodes, the pod's side
  read once (``.placement(node)``, ``.claims(node)``).
- ``tolerates_node_taint(toleration, taint)``: core/v1 ``Toleration.ToleratesTaint``.
- ``candidate_nodes(pod, nodes, *, claim_selectors=()) -> NodeFilter``: the nodes that pass
  both (``pod`` None: a claim on its own, only the second), and why each other one does not; ``nodes_summary(total, reasons)``: "0/3 nodes are
  available: 2 node(s) didn't match ..., 1 ...".

The dra-solver scheduler (``controllers.scheduling``) filters with these and adds room for CPU,
memory and pods; ``dra-solver explain pod/NAME`` and ``compare pod/NAME`` filter with these
alone (a question about devices, asked before any pod of the node is counted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_solver.model import NodeSelectorError, node_selector_matches
from dra_solver.model import objects as mo
from dra_solver.service.kubeapi import meta as km

NOT_MATCHED = "node(s) didn't match Pod's node affinity/selector"
UNREACHABLE_DEVICES = "node(s) cannot reach the devices of an allocated resourceclaim"


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    s = obj.get("spec")
    return s if isinstance(s, Mapping) else {}


def tolerates_node_taint(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 ``Toleration.ToleratesTaint``."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def _selector(raw: Any) -> mo.NodeSelector:
    return mo.NodeSelector.model_validate(raw)


def _node_model(node: Mapping[str, Any]) -> mo.Node:
    return mo.Node.model_validate({"metadata": {"name": km.name(node), "labels": dict(km.meta(node).get("labels") or {})}})


class PlacementCheck:
    """``placement_mismatch`` and ``allocated_claims_mismatch`` for one pod over many nodes:
    the pod's side (selector, affinity, tolerations, its allocated claims' node selectors) is
    read and parsed once, not once per node (at 500 nodes re-reading it was most of a
    scheduling attempt's own time). ``pod`` None: a claim on its own, only the claims' side."""

    def __init__(self, pod: Mapping[str, Any] | None, claim_selectors: Sequence[Mapping[str, Any]] = ()) -> None:
        sp = _spec(pod) if pod is not None else {}
        self._pod = pod is not None
        self._tolerations: list[Mapping[str, Any]] = list(sp.get("tolerations") or [])
        self._node_selector = list((sp.get("nodeSelector") or {}).items())
        self._required_raw = ((sp.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        self._required: mo.NodeSelector | None = None
        self._claims_raw = list(claim_selectors)
        self._claims: list[mo.NodeSelector] | None = None
        self._tolerates_unschedulable = any(tolerates_node_taint(t, _UNSCHEDULABLE_TAINT) for t in self._tolerations)

    def placement(self, node: Mapping[str, Any]) -> str:
        """Why the NodeUnschedulable, NodeAffinity and TaintToleration filters keep the pod
        off ``node`` ("" when they do not)."""
        if not self._pod:
            return ""
        if _spec(node).get("unschedulable") and not self._tolerates_unschedulable:
            return "node(s) were unschedulable"
        if self._node_selector:
            labels = km.meta(node).get("labels") or {}
            for k, v in self._node_selector:
                if labels.get(k) != v:
                    return NOT_MATCHED
        if self._required_raw:
            try:
                if self._required is None:
                    self._required = _selector(self._required_raw)
                if not node_selector_matches(self._required, _node_model(node)):
                    return NOT_MATCHED
            except NodeSelectorError as err:
                return f"invalid node affinity: {err}"
        taint = self._untolerated(_spec(node).get("taints") or ())
        if taint is not None:
            value = f": {taint.get('value')}" if taint.get("value") else ""
            return f"node(s) had untolerated taint {{{taint.get('key')}{value}}}"
        return ""

    def claims(self, node: Mapping[str, Any]) -> str:
        """Why ``node`` cannot reach the devices of the pod's allocated claims ("" when it can)."""
        if not self._claims_raw:
            return ""
        try:
            if self._claims is None:
                self._claims = [_selector(raw) for raw in self._claims_raw]
            model = _node_model(node)
            for selector in self._claims:
                if not node_selector_matches(selector, model):
                    return UNREACHABLE_DEVICES
        except NodeSelectorError as err:
            return f"invalid allocation node selector: {err}"
        return ""

    def _untolerated(self, taints: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        for taint in taints:
            if taint.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(tolerates_node_taint(t, taint) for t in self._tolerations):
                return taint
        return None


def placement_mismatch(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str:
    return PlacementCheck(pod).placement(node)


def allocated_claims_mismatch(node: Mapping[str, Any], selectors: Sequence[Mapping[str, Any]]) -> str:
    return PlacementCheck(None, selectors).claims(node)


@dataclass(frozen=True, slots=True)
class NodeFilter:
    candidates: tuple[str, ...]
    """Nodes that pass every check, by name."""
    reasons: Mapping[str, str] = field(default_factory=dict)
    """Node -> why not, for the others."""

    def summary(self, total: int | None = None) -> str:
        return nodes_summary(total if total is not None else len(self.candidates) + len(self.reasons), self.reasons.values())


def candidate_nodes(
    pod: Mapping[str, Any] | None,
    nodes: Iterable[Mapping[str, Any]],
    *,
    claim_selectors: Sequence[Mapping[str, Any]] = (),
) -> NodeFilter:
    check = PlacementCheck(pod, claim_selectors)
    candidates: list[str] = []
    reasons: dict[str, str] = {}
    for node in sorted(nodes, key=km.name):
        why = check.placement(node) or check.claims(node)
        if why:
            reasons[km.name(node)] = why
        else:
            candidates.append(km.name(node))
    return NodeFilter(tuple(candidates), reasons)


def nodes_summary(total: int, reasons: Iterable[str]) -> str:
    """"0/N nodes are available: <count> <reason>, ...." with the most frequent reason first."""
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r] = counts.get(r, 0) + 1
    parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"0/{total} nodes are available" + (f": {parts}." if parts else ".")
