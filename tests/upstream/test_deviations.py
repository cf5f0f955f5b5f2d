"""The deviation classifier (``service.deviations``) on one small input per README deviation, and
what upstream's own code at the pinned version does with each: 5-7 still make upstream refuse
what CP-SAT allocates (and the classifier names them); 1 and 2 are fixed there, so upstream, the
backtracking port (which follows v0.37.2) and CP-SAT all give the documented answer, and the
classifier no longer names them."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import allocate
from dra_solver.model.allocation import AllocatedState, AllocationRequest, DeviceID, Inventory
from dra_solver.model.decode import decode_all
from dra_solver.model.features import FeatureGates
from dra_solver.service import deviations, upstream
from dra_solver.service.compare import chosen_devices
from tests import builders as b

GPU = "gpu.example.com"
NODE = "node-1"
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]}}


def _slice(name: str, pool: str, *, devices: list[dict[str, Any]] | None = None, counters: list[dict[str, Any]] | None = None,
           count: int = 1, driver: str = GPU) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "nodeName": NODE, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}}
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def _uses(counter_set: str, amount: str) -> list[dict[str, Any]]:
    return [{"counterSet": counter_set, "counters": {"memory": {"value": amount}}}]


def _partitioned(*, taint_full: bool = False) -> list[dict[str, Any]]:
    """One 8Gi GPU, whole or as two 4Gi halves, on a shared counter set."""
    full: dict[str, Any] = {"name": "gpu-0", "consumesCounters": _uses("gpu-0-memory", "8Gi")}
    if taint_full:
        full["taints"] = [{"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}]
    halves = [{"name": f"gpu-0-half-{i}", "consumesCounters": _uses("gpu-0-memory", "4Gi")} for i in range(2)]
    return [_slice("devices", "gpus", devices=[full, *halves], count=2),
            _slice("counters", "gpus", counters=[{"name": "gpu-0-memory", "counters": {"memory": {"value": "8Gi"}}}], count=2)]


def _make(objects: list[dict[str, Any]], in_use: tuple[str, ...] = (), *, pool: str = "gpus") -> AllocationRequest:
    decoded = Inventory.from_objects(decode_all([CLASS, *objects], source="test"))
    inventory = Inventory(classes=decoded.classes, slices=decoded.slices,
                          extra_allocated=AllocatedState(devices=frozenset(DeviceID(GPU, pool, d) for d in in_use)))
    return AllocationRequest(claims=decoded.claims, node=inventory.node(NODE), inventory=inventory, gates=FeatureGates())


FIXED_INPUTS: dict[int, AllocationRequest] = {
    # 1: one request for three GPUs with distinct models; the first and third share a model
    # (the old behaviour compared a device of a request only with the request's last one).
    1: _make([_slice("gpus", "gpus", devices=[{"name": f"gpu-{i}", "attributes": {"model": {"string": m}}}
                                               for i, m in enumerate("abac")]),
              b.claim("c", b.request("three", cls="gpu", count=3, allocationMode="ExactCount"), uid="uid-c", constraints=[{"distinctAttribute": f"{GPU}/model"}]).obj()]),
    # 2: the whole GPU is tainted; a half is free once its counters are given back.
    2: _make([*_partitioned(taint_full=True), b.claim("c", b.request("one", cls="gpu", count=1, allocationMode="ExactCount"), uid="uid-c").obj()]),
}

INPUTS: dict[int, AllocationRequest] = {
    # 5: an admin claim before an ordinary one, one GPU.
    5: _make([_slice("gpus", "gpus", devices=[{"name": "gpu-0"}]),
              b.claim("a-admin", b.request("watch", cls="gpu", count=1, allocationMode="ExactCount", adminAccess=True), uid="uid-a-admin").obj(), b.claim("b", b.request("use", cls="gpu", count=1, allocationMode="ExactCount"), uid="uid-b").obj()]),
    # 6: admin access while the whole GPU is allocated.
    6: _make([*_partitioned(), b.claim("c", b.request("watch", cls="gpu", count=1, allocationMode="ExactCount", adminAccess=True), uid="uid-c").obj()], ("gpu-0",)),
    # 7: set A holds 8Gi but devices in use draw 12Gi from it; set B is untouched.
    7: _make([_slice("devices", "gpus", count=2, devices=[
                  {"name": "a-full", "consumesCounters": _uses("a", "8Gi")},
                  {"name": "a-half", "consumesCounters": _uses("a", "4Gi")},
                  {"name": "b-full", "consumesCounters": _uses("b", "8Gi")}]),
              _slice("counters", "gpus", count=2, counters=[{"name": s, "counters": {"memory": {"value": "8Gi"}}} for s in "ab"]),
              b.claim("c", b.request("one", cls="gpu", count=1, allocationMode="ExactCount", selectors=[b.selector('device.attributes["gpu.example.com"].size == "x" || true')]), uid="uid-c").obj()],
             ("a-full", "a-half")),
}


def _verdict(request: AllocationRequest, allocator: str) -> tuple[str, tuple[str, ...]]:
    from dataclasses import replace

    outcome = allocate(replace(request, allocator=allocator))  # type: ignore[arg-type]
    return ("allocated" if outcome.allocated else "unsatisfiable"), (
        chosen_devices(request.claims, outcome) if outcome.allocated else ())


def _upstream(request: AllocationRequest, runner: upstream.UpstreamAllocator) -> tuple[str, tuple[str, ...]]:
    answer = runner.run(upstream.request_document(request))
    outcome = upstream.outcome_from_answer(request, answer)
    return answer.verdict, chosen_devices(request.claims, outcome) if outcome.allocated else ()


@pytest.mark.parametrize("number", sorted(INPUTS))
def test_the_classifier_sees_each_trigger(number: int) -> None:
    found = {d.number for d in deviations.present_in(INPUTS[number])}
    assert number in found


def test_a_plain_input_has_no_deviation() -> None:
    plain = _make([_slice("gpus", "gpus", devices=[{"name": "gpu-0"}, {"name": "gpu-1"}]), b.claim("c", b.request("two", cls="gpu", count=2, allocationMode="ExactCount"), uid="uid-c").obj()])
    assert deviations.present_in(plain) == ()
    assert deviations.explain(plain, ours="allocated", theirs="unsatisfiable") == ()


@pytest.mark.parametrize("number", [5, 6, 7])
def test_upstream_still_refuses(number: int, upstream_allocator: upstream.UpstreamAllocator) -> None:
    request = INPUTS[number]
    theirs, _ = _upstream(request, upstream_allocator)
    ours, _ = _verdict(request, "cpsat")
    assert (ours, theirs) == ("allocated", "unsatisfiable")
    assert _verdict(request, "backtracking")[0] == "unsatisfiable"  # the port has it too
    named = deviations.explain(request, ours=ours, theirs=theirs, numbers=deviations.still_in_pinned_upstream())
    assert number in {d.number for d in named}


@pytest.mark.parametrize("number", sorted(FIXED_INPUTS))
def test_fixed_deviations_are_not_named(number: int) -> None:
    assert deviations.present_in(FIXED_INPUTS[number]) == ()
    assert number not in deviations.BY_NUMBER
    assert not deviations.FIXED_IN_PINNED_UPSTREAM


def test_upstream_fixed_distinct_within_a_request(upstream_allocator: upstream.UpstreamAllocator) -> None:
    request = FIXED_INPUTS[1]
    theirs, devices = _upstream(request, upstream_allocator)
    assert theirs == "allocated"
    assert [d.rsplit("/", 1)[1] for d in devices] == ["gpu-0", "gpu-1", "gpu-3"]  # distinct models
    assert _verdict(request, "cpsat")[0] == "allocated"
    assert _verdict(request, "backtracking") == (theirs, devices)  # the port follows v0.37.2


def test_upstream_fixed_counters_of_a_rejected_device(upstream_allocator: upstream.UpstreamAllocator) -> None:
    request = FIXED_INPUTS[2]
    theirs, devices = _upstream(request, upstream_allocator)
    assert (theirs, [d.rsplit("/", 1)[1] for d in devices]) == ("allocated", ["gpu-0-half-0"])
    assert _verdict(request, "cpsat")[0] == "allocated"
    assert _verdict(request, "backtracking") == (theirs, devices)  # the port gives them back too
