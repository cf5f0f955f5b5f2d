"""The backtracking allocator beyond the shared case tables: deadline, quirks, stats."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from model import objects as o
from model.allocation import AllocationRequest, Inventory
from model.backtracking import allocate_backtracking
from model.errors import AllocationError, SolveTimeout
from model.features import FeatureGates
from tests.conformance.cases import cel_environment
from tests.model.alloc_builders import (
    claim,
    device,
    device_class,
    first_available,
    node,
    request,
    slice_,
    sub,
)

ALL = FeatureGates()


def _request(claims: list[o.ResourceClaim], slices: list[o.ResourceSlice], **kwargs: Any) -> AllocationRequest:
    inventory = Inventory(classes=(device_class(),), slices=tuple(slices))
    return AllocationRequest(claims=tuple(claims), node=node(), inventory=inventory, gates=ALL, allocator="backtracking", **kwargs)


def _devices(result: o.AllocationResult) -> list[str]:
    assert result.devices is not None
    return [f"{r.request}={r.device}" for r in result.devices.results or []]


def _numa(name: str, value: int) -> dict[str, Any]:
    return device(name, attributes={"numa": {"int": value}})


def test_first_fit_and_steps() -> None:
    slices = [slice_("s1", devices=[device("d1"), device("d2"), device("d3")])]
    outcome = allocate_backtracking(_request([claim("c", request(count=2))], slices), cel=cel_environment(ALL))
    assert outcome.allocated
    assert _devices(outcome.results[0]) == ["req-0=d1", "req-0=d2"]
    # claim start, two devices, end of request, end of claim -> 5 invocations
    assert outcome.stats.steps == 5
    assert outcome.stats.status == "FOUND"


def test_first_available_falls_back_and_scores() -> None:
    slices = [slice_("s1", devices=[device("d1")])]
    c = claim("c", first_available("req", sub("two", count=2), sub("one")))
    outcome = allocate_backtracking(_request([c], slices), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req/one=d1"]
    assert outcome.score == 7


def test_exhausted_is_not_an_error() -> None:
    outcome = allocate_backtracking(_request([claim("c", request(count=2))], [slice_("s1")]), cel=cel_environment(ALL))
    assert not outcome.allocated
    assert outcome.stats.status == "EXHAUSTED"


def test_invalid_pool_without_solution_is_a_node_local_error() -> None:
    slices = [slice_("s1", count=2, devices=[device("d")]), slice_("s2", count=2, devices=[device("d")])]
    with pytest.raises(AllocationError, match="invalid resource pools were encountered") as caught:
        allocate_backtracking(_request([claim("c", request())], slices), cel=cel_environment(ALL))
    assert getattr(caught.value, "node_local", False)


def test_distinct_attribute_quirk_within_one_request() -> None:
    # Upstream remembers one value per request name, so the third device is only compared with
    # the second one and numa=0 appears twice. The documented semantics forbid this; the
    # backtracking port reproduces upstream, the CP-SAT allocator follows the documentation.
    slices = [slice_("s1", devices=[_numa("a", 0), _numa("b", 1), _numa("c", 0)])]
    c = claim("c", request(count=3), constraints=[{"distinctAttribute": "driver-a/numa"}])
    outcome = allocate_backtracking(_request([c], slices), cel=cel_environment(ALL))
    assert outcome.allocated
    assert _devices(outcome.results[0]) == ["req-0=a", "req-0=b", "req-0=c"]


def test_match_attribute_backtracks() -> None:
    slices = [slice_("s1", devices=[_numa("a", 0), _numa("b", 1), _numa("c", 1)])]
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}])
    outcome = allocate_backtracking(_request([c], slices), cel=cel_environment(ALL))
    assert _devices(outcome.results[0]) == ["req-0=b", "req-0=c"]


def test_deadline_raises_solve_timeout_with_stats() -> None:
    # 20 devices, 5 + 16 wanted: every combination for the first request is tried in vain.
    slices = [slice_("s1", devices=[device(f"d{i}") for i in range(20)])]
    c = claim("c", request("a", count=5), request("b", count=16))

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
