"""The scheduler comparison's workloads and its differences report, without a server."""

from __future__ import annotations

import re

import pytest

from dra_solver.model.decode import decode_all
from dra_solver.service.schedcompare import workloads
from dra_solver.service.schedcompare.report import (
    DEVICE_CHOICE,
    FIRST_AVAILABLE,
    NODE_CHOICE,
    ORDER,
    TIMEOUT,
    differences,
    reason_summary,
)
from dra_solver.service.schedcompare.runner import PodOutcome, SideResult


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_every_workload_is_valid_api_objects(name: str) -> None:
    w = workloads.build(name, nodes=9, pods=20)
    assert len(w.nodes) == 9 and len(w.pods) == 20
    claims = [o for o in w.namespaced if o["kind"] == "ResourceClaim"]
    # Our own strict decoder accepts every DRA object (unknown or misspelt fields fail it).
    decode_all([*w.nodes, *w.cluster, *claims])
    templates = {o["metadata"]["name"] for o in w.namespaced if o["kind"] == "ResourceClaimTemplate"}
    assert {p.template for p in w.pods} <= templates
    # Label values as the API server validates them (the size label is copied to claims).
    label_value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    sizes = {p.size for p in w.pods} | {o["spec"]["metadata"]["labels"][workloads.SIZE_LABEL]
                                        for o in w.namespaced if o["kind"] == "ResourceClaimTemplate"}
    assert all(label_value.match(s) and len(s) <= 63 for s in sizes), sizes
    for spec in w.pods:
        pod = w.pod_object(spec, "dra-solver")
        assert pod["spec"]["schedulerName"] == "dra-solver"
        assert "schedulerName" not in w.pod_object(spec, "default-scheduler")["spec"]


def test_workloads_are_deterministic() -> None:
    assert workloads.build("mixed", nodes=8, pods=50) == workloads.build("mixed", nodes=8, pods=50)


def test_one_pool_per_node_and_devices_per_node() -> None:
    w = workloads.build("mig-partitions-first", nodes=3, pods=5)
    slices = [o for o in w.cluster if o["kind"] == "ResourceSlice"]
    pools = {(s["spec"]["nodeName"], s["spec"]["pool"]["name"]) for s in slices}
    assert pools == {(n["metadata"]["name"], n["metadata"]["name"]) for n in w.nodes}
    devices = [d for s in slices for d in s["spec"].get("devices", [])]
    assert len(devices) == 3 * 8 * 14  # per GPU: whole + 13 partitions
    first = next(s for s in slices if s["spec"].get("devices"))["spec"]["devices"]
    assert first[0]["name"] != "gpu-0" and first[13]["name"] == "gpu-0"


def test_partly_used_cluster_has_allocated_claims() -> None:
    w = workloads.build("mixed", nodes=8, pods=10)
    in_use = [o for o in w.namespaced if o["kind"] == "ResourceClaim"]
    assert sum(len(c["status"]["allocation"]["devices"]["results"]) for c in in_use) == sum(workloads.IN_USE_PATTERN)


def test_unknown_workload_is_named() -> None:
    with pytest.raises(ValueError, match='Unsupported value: "nope"'):
        workloads.build("nope", nodes=1, pods=1)


def _side(name: str, pods: dict[str, PodOutcome]) -> SideResult:
    return SideResult(name, "w", pods, None)


def _pod(name: str, node: str = "", devices: tuple[str, ...] = (), subrequests: tuple[str, ...] = (),
         unschedulable: str = "") -> PodOutcome:
    return PodOutcome(name, "1gpu", created=0.0, bound_at=1.0 if node else None, node=node, devices=devices,
                      subrequests=subrequests, unschedulable=unschedulable)


def test_differences_give_a_reason_for_each_pod() -> None:
    w = workloads.build("claim-template", nodes=2, pods=6)
    upstream = _side("kube-scheduler", {
        "same": _pod("same", "n1", ("d/n1/a",)),
        "node": _pod("node", "n1", ("d/n1/b",)),
        "dev": _pod("dev", "n2", ("d/n2/a",)),
        "sub": _pod("sub", "n2", ("d/n2/b",), ("gpu/h100",)),
        "only-ours": _pod("only-ours", unschedulable="0/2 nodes are available: cannot allocate all claims."),
        "timeout": _pod("timeout", "n2", ("d/n2/c",)),
    })
    ours = _side("dra-solver", {
        "same": _pod("same", "n1", ("d/n1/a",)),
        "node": _pod("node", "n2", ("d/n2/b",)),
        "dev": _pod("dev", "n2", ("d/n2/z",)),
        "sub": _pod("sub", "n2", ("d/n2/x", "d/n2/y"), ("gpu/a100", "gpu/a100")),
        "only-ours": _pod("only-ours", "n1", ("d/n1/q",)),
        "timeout": _pod("timeout"),
    })
    diffs = {d.pod: d for d in differences(w, upstream, ours)}
    assert set(diffs) == {"node", "dev", "sub", "only-ours", "timeout"}
    assert diffs["node"].reason == NODE_CHOICE
    assert diffs["dev"].reason == DEVICE_CHOICE
    assert diffs["sub"].reason == FIRST_AVAILABLE
    # As many bound on each side (5), other pods: the schedulers' order, not capacity.
    assert diffs["only-ours"].kind == "only-ours" and diffs["only-ours"].reason == ORDER
    assert diffs["timeout"].reason == f"dra-solver: {TIMEOUT}"
    assert sum(reason_summary(list(diffs.values())).values()) == 5


def test_same_number_placed_but_other_pods_is_order() -> None:
    w = workloads.build("claim-template", nodes=1, pods=2)
    upstream = _side("kube-scheduler", {"a": _pod("a", "n1", ("d/n1/x",)), "b": _pod("b", unschedulable="no room")})
    ours = _side("dra-solver", {"a": _pod("a", unschedulable="no room"), "b": _pod("b", "n1", ("d/n1/x",))})
    assert {d.reason for d in differences(w, upstream, ours)} == {ORDER}
    # One more bound upstream: the pod ours left pending is a matter of capacity, not order.
    upstream.pods["b"] = _pod("b", "n1", ("d/n1/x",))
    (diff,) = differences(w, upstream, ours)
    assert diff.kind == "only-upstream" and diff.reason.startswith("capacity: dra-solver found no room")


def test_churn_workloads_are_not_compared_pod_by_pod() -> None:
    w = workloads.build("steady-state", nodes=2, pods=2)
    up = _side("kube-scheduler", {"pod-00000": _pod("pod-00000", "n1")})
    us = _side("dra-solver", {"pod-00000": _pod("pod-00000", "n2")})
    assert differences(w, up, us) == []


def test_placed_by_size_splits_first_available_choices() -> None:
    side = _side("dra-solver", {
        "a": _pod("a", "n1", ("d/n1/x",), ("gpu/h100",)),
        "b": _pod("b", "n1", ("d/n1/y", "d/n1/z"), ("gpu/a100", "gpu/a100")),
        "c": _pod("c"),
    })
    assert side.placed_by_size() == {"1gpu": (2, 3), "1gpu=a100": (1, 0), "1gpu=h100": (1, 0)}
