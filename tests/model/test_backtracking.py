"""The backtracking allocator beyond the shared case tables: deadline, stats, and the four places
where older upstream releases left the documented semantics and v0.37.2 (which the port
follows) does not. Devices and step counts are upstream v0.37.2's for the same inputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationRequest, Inventory
from dra_solver.model.backtracking import allocate_backtracking
from dra_solver.model.errors import AllocationError, NodeLocalError, SolveTimeout
from dra_solver.model.features import FeatureGates
from tests.builders import DRIVER_A, DRIVER_B, claim, first_available, request, sub
from tests.conformance.cases import cel_environment
from tests.model.alloc_builders import device, device_class, node, slice_

ALL = FeatureGates()

# allocateOne invocations upstream v0.37.2 needs for the inputs of the tests below.
STEPS = {"distinct": 6, "taint": 4, "constraint": 5, "intersection": 7, "pools": 6}


def _request(
    claims: list[o.ResourceClaim],
    slices: list[o.ResourceSlice],
    classes: tuple[o.DeviceClass, ...] = (device_class(),),
    **kwargs: Any,
) -> AllocationRequest:
    inventory = Inventory(classes=classes, slices=tuple(slices))
    return AllocationRequest(claims=tuple(claims), node=node(), inventory=inventory, gates=ALL, allocator="backtracking", **kwargs)


def _devices(result: o.AllocationResult) -> list[str]:
    assert result.devices is not None
    return [f"{r.request}={r.device}" for r in result.devices.results or []]


def _numa(name: str, value: int) -> dict[str, Any]:
    return device(name, attributes={"numa": {"int": value}})


def test_first_fit_and_steps() -> None:
    slices = [slice_("s1", devices=[device("d1"), device("d2"), device("d3")])]
    outcome = allocate_backtracking(_request([claim("c", request(count=2)).decode()], slices), cel=cel_environment(ALL))
    assert outcome.allocated
    assert _devices(outcome.results[0]) == ["req-0=d1", "req-0=d2"]
    # claim start, two devices, end of request, end of claim -> 5 invocations
    assert outcome.stats.steps == 5
    assert outcome.stats.status == "FOUND"


def test_first_available_falls_back_and_scores() -> None:
    slices = [slice_("s1", devices=[device("d1")])]
    c = claim("c", first_available("req", sub("two", count=2), sub("one"))).decode()
    outcome = allocate_backtracking(_request([c], slices), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req/one=d1"]
    assert outcome.score == 7


def test_exhausted_is_not_an_error() -> None:
    outcome = allocate_backtracking(_request([claim("c", request(count=2)).decode()], [slice_("s1")]), cel=cel_environment(ALL))
    assert not outcome.allocated
    assert outcome.stats.status == "EXHAUSTED"


def test_invalid_pool_without_solution_is_a_node_local_error() -> None:
    slices = [slice_("s1", count=2, devices=[device("d")]), slice_("s2", count=2, devices=[device("d")])]
    with pytest.raises(AllocationError, match="invalid resource pools were encountered") as caught:
        allocate_backtracking(_request([claim("c", request()).decode()], slices), cel=cel_environment(ALL))
    assert isinstance(caught.value, NodeLocalError)


def test_distinct_attribute_compares_devices_of_one_request() -> None:
    # Upstream before v0.37.2 remembered one value per request name and gave a, b, c (numa 0
    # twice). v0.37.2 compares c with every device so far and skips it, as documented.
    slices = [slice_("s1", devices=[_numa("a", 0), _numa("b", 1), _numa("c", 0), _numa("d", 2)])]
    c = claim("c", request(count=3), constraints=[{"distinctAttribute": "driver-a/numa"}]).decode()
    outcome = allocate_backtracking(_request([c], slices), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req-0=a", "req-0=b", "req-0=d"]
    assert outcome.stats.steps == STEPS["distinct"]


def _memory(counter_set: str, amount: str) -> list[dict[str, Any]]:
    return [{"counterSet": counter_set, "counters": {"memory": {"value": amount}}}]


def _gpu_slices(
    driver: str = DRIVER_A, *, taint_full: bool = False, half_attributes: dict[str, Any] | None = None
) -> list[o.ResourceSlice]:
    """One 8Gi GPU of ``driver`` in pool "gpus", whole or as two 4Gi halves."""
    full: dict[str, Any] = device("full", consumesCounters=_memory("mem", "8Gi"))
    if taint_full:
        full["taints"] = [{"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}]
    halves = [device(f"half-{i}", consumesCounters=_memory("mem", "4Gi")) for i in range(2)]
    for half in halves:
        if half_attributes:
            half["attributes"] = half_attributes
    counters = [{"name": "mem", "counters": {"memory": {"value": "8Gi"}}}]
    return [
        slice_(f"{driver}-devices", pool="gpus", driver=driver, count=2, devices=[full, *halves]),
        slice_(f"{driver}-counters", pool="gpus", driver=driver, count=2, devices=[], sharedCounters=counters),
    ]


def test_a_rejected_device_gives_its_counters_back() -> None:
    # The whole GPU takes all 8Gi, then its taint rejects it. Before v0.37.2 upstream kept the
    # 8Gi for the rest of the attempt and found nothing; v0.37.2 gives them back.
    c = claim("c", request()).decode()
    outcome = allocate_backtracking(_request([c], _gpu_slices(taint_full=True)), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req-0=half-0"]
    assert outcome.stats.steps == STEPS["taint"]


def test_a_device_refused_by_a_constraint_gives_its_counters_back() -> None:
    # The whole GPU lacks the matched attribute: refused by the constraint after taking 8Gi.
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    slices = _gpu_slices(half_attributes={"numa": {"int": 0}})
    outcome = allocate_backtracking(_request([c], slices), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req-0=half-0", "req-0=half-1"]
    assert outcome.stats.steps == STEPS["constraint"]


def test_match_attribute_list_intersection_widens_again() -> None:
    # a {x, y} with b {x} narrows the intersection to {x}; nothing else has x, so b is removed.
    # v0.37.2 widens the intersection back to {x, y} and finds a, c, d; before it upstream
    # kept {x} and found nothing.
    zones = {"a": ["x", "y"], "b": ["x"], "c": ["y"], "d": ["y"]}
    devices = [device(n, attributes={"zone": {"strings": z}}) for n, z in zones.items()]
    c = claim("c", request(count=3), constraints=[{"matchAttribute": "driver-a/zone"}]).decode()
    outcome = allocate_backtracking(_request([c], [slice_("s1", devices=devices)]), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req-0=a", "req-0=c", "req-0=d"]
    assert outcome.stats.steps == STEPS["intersection"]


def test_counters_are_per_driver_and_pool() -> None:
    # Two drivers publish a pool named "gpus", each with its own 8Gi counter set "mem". Before
    # v0.37.2 upstream keyed counters by pool name only, so the second whole GPU was refused.
    c = claim("c", request("a"), request("b", cls="class-b")).decode()
    classes = (device_class(), device_class("class-b", DRIVER_B))
    slices = [*_gpu_slices(DRIVER_A), *_gpu_slices(DRIVER_B)]
    outcome = allocate_backtracking(_request([c], slices, classes), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["a=full", "b=full"]
    assert outcome.stats.steps == STEPS["pools"]


def test_match_attribute_backtracks() -> None:
    slices = [slice_("s1", devices=[_numa("a", 0), _numa("b", 1), _numa("c", 1)])]
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    outcome = allocate_backtracking(_request([c], slices), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req-0=b", "req-0=c"]


def test_deadline_raises_solve_timeout_with_stats() -> None:
    # 20 devices, 5 + 16 wanted: every combination for the first request is tried in vain.
    slices = [slice_("s1", devices=[device(f"d{i}") for i in range(20)])]
    c = claim("c", request("a", count=5), request("b", count=16)).decode()

    def ticks() -> Iterator[float]:
        t = 0.0
        while True:
            yield t
            t += 0.001

    clock = ticks()
    with pytest.raises(SolveTimeout) as caught:
        allocate_backtracking(_request([c], slices, time_limit=0.05), cel=cel_environment(ALL), clock=lambda: next(clock))
    stats = caught.value.stats  # type: ignore[attr-defined]
    assert stats.status == "DEADLINE"
    assert stats.steps > 0
