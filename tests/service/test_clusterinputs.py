"""The pure parts of reading a pod's inputs from a live cluster: which claims it asks for
(``service.clusterinputs.pod_claims``), which nodes are candidates (``service.nodefilter``),
and what names a live object on the command line (``parse_target``)."""

from __future__ import annotations

import pytest

from dra_solver.model import InvalidInput
from dra_solver.service.clusterinputs import Target, parse_target, pod_claims
from dra_solver.service.nodefilter import candidate_nodes
from tests import builders as b

NS = b.NS


@pytest.mark.parametrize(("text", "target"), [
    ("pod/train-0", Target("pod", "train-0")),
    ("pods/train-0", Target("pod", "train-0")),
    ("po/train-0", Target("pod", "train-0")),
    ("resourceclaim/c", Target("resourceclaim", "c")),
    ("resourceclaims/c", Target("resourceclaim", "c")),
    ("examples/cluster.yaml", None),
    ("-", None),
    ("cluster.yaml", None),
])
def test_targets_are_kubectls_spellings(text: str, target: Target | None) -> None:
    assert parse_target(text) == target


def test_a_target_with_a_bad_name_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match=r'Invalid value: "pod/Train_0": pod name: '):
        parse_target("pod/Train_0")
    with pytest.raises(InvalidInput, match=r'Invalid value: "pod/x{60}\.\.\." \(304 characters\): pod name: must be no more'):
        parse_target("pod/" + "x" * 300)  # a caller's value is quoted by its first characters and its length


def test_pod_claims_resolve_as_the_scheduler_does() -> None:
    pod = b.pod("p", templates={"made": "tpl", "pending": "tpl"}, claims={"shared": "shared"}, statuses={"made": "p-made-x1"})
    claims = b.by_key(
        b.ONE_GPU.named("p-made-x1").obj(),
        b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").obj(),
    )
    got = pod_claims(pod, claims, b.by_key(b.template("tpl", count=3)))
    assert [c.ref for c in got.to_allocate] == [f"{NS}/p-made-x1", f"{NS}/p-pending"]
    made = got.to_allocate[1]
    assert made.spec.devices.requests[0].exactly.count == 3
    assert made.metadata.annotations == {b.POD_CLAIM_NAME: "pending"}
    assert [c.ref for c in got.allocated] == [f"{NS}/shared"]
    assert got.notes == (f"claim {NS}/p-pending: not created yet; as ResourceClaimTemplate tpl will make it",
                         f"claim {NS}/shared: allocated already")
    assert got.wait == ""


@pytest.mark.parametrize(("claims", "templates", "wait"), [
    ({}, {"tpl": 1}, 'resourceclaim "c" not found'),
    ({"deleting": True}, {"tpl": 1}, 'resourceclaim "c" is being deleted'),
    ({"ok": True}, {}, 'resourceclaimtemplate "tpl" not found'),
])
def test_a_pod_that_must_wait_says_why(claims: dict[str, bool], templates: dict[str, int], wait: str) -> None:
    pod = b.pod("p", claims={"one": "c"}, templates={"two": "tpl"})
    claim = b.ONE_GPU.named("c")
    if "deleting" in claims:
        claim = claim.finalizer().deleting()
    found = b.by_key(claim.obj()) if claims else {}
    got = pod_claims(pod, found, b.by_key(b.template("tpl")) if templates else {})
    assert got.wait == wait and got.to_allocate == ()


def test_candidate_nodes_filter_as_the_scheduler_does_before_devices() -> None:
    pod = b.pod("p", node_selector={"gpu": "yes"}, tolerations=[b.toleration("ok", effect="NoSchedule")])
    nodes = [
        b.node("a", labels={"gpu": "yes"}),
        b.node("b", labels={"gpu": "no"}),
        b.node("c", labels={"gpu": "yes"}, taints=[{"key": "broken", "effect": "NoSchedule"}]),
        b.node("d", labels={"gpu": "yes"}, taints=[{"key": "ok", "effect": "NoSchedule"}]),
        b.node("e", labels={"gpu": "yes"}, unschedulable=True),
        b.node("f", labels={"gpu": "yes"}),
    ]
    reach = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a", "b", "c", "d", "f"]}]}]}
    got = candidate_nodes(pod, nodes, claim_selectors=[reach])
    assert got.candidates == ("a", "d", "f")
    assert got.reasons == {
        "b": "node(s) didn't match Pod's node affinity/selector",
        "c": "node(s) had untolerated taint {broken}",
        "e": "node(s) were unschedulable",
    }
    assert got.summary() == ("0/6 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                             "1 node(s) had untolerated taint {broken}, 1 node(s) were unschedulable.")
    # A claim on its own (no pod): only where its allocated devices are reachable.
    alone = candidate_nodes(None, nodes, claim_selectors=[reach])
    assert alone.candidates == ("a", "b", "c", "d", "f")
    assert alone.reasons == {"e": "node(s) cannot reach the devices of an allocated resourceclaim"}
