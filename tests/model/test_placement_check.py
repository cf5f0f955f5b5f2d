"""One PlacementCheck reused across nodes answers for each node as a fresh one would: the
pod's side is parsed once, the node's side every time."""

from __future__ import annotations

from typing import Any

from dra_solver.model import NOT_MATCHED, UNREACHABLE_DEVICES, PlacementCheck


def node(name: str, *, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def in_rack(*racks: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": list(racks)}]}]}


POD = {
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {
        "nodeSelector": {"zone": "a"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": in_rack("r1", "r2")}},
        "tolerations": [{"key": "gpu", "operator": "Equal", "value": "busy", "effect": "NoSchedule"}],
    },
}

NODES = [
    (node("fits", labels={"zone": "a", "rack": "r1"}, taints=[{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]), ""),
    (node("other-zone", labels={"zone": "b", "rack": "r1"}), NOT_MATCHED),
    (node("other-rack", labels={"zone": "a", "rack": "r3"}), NOT_MATCHED),
    (node("tainted", labels={"zone": "a", "rack": "r2"}, taints=[{"key": "gpu", "value": "broken", "effect": "NoExecute"}]),
     "node(s) had untolerated taint {gpu: broken}"),
    (node("cordoned", labels={"zone": "a", "rack": "r2"}, unschedulable=True), "node(s) were unschedulable"),
    (node("fits-too", labels={"zone": "a", "rack": "r2"}), ""),
]


def test_one_check_across_nodes_in_both_orders() -> None:
    for nodes in (NODES, list(reversed(NODES))):
        check = PlacementCheck(POD)
        assert [check.placement(n) for n, _ in nodes] == [want for _, want in nodes]
        assert [PlacementCheck(POD).placement(n) for n, _ in nodes] == [want for _, want in nodes]


def test_claims_side_and_a_claim_on_its_own() -> None:
    check = PlacementCheck(None, [in_rack("r2")])
    assert check.placement(node("anything")) == ""  # no pod: only the claims' side
    assert check.claims(node("a", labels={"rack": "r2"})) == ""
    assert check.claims(node("b", labels={"rack": "r1"})) == UNREACHABLE_DEVICES
    assert check.claims(node("c", labels={"rack": "r2"})) == ""


def test_an_invalid_selector_is_named_not_raised() -> None:
    bad = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "Sideways", "values": ["r1"]}]}]}
    pod = {"metadata": {"name": "p"}, "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": bad}}}}
    assert PlacementCheck(pod).placement(node("n", labels={"rack": "r1"})).startswith("invalid node affinity: ")
    assert PlacementCheck(None, [bad]).claims(node("n", labels={"rack": "r1"})).startswith("invalid allocation node selector: ")
