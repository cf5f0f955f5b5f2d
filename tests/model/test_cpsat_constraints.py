"""CP-SAT allocator: matchAttribute and distinctAttribute, scalar and list-type."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model.backtracking import allocate_backtracking
from dra_solver.model.errors import AllocationError
from dra_solver.model.features import FeatureGates
from tests.builders import DRIVER_B, claim, first_available, request, sub
from tests.model.alloc_builders import device, slice_
from tests.model.cpsat_helpers import CEL, devices, make_request, solve, solve_both


def _numa(name: str, value: int, **more: Any) -> dict[str, Any]:
    return device(name, attributes={"numa": {"int": value}, **more})


def _numas(*values: int) -> list:  # type: ignore[type-arg]
    return [slice_("s1", devices=[_numa(f"d{i}", v) for i, v in enumerate(values)])]


def test_match_attribute_within_a_request() -> None:
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    outcome = solve(make_request([c], _numas(0, 1, 1)))
    assert devices(outcome) == ["req-0=d1", "req-0=d2"]
    assert not solve(make_request([c], _numas(0, 1, 2))).allocated


def test_match_attribute_across_drivers_and_requests() -> None:
    root = "resource.kubernetes.io/pcieRoot"
    gpus = slice_("g", devices=[device("g0", attributes={root: {"string": "a"}}), device("g1", attributes={root: {"string": "b"}})])
    nics = slice_("n", pool="nics", driver=DRIVER_B, devices=[device("n0", attributes={root: {"string": "b"}})])
    c = claim(
        "c",
        request("gpu"),
        request("nic", cls="class-b"),
        constraints=[{"requests": ["gpu", "nic"], "matchAttribute": root}],
    ).decode()
    outcome = solve(make_request([c], [gpus, nics]))
    assert devices(outcome) == ["gpu=g1", "nic=n0"]


def test_device_without_the_attribute_is_ineligible_for_the_constraint() -> None:
    slices = [slice_("s1", devices=[device("bare"), _numa("d1", 0)])]
    c = claim("c", request(), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    assert devices(solve(make_request([c], slices))) == ["req-0=d1"]
    unconstrained = claim("c", request("other"), request("req-0"), constraints=[{"requests": ["req-0"], "matchAttribute": "driver-a/numa"}]).decode()
    assert devices(solve(make_request([unconstrained], slices))) == ["other=bare", "req-0=d1"]


def test_bare_attribute_names_belong_to_the_driver_domain() -> None:
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    other_domain = claim("c", request(count=2), constraints=[{"matchAttribute": "example.com/numa"}]).decode()
    assert solve(make_request([c], _numas(1, 1))).allocated
    assert not solve(make_request([other_domain], _numas(1, 1))).allocated


def test_match_attribute_types_must_agree() -> None:
    slices = [slice_("s1", devices=[device("a", attributes={"v": {"int": 1}}), device("b", attributes={"v": {"string": "1"}})])]
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/v"}]).decode()
    assert not solve(make_request([c], slices)).allocated


def test_list_attributes_need_a_common_element() -> None:
    def dev(name: str, *roots: str) -> dict[str, Any]:
        return device(name, attributes={"roots": {"strings": list(roots)}})

    slices = [slice_("s1", devices=[dev("x", "r1", "r2"), dev("y", "r3"), dev("z", "r2", "r3")])]
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/roots"}]).decode()
    assert sorted(devices(solve(make_request([c], slices)))) == ["req-0=x", "req-0=z"]
    three = claim("c", request(count=3), constraints=[{"matchAttribute": "driver-a/roots"}]).decode()
    assert not solve(make_request([three], slices)).allocated


def test_list_and_scalar_values_mix_with_list_type_attributes() -> None:
    slices = [slice_("s1", devices=[device("x", attributes={"n": {"ints": [1, 2]}}), device("y", attributes={"n": {"int": 2}})])]
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/n"}]).decode()
    assert solve(make_request([c], slices)).allocated
    off = FeatureGates(list_type_attributes=False)
    assert not solve(make_request([c], slices, gates=off)).allocated


def test_distinct_attribute_values_are_all_different() -> None:
    c = claim("c", request(count=2), constraints=[{"distinctAttribute": "driver-a/numa"}]).decode()
    assert devices(solve(make_request([c], _numas(0, 0, 1)))) == ["req-0=d0", "req-0=d2"]
    three = claim("c", request(count=3), constraints=[{"distinctAttribute": "driver-a/numa"}]).decode()
    assert not solve_both(make_request([three], _numas(0, 0, 1))).allocated


def test_distinct_attribute_holds_inside_one_request() -> None:
    """Upstream before v0.37.2 remembered one value per request name and accepted a repeated
    value within a request of count 3; the documented semantics, CP-SAT and upstream v0.37.2
    (which the backtracking port follows) do not."""
    c = claim("c", request(count=3), constraints=[{"distinctAttribute": "driver-a/numa"}]).decode()
    req = make_request([c], _numas(0, 1, 0))
    assert not allocate_backtracking(req, cel=CEL).allocated
    assert not solve(req).allocated


def test_distinct_list_values_must_be_disjoint() -> None:
    slices = [
        slice_(
            "s1",
            devices=[
                device("x", attributes={"n": {"ints": [1, 2]}}),
                device("y", attributes={"n": {"ints": [2, 3]}}),
                device("z", attributes={"n": {"ints": [4]}}),
            ],
        )
    ]
    c = claim("c", request(count=2), constraints=[{"distinctAttribute": "driver-a/n"}]).decode()
    assert devices(solve(make_request([c], slices))) == ["req-0=x", "req-0=z"]


def test_constraint_may_name_a_subrequest() -> None:
    c = claim(
        "c",
        request("a"),
        first_available("b", sub("s", count=1)),
        constraints=[{"requests": ["a", "b/s"], "matchAttribute": "driver-a/numa"}],
    ).decode()
    outcome = solve(make_request([c], _numas(0, 1, 1)))
    assert devices(outcome) == ["a=d1", "b/s=d2"]


def test_all_devices_that_break_their_constraint_are_an_error() -> None:
    c = claim("c", request(allocationMode="All"), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    with pytest.raises(AllocationError, match="cannot add device driver-a/pool-1/d1 because a claim constraint would not be satisfied"):
        solve(make_request([c], _numas(0, 1)))


def test_constraints_with_several_requests_and_claims_are_per_claim() -> None:
    c0 = claim("c0", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    c1 = claim("c1", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    outcome = solve(make_request([c0, c1], _numas(0, 1, 0, 1)))
    assert outcome.allocated
    assert {tuple(devices(outcome, 0)), tuple(devices(outcome, 1))} == {("req-0=d0", "req-0=d2"), ("req-0=d1", "req-0=d3")}
