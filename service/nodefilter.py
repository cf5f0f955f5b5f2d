"""Whether a pod may go to a node, devices and node resources aside, in the scheduler's words.

API (pure functions over objects in their JSON form; nothing here does I/O):
- ``placement_mismatch(pod, node) -> str``: why kube-scheduler's NodeUnschedulable,
  NodeAffinity (``nodeSelector`` and required node affinity) and TaintToleration filters keep
  ``pod`` off ``node`` ("" when they do not), with their messages ("node(s) didn't match Pod's
  node affinity/selector", "node(s) had untolerated taint {gpu: broken}").
- ``allocated_claims_mismatch(node, selectors) -> str``: why ``node`` cannot reach the devices
  of claims the pod has allocated already (their ``status.allocation.nodeSelector``).
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


def _untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tolerations = _spec(pod).get("tolerations") or []
    for taint in _spec(node).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates_node_taint(t, taint) for t in tolerations):
            return taint  # type: ignore[no-any-return]
    return None


def _selector(raw: Any) -> mo.NodeSelector:
    return mo.NodeSelector.model_validate(raw)


def _node_model(node: Mapping[str, Any]) -> mo.Node:
    return mo.Node.model_validate({"metadata": {"name": km.name(node), "labels": dict(km.meta(node).get("labels") or {})}})


def placement_mismatch(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str:
    sp = _spec(pod)
    labels = km.meta(node).get("labels") or {}
    if _spec(node).get("unschedulable"):
        unschedulable = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        if not any(tolerates_node_taint(t, unschedulable) for t in sp.get("tolerations") or []):
            return "node(s) were unschedulable"
    for k, v in (sp.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return NOT_MATCHED
    required = (((sp.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required:
        try:
            if not node_selector_matches(_selector(required), _node_model(node)):
                return NOT_MATCHED
        except NodeSelectorError as err:
            return f"invalid node affinity: {err}"
    taint = _untolerated_taint(pod, node)
    if taint is not None:
        value = f": {taint.get('value')}" if taint.get("value") else ""
        return f"node(s) had untolerated taint {{{taint.get('key')}{value}}}"
    return ""


def allocated_claims_mismatch(node: Mapping[str, Any], selectors: Sequence[Mapping[str, Any]]) -> str:
    for raw in selectors:
        try:
            if not node_selector_matches(_selector(raw), _node_model(node)):
                return UNREACHABLE_DEVICES
        except NodeSelectorError as err:
            return f"invalid allocation node selector: {err}"
    return ""


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
    candidates: list[str] = []
    reasons: dict[str, str] = {}
    for node in sorted(nodes, key=km.name):
        why = (placement_mismatch(pod, node) if pod is not None else "") or allocated_claims_mismatch(node, claim_selectors)
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
