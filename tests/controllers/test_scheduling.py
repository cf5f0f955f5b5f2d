"""The scheduler's decisions: claims gathered, nodes filtered, claim writes, rollbacks."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling as s
from tests import builders as b

POD = b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-1"})
OWNED = b.ONE_GPU.named("web-gpu-1").uid("claim-uid").rv("5").owned_by(b.pod("web", uid="pod-uid")).pod_claim("gpu").obj()


@pytest.mark.parametrize(
    ("pod", "claims", "wait", "keys"),
    [
        (POD, [OWNED], "", ["default/web-gpu-1"]),
        (b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}), [], "to be created", []),
        (POD, [], 'resourceclaim "web-gpu-1" not found', []),
        (POD, [b.ONE_GPU.named("web-gpu-1").owned_by(b.pod("web", uid="pod-uid")).deleting().obj()], "is being deleted", []),
        (POD, [b.ONE_GPU.named("web-gpu-1").owned_by(b.pod("web", uid="other")).obj()], "not created for Pod", []),
        (b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": None}), [], "", []),
        (b.pod("web", uid="pod-uid", claims={"a": "shared", "b": "shared"}), [b.ONE_GPU.named("shared").obj()], "", ["default/shared"]),
        (b.pod("web", uid="pod-uid"), [], "", []),
    ],
    ids=["ready", "not created", "missing", "deleting", "foreign", "not needed", "same claim twice", "no claims"],
)
def test_gather_claims(pod: dict[str, Any], claims: list[dict[str, Any]], wait: str, keys: list[str]) -> None:
    got = s.gather_claims(pod, b.by_key(*claims))
    assert (wait in got.wait) if wait else got.wait == ""
    assert [c.key for c in got.claims] == keys
    assert got.being_created == (wait == "to be created"), "only the claim controller's pending create waits quietly"


def test_gather_splits_allocated_and_reserved() -> None:
    pod = b.pod("web", uid="pod-uid", claims={"a": "done", "b": "fresh"})
    done = b.ONE_GPU.named("done").allocated("gpu-0", node="node-a").reserved_for(pod).obj()
    got = s.gather_claims(pod, b.by_key(done, b.ONE_GPU.named("fresh").obj()))
    assert [c.key for c in got.allocated] == ["default/done"]
    assert [c.key for c in got.to_allocate] == ["default/fresh"]
    assert got.allocated[0].reserved


ALLOC_A = b.ONE_GPU.named("x").allocated("gpu-0", node="node-a").obj()["status"]["allocation"]


@pytest.mark.parametrize(
    ("pod", "node", "used", "selectors", "why"),
    [
        (b.pod("p"), b.node("n"), s.Resources(), [], ""),
        (b.pod("p"), b.node("n", unschedulable=True), s.Resources(), [], "were unschedulable"),
        (b.pod("p", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
         b.node("n", unschedulable=True), s.Resources(), [], ""),
        (b.pod("p", node_selector={"zone": "a"}), b.node("n", labels={"zone": "b"}), s.Resources(), [], "node affinity/selector"),
        (b.pod("p", node_selector={"zone": "a"}), b.node("n", labels={"zone": "a"}), s.Resources(), [], ""),
        (b.pod("p"), b.node("n", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}]), s.Resources(), [], "untolerated taint {gpu: broken}"),
        (b.pod("p"), b.node("n", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), s.Resources(), [], ""),
        (b.pod("p", tolerations=[{"key": "gpu", "operator": "Equal", "value": "broken", "effect": "NoSchedule"}]),
         b.node("n", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}]), s.Resources(), [], ""),
        (b.pod("p", tolerations=[{"operator": "Exists"}]), b.node("n", taints=[{"key": "any", "effect": "NoExecute"}]), s.Resources(), [], ""),
        (b.pod("p", cpu="2"), b.node("n", cpu="4"), s.Resources(Fraction(3), Fraction(0), 1), [], "Insufficient cpu"),
        (b.pod("p", cpu="2"), b.node("n", cpu="4"), s.Resources(Fraction(2), Fraction(0), 1), [], ""),
        (b.pod("p", memory="2Gi"), b.node("n", memory="3Gi"), s.Resources(Fraction(0), Fraction(2 * 2**30), 1), [], "Insufficient memory"),
        (b.pod("p"), b.node("n", pods="2"), s.Resources(Fraction(0), Fraction(0), 2), [], "Too many pods"),
        (b.pod("p"), b.node("node-a"), s.Resources(), [ALLOC_A["nodeSelector"]], ""),
        (b.pod("p"), b.node("node-b"), s.Resources(), [ALLOC_A["nodeSelector"]], "cannot reach the devices"),
    ],
    ids=[
        "fits", "unschedulable node", "tolerated unschedulable", "selector mismatch", "selector match", "taint", "prefer-no-schedule",
        "tolerated taint", "tolerate everything", "cpu full", "cpu exactly fits", "memory full", "pods full", "claim on node",
        "claim elsewhere",
    ],
)
def test_node_verdict(pod: dict[str, Any], node: dict[str, Any], used: s.Resources, selectors: list[Any], why: str) -> None:
    got = s.node_verdict(pod, node, used=used, claim_selectors=selectors)
    assert (why in got) if why else got == ""


def test_required_node_affinity() -> None:
    pod = b.pod("p")
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]}]}}}
    assert s.node_verdict(pod, b.node("n", labels={"gpu": "yes"})) == ""
    assert "affinity" in s.node_verdict(pod, b.node("n", labels={"gpu": "no"}))


def test_pod_requests_counts_init_containers_and_overhead() -> None:
    pod = b.pod("p", cpu="500m", memory="1Gi")
    pod["spec"]["containers"].append({"name": "side", "resources": {"requests": {"cpu": "250m"}}})
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]
    pod["spec"]["overhead"] = {"cpu": "100m"}
    r = s.pod_requests(pod)
    assert r.cpu == Fraction(11, 10)
    assert r.memory == Fraction(2**30)
    assert r.pods == 1


def test_filter_nodes_and_summary() -> None:
    nodes = [b.node("c", cpu="1"), b.node("a"), b.node("b", taints=[{"key": "k", "effect": "NoSchedule"}])]
    pod = b.pod("p", cpu="2")
    got = s.filter_nodes(pod, nodes, used={})
    assert got.candidates == ("a",)
    assert got.reasons == {"b": "node(s) had untolerated taint {k}", "c": "Insufficient cpu"}
    assert got.summary() == "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k}."
    assert s.nodes_summary(3, ["x", "y", "x"]) == "0/3 nodes are available: 2 x, 1 y."
    assert s.nodes_summary(0, []) == "0/0 nodes are available."


def test_placement_verdicts_kept_across_pods_follow_node_changes_and_pod_placement() -> None:
    kept = s.PlacementVerdicts()
    tainted = {"key": "k", "effect": "NoSchedule"}
    nodes = [b.node("a"), b.node("b", taints=[tainted]), b.node("c", labels={"zone": "z1"})]
    pods = [b.pod(f"p{i}") for i in range(3)]
    tolerant = b.pod("t")
    tolerant["spec"]["tolerations"] = [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
    picky = b.pod("z")
    picky["spec"]["nodeSelector"] = {"zone": "z1"}

    def both(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> tuple[str, ...]:
        fresh = s.filter_nodes(pod, nodes, used={})
        got = s.filter_nodes(pod, nodes, used={}, placements=kept)
        assert got == fresh
        return got.candidates

    assert [both(p, nodes) for p in pods] == [("a", "c")] * 3
    assert both(tolerant, nodes) == ("a", "b", "c")  # a placement of its own, not the plain pods'
    assert both(picky, nodes) == ("c",)
    # A node that changes is a new object (as the informer stores it): judged again.
    nodes[1] = b.node("b")
    nodes[0] = b.node("a", taints=[tainted])
    nodes[2] = b.node("c", unschedulable=True)
    assert [both(p, nodes) for p in (*pods, tolerant, picky)] == [("b",), ("b",), ("b",), ("a", "b"), ()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans(), st.booleans(), st.integers(0, 4)),
                    min_size=1, max_size=12),
    tolerant=st.booleans(), picky=st.booleans(), more=st.integers(0, 3),
)
def test_filter_for_a_pod_without_requests_equals_each_nodes_verdict(
    shapes: list[tuple[int, bool, bool, bool, int]], tolerant: bool, picky: bool, more: int
) -> None:
    """A pod asking for no CPU, memory or extended resources takes the filter's inlined path:
    the same candidates and reasons as :func:`node_verdict` gives node by node (pod limits,
    taints, cordons, selectors; used counts present or not), first and second time (kept
    verdicts)."""
    nodes, used = [], {}
    for i, (room, tainted, cordoned, zoned, pods_there) in enumerate(shapes):
        name = f"n{len(shapes) - i:02d}"  # listed out of name order
        nodes.append(b.node(name, pods=str(room), taints=[{"key": "k", "effect": "NoSchedule"}] if tainted else None,
                            unschedulable=cordoned, labels={"zone": "z1"} if zoned else None))
        if pods_there:
            used[name] = s.Resources(pods=pods_there)
    pod = b.pod("p", tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}] if tolerant else None,
                node_selector={"zone": "z1"} if picky else None)
    del pod["spec"]["containers"][0]["resources"]
    assert s.pod_requests(pod) == s.Resources(pods=1)
    verdicts = {ob.name(n): s.node_verdict(pod, n, used=used.get(ob.name(n), s.NO_USE)) for n in nodes}
    want = s.NodeFilter(tuple(sorted(k for k, v in verdicts.items() if not v)), {k: v for k, v in verdicts.items() if v})
    kept = s.PlacementVerdicts()
    assert s.filter_nodes(pod, nodes, used=used, placements=kept) == want
    assert s.filter_nodes(pod, {ob.name(n): n for n in nodes}, used=used, placements=kept) == want
    # The same mapping again (no node changed): the kept placement pass, pod limits counted
    # with the pods there now.
    mapping = {ob.name(n): n for n in nodes}
    assert s.filter_nodes(pod, mapping, used=used, placements=kept) == want
    fuller = {ob.name(n): s.Resources(pods=(used.get(ob.name(n), s.NO_USE).pods or 0) + more) for n in nodes}
    verdicts = {ob.name(n): s.node_verdict(pod, n, used=fuller[ob.name(n)]) for n in nodes}
    want = s.NodeFilter(tuple(sorted(k for k, v in verdicts.items() if not v)), {k: v for k, v in verdicts.items() if v})
    assert s.filter_nodes(pod, mapping, used=fuller, placements=kept) == want


def test_pods_that_place_alike_reuse_the_placement_pass_until_a_node_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    from dra_solver.service.api import nodefilter

    looked: list[str] = []
    placement = nodefilter.PlacementCheck.placement
    monkeypatch.setattr(nodefilter.PlacementCheck, "placement", lambda self, node: looked.append(ob.name(node)) or placement(self, node))
    kept = s.PlacementVerdicts()
    nodes = {n: b.node(n, pods="3") for n in ("a", "b", "c")}
    pods = [b.pod(f"p{i}") for i in range(4)]
    for pod in pods:
        del pod["spec"]["containers"][0]["resources"]
    assert s.filter_nodes(pods[0], nodes, used={}, placements=kept).candidates == ("a", "b", "c")
    assert looked == ["a", "b", "c"]
    # Alike pods over the same mapping: no node looked at, the pod counts still read.
    assert s.filter_nodes(pods[1], nodes, used={"b": s.Resources(pods=2)}, placements=kept).candidates == ("a", "b", "c")
    full = s.filter_nodes(pods[2], nodes, used={"b": s.Resources(pods=3)}, placements=kept)
    assert (full.candidates, full.reasons) == (("a", "c"), {"b": "Too many pods"})
    assert looked == ["a", "b", "c"]
    # A node changed: a new mapping (as the informer hands out), that node judged again.
    changed = {**nodes, "c": b.node("c", unschedulable=True)}
    got = s.filter_nodes(pods[3], changed, used={}, placements=kept)
    assert (got.candidates, looked) == (("a", "b"), ["a", "b", "c", "c"])


def test_used_resources_and_least_allocated() -> None:
    pods = [
        b.pod("p1", node="a", cpu="4"), b.pod("p2", node="a", cpu="1"), b.pod("p3", node="b", cpu="1"),
        b.pod("done", node="b", cpu="7", phase="Succeeded"), b.pod("pending", cpu="7"),
    ]
    used = s.used_resources(pods)
    assert used["a"].cpu == 5 and used["b"].cpu == 1 and used["b"].pods == 1
    nodes = {"a": b.node("a"), "b": b.node("b"), "c": b.node("c")}
    assert s.least_allocated(["a", "b", "c"], nodes, used) == "c"
    assert s.least_allocated(["a", "b"], nodes, used) == "b"


def test_node_usage_follows_pod_events_as_a_recount_would() -> None:
    """The scheduler's running totals equal :func:`used_resources` over the pods as they are
    after every event: bound, moved between versions, finished, deleted."""
    import random

    rnd = random.Random(7)
    usage = s.NodeUsage()
    live: dict[str, dict[str, Any]] = {}
    for _ in range(400):
        name = f"p{rnd.randrange(12)}"
        if name in live and rnd.random() < 0.2:
            del live[name]
            usage.update(f"default/{name}", None)
        else:
            pod = b.pod(name, node=rnd.choice([None, "a", "b", "c"]), cpu=rnd.choice(["100m", "1", "2.5"]),
                        phase=rnd.choice(["Pending", "Running", "Running", "Succeeded", "Failed"]))
            live[name] = pod
            usage.update(f"default/{name}", pod)
        assert usage.used() == s.used_resources(live.values())


ALLOC = {"devices": {"results": [{"request": "gpu", "driver": b.DRIVER, "pool": "node-a", "device": "gpu-0"}]}}


@pytest.mark.parametrize(
    ("claim", "allocation", "kind", "message"),
    [
        (OWNED, ALLOC, "finalizer", ""),
        (b.ONE_GPU.named("web-gpu-1").finalizer().obj(), ALLOC, "status", ""),
        ({**b.ONE_GPU.named("web-gpu-1").finalizer().obj(), "status": {"allocation": ALLOC, "reservedFor": [{"resource": "pods", "name": "web", "uid": "pod-uid"}]}},
         ALLOC, "done", ""),
        ({**b.ONE_GPU.named("web-gpu-1").finalizer().obj(), "status": {"allocation": ALLOC}}, ALLOC, "status", ""),
        (b.ONE_GPU.named("web-gpu-1").finalizer().allocated("gpu-3", node="node-a").obj(), ALLOC, "error", "allocated elsewhere"),
        (b.ONE_GPU.named("web-gpu-1").finalizer().deleting().obj(), ALLOC, "error", "got deleted"),
        (b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").reserved_for(b.pod("o", uid="o")).obj(), None, "status", ""),
        (b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").reserved_for(b.pod("web", uid="pod-uid")).obj(), None, "done", ""),
        (b.ONE_GPU.named("shared").obj(), None, "error", "no longer allocated"),
    ],
    ids=["needs finalizer", "write status", "already done", "allocated by us, reserve", "lost the race", "deleted",
         "reserve shared", "shared already reserved", "shared deallocated"],
)
def test_write_step(claim: dict[str, Any], allocation: dict[str, Any] | None, kind: str, message: str) -> None:
    pod = b.pod("web", uid="pod-uid")
    before = copy.deepcopy(claim)
    step = s.write_step(claim, pod, allocation)
    assert claim == before
    assert step.kind == kind
    assert message in step.message
    if kind == "finalizer":
        assert step.body is not None
        assert step.body["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert step.body["metadata"]["resourceVersion"] == "5"
    if kind == "status":
        assert step.body is not None
        assert step.body["reservedFor"][-1] == {"resource": "pods", "name": "web", "uid": "pod-uid"}
        if allocation is not None:
            assert step.body["allocation"] == allocation


def test_write_steps_converge() -> None:
    # Applying each step's body as the API server would ends in "done" within two steps.
    pod = b.pod("web", uid="pod-uid")
    claim = copy.deepcopy(OWNED)
    for _ in range(3):
        step = s.write_step(claim, pod, ALLOC)
        if step.kind == "done":
            break
        assert step.body is not None
        claim = step.body if step.kind == "finalizer" else {**claim, "status": step.body}
    assert step.kind == "done"
    assert ob.allocation(claim) == ALLOC and ob.is_reserved_for_pod(pod, claim)


@pytest.mark.parametrize(
    ("claim", "clear", "reserved", "allocated"),
    [
        (b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").reserved_for(b.pod("web", uid="pod-uid")).obj(), True, [], False),
        (b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").reserved_for(b.pod("web", uid="pod-uid")).obj(), False, [], True),
        (b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").reserved_for(b.pod("web", uid="pod-uid"), b.pod("o", uid="o")).obj(), True, ["o"], True),
        (b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").reserved_for(b.pod("o", uid="o")).obj(), False, None, True),
        (b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").obj(), True, [], False),
    ],
    ids=["ours alone", "shared claim allocated earlier", "someone else joined", "not reserved by us", "allocation only"],
)
def test_rollback_status(claim: dict[str, Any], clear: bool, reserved: list[str] | None, allocated: bool) -> None:
    pod = b.pod("web", uid="pod-uid")
    got = s.rollback_status(claim, pod, clear_allocation=clear)
    if reserved is None:
        assert got is None
        return
    assert got is not None
    assert [r["name"] for r in got.get("reservedFor", [])] == reserved
    assert ("allocation" in got) == allocated


def device_conflicts(new: dict[str, Any], claims: list[dict[str, Any]]) -> list[str]:
    """The reference: ``conflicts_with`` against a full scan of ``claims``."""
    held: dict[str, list[str]] = {}
    for claim in claims:
        for device in s.claim_devices(claim):
            held.setdefault(device, []).append(ob.key(claim))
    return s.conflicts_with(new, lambda device: held.get(device, ()))


def test_device_conflicts() -> None:
    held = b.ONE_GPU.named("held").allocated("gpu-0", node="node-a").obj()
    admin = {**b.ONE_GPU.named("admin").obj(), "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": b.DRIVER, "pool": "node-a", "device": "gpu-1", "adminAccess": True}]}}}}
    new = {
        "default/a": {"devices": {"results": [{"driver": b.DRIVER, "pool": "node-a", "device": "gpu-0"}]}},
        "default/b": {"devices": {"results": [{"driver": b.DRIVER, "pool": "node-a", "device": "gpu-1"},
                                              {"driver": b.DRIVER, "pool": "node-a", "device": "gpu-2"}]}},
        "default/c": {"devices": {"results": [{"driver": b.DRIVER, "pool": "node-a", "device": "gpu-2"}]}},
        "default/d": {"devices": {"results": [{"driver": b.DRIVER, "pool": "node-a", "device": "gpu-3", "shareID": "s1"}]}},
    }
    got = device_conflicts(new, [held, admin, b.ONE_GPU.named("d").allocated("gpu-3", node="node-a").obj()])
    assert got == [
        "device gpu.example.com/node-a/gpu-0 of claim default/a is already allocated to claim default/held",
        "device gpu.example.com/node-a/gpu-2 of claim default/c is already allocated to claim default/b",
    ]
    assert device_conflicts({"default/held": ALLOC}, [held]) == []


def test_devices_in_flight_answer_as_the_claims_would() -> None:
    """The scheduler's last check reads held devices from the claims' device index and the
    allocations in flight; it must agree with the full scan over the same claims."""
    held = b.ONE_GPU.named("held").allocated("gpu-0", node="node-a").obj()
    flying = {"default/f": {"devices": {"results": [{"driver": b.DRIVER, "pool": "node-a", "device": "gpu-1"}]}}}
    holders = s.DeviceHolders()
    holders.add("default/pod-f", flying)
    index = {d: [ob.key(held)] for d in s.claim_devices(held)}
    assert list(index) == ["gpu.example.com/node-a/gpu-0"]

    def lookup(device: str) -> list[str]:
        found = holders.holder(device)
        return index.get(device, []) + ([found[1]] if found else [])

    new = {"default/n": {"devices": {"results": [{"driver": b.DRIVER, "pool": "node-a", "device": "gpu-0"},
                                                 {"driver": b.DRIVER, "pool": "node-a", "device": "gpu-1"}]}}}
    flying_claim = {**b.ONE_GPU.named("f").obj(), "status": {"allocation": flying["default/f"]}}
    assert s.conflicts_with(new, lookup) == device_conflicts(new, [held, flying_claim]) == [
        "device gpu.example.com/node-a/gpu-0 of claim default/n is already allocated to claim default/held",
        "device gpu.example.com/node-a/gpu-1 of claim default/n is already allocated to claim default/f",
    ]
    holders.remove(flying)
    assert holders.holder("gpu.example.com/node-a/gpu-1") is None
    assert s.conflicts_with(new, lookup) == device_conflicts(new, [held])


def test_unschedulable_patch_only_when_changed() -> None:
    pod = b.pod("web", uid="pod-uid")
    patch = s.unschedulable_patch(pod, "0/1 nodes are available.", now=0)
    assert patch is not None
    cond = patch["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
    pod["status"]["conditions"] = [cond]
    assert s.unschedulable_patch(pod, "0/1 nodes are available.", now=5) is None
    assert s.unschedulable_patch(pod, "0/2 nodes are available.", now=5) is not None


@pytest.mark.parametrize(
    ("pod", "pending"),
    [
        (b.pod("p"), True),
        (b.pod("p", scheduler="default-scheduler"), False),
        (b.pod("p", node="n"), False),
        (b.pod("p", deleting=True), False),
        (b.pod("p", phase="Failed"), False),
        ({**b.pod("p"), "spec": {**b.pod("p")["spec"], "schedulingGates": [{"name": "example.com/wait"}]}}, False),
    ],
    ids=["ours", "other scheduler", "bound", "deleting", "finished", "gated"],
)
def test_is_pending(pod: dict[str, Any], pending: bool) -> None:
    assert s.is_pending(pod) == pending


def test_scheduling_inputs_changed_ignores_condition_writes() -> None:
    pod = b.pod("p")
    marked = copy.deepcopy(pod)
    marked["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    assert not s.scheduling_inputs_changed(pod, marked)
    claimed = copy.deepcopy(pod)
    claimed["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "x"}]
    assert s.scheduling_inputs_changed(pod, claimed)
    assert s.scheduling_inputs_changed(None, pod)


def test_binding_carries_uid() -> None:
    assert s.binding(POD, "node-a") == {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web", "namespace": "default", "uid": "pod-uid"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
    }


def test_deep_copy_shares_nothing_and_copies_values_marshal_cannot() -> None:
    claim = copy.deepcopy(OWNED)
    copied = ob.deep_copy(claim)
    assert copied == claim
    copied["metadata"]["ownerReferences"][0]["name"] = "other"
    copied["spec"]["devices"]["requests"].append({"name": "more"})
    assert claim == OWNED
    odd = {"amount": Fraction(1, 3), "nested": [{"a": 1}]}
    again = ob.deep_copy(odd)
    assert again == odd and again["nested"][0] is not odd["nested"][0]
