"""The scheduler comparison's workloads and its differences report, without a server."""

from __future__ import annotations

import re

import pytest

from dra_solver.model.decode import decode_all
from dra_solver.service.schedcompare import workloads
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


def test_placed_by_size_splits_first_available_choices() -> None:
    side = _side("dra-solver", {
        "a": _pod("a", "n1", ("d/n1/x",), ("gpu/h100",)),
        "b": _pod("b", "n1", ("d/n1/y", "d/n1/z"), ("gpu/a100", "gpu/a100")),
        "c": _pod("c"),
    })
    assert side.placed_by_size() == {"1gpu": (2, 3), "1gpu=a100": (1, 0), "1gpu=h100": (1, 0)}
