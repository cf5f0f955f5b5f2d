"""Whether a pod may go to a node, devices and node resources aside, in the scheduler's words.

API (pure functions over objects in their JSON form; nothing here does I/O):
- ``placement_mismatch(pod, node) -> str``: why kube-scheduler's NodeUnschedulable,
  NodeAffinity (``nodeSelector`` and required node affinity) and TaintToleration filters keep
  ``pod`` off ``node`` ("" when they do not), with their messages ("node(s) didn't match Pod's
  node affinity/selector", "node(s) had untolerated taint {gpu: broken}").
- ``allocated_claims_mismatch(node, selectors) -> str``: why ``node`` cannot reach the devices
  of claims the pod has allocated already (their ``status.allocation.nodeSelector``).
- ``PlacementCheck(pod, claim_selectors)``: both for one pod over many nodes, the pod's side
  read once (``.placement(node)``, ``.claims(node)``); from the core (``model.podfit``), which
  the offline gang placement filters with too.
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

from dra_solver.model import NOT_MATCHED, UNREACHABLE_DEVICES, PlacementCheck, tolerates_node_taint
from dra_solver.service.kubeapi import meta as km

__all__ = [
    "NOT_MATCHED",
    "UNREACHABLE_DEVICES",
    "NodeFilter",
    "PlacementCheck",
    "allocated_claims_mismatch",
    "candidate_nodes",
    "nodes_summary",
    "placement_mismatch",
    "tolerates_node_taint",
]


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
