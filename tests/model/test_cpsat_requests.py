"""CP-SAT allocator: variables, counts, All, FirstAvailable, the 32-device limit, the score."""

from __future__ import annotations

import pytest

from dra_solver.model.allocation import DeviceID
from dra_solver.model.backtracking import allocate_backtracking
from dra_solver.model.cpsat.model import AllocationModel
from dra_solver.model.cpsat.problem import prepare_problem
from dra_solver.model.errors import AllocationError
from dra_solver.model.matching import RequestKey
from tests.builders import DRIVER_B, claim, first_available, request, sub
from tests.model.alloc_builders import device, slice_
from tests.model.cpsat_helpers import CEL, devices, make_request, solve, solve_both


def _four() -> list:  # type: ignore[type-arg]
    return [slice_("s1", devices=[device(f"d{i}") for i in range(4)])]


def test_one_variable_per_eligible_pair_and_none_otherwise() -> None:
    slices = [
        slice_(
            "s1",
            devices=[device(f"d{i}", attributes={"n": {"int": i % 2}}) for i in range(4)],
        )
    ]
    selector = [{"cel": {"expression": "device.attributes['driver-a'].n == 1"}}]
    req = make_request([claim("c", request(selectors=selector)).decode()], slices)
    built = AllocationModel(prepare_problem(req, cel=CEL))
    assert len(built.choices) == 2
    key = RequestKey(0, 0)
    assert built.choices.chosen(key, DeviceID("driver-a", "pool-1", "d0")) is None
    assert built.choices.chosen(key, DeviceID("driver-a", "pool-1", "d1")) is not None
    assert devices(solve(req)) == ["req-0=d1"]


def test_exact_count_takes_exactly_count_devices_first_fit() -> None:
    outcome = solve_both(make_request([claim("c", request(count=3)).decode()], _four()))
    assert devices(outcome) == ["req-0=d0", "req-0=d1", "req-0=d2"]


def test_exact_count_above_the_devices_does_not_fit() -> None:
    outcome = solve_both(make_request([claim("c", request(count=5)).decode()], _four()))
    assert not outcome.allocated
    assert outcome.reason.startswith("cannot allocate all claims")
    assert "4 usable devices for a count of 5" in outcome.reason


def test_all_takes_every_matching_device() -> None:
    outcome = solve_both(make_request([claim("c", request(allocationMode="All")).decode()], _four()))
    assert devices(outcome) == [f"req-0=d{i}" for i in range(4)]


def test_all_with_a_device_in_use_does_not_fit_unless_admin_access() -> None:
    held = (claim("old").request(count=None).allocated("d2").decode(),)
    req = make_request([claim("c", request(allocationMode="All")).decode()], _four(), allocated_claims=held)
    assert not solve_both(req).allocated
    admin = claim("c", request(allocationMode="All", adminAccess=True)).decode()
    outcome = solve_both(make_request([admin], _four(), allocated_claims=held))
    assert len(devices(outcome)) == 4


def test_all_over_an_incomplete_pool_is_an_error() -> None:
    slices = [slice_("s1", count=2, devices=[device("d0")])]
    req = make_request([claim("c", request(allocationMode="All")).decode()], slices)
    with pytest.raises(AllocationError, match="asks for all devices, but resource pool driver-a/pool-1 is currently being updated"):
        solve(req)


def test_first_available_takes_the_best_subrequest_that_fits() -> None:
    c = claim("c", first_available("r", sub("two", count=5), sub("one"))).decode()
    outcome = solve(make_request([c], _four()))
    assert devices(outcome) == ["r/one=d0"]
    assert outcome.score == 7


def test_first_available_score_is_optimised_jointly_over_claims() -> None:
    """First-fit gives the contested device to the first claim and settles for 15; the best
    allocation the node allows scores 16."""
    slices = [
        slice_(
            "s1",
            devices=[
                device("special", attributes={"good": {"bool": True}, "special": {"bool": True}}),
                device("plain", attributes={"good": {"bool": True}, "special": {"bool": False}}),
            ],
        )
    ]

    def sel(attr: str) -> list[dict[str, object]]:
        return [{"cel": {"expression": f"device.attributes['driver-a'].{attr}"}}]

    c0 = claim("c0", first_available("r", sub("good", selectors=sel("good")), sub("any"))).decode()
    c1 = claim("c1", first_available("r", sub("special", selectors=sel("special")), sub("any"))).decode()
    req = make_request([c0, c1], slices)
    cp = solve(req)
    bt = allocate_backtracking(req, cel=CEL)
    assert bt.score == 15
    assert cp.score == 16
    assert devices(cp, 0) == ["r/good=plain"] and devices(cp, 1) == ["r/special=special"]


def test_subrequest_classes_can_differ() -> None:
    slices = [*_four(), slice_("b", pool="pool-b", driver=DRIVER_B, devices=[device("b0")])]
    c = claim("c", first_available("r", sub("b", cls="class-b"), sub("a"))).decode()
    outcome = solve(make_request([c], slices))
    assert devices(outcome) == ["r/b=b0"]
    assert outcome.score == 8


def test_claim_limit_of_32_devices_picks_a_smaller_subrequest() -> None:
    slices = [slice_(f"s{j}", pool=f"p{j}", devices=[device(f"d{i}") for i in range(20)]) for j in range(2)]
    c = claim("c", request("a", count=20), first_available("b", sub("many", count=13), sub("few", count=12))).decode()
    outcome = solve(make_request([c], slices))
    assert outcome.allocated
    assert len(devices(outcome)) == 32
    assert outcome.score == 7


def test_claim_limit_exceeded_by_the_minimum_is_an_error() -> None:
    slices = [slice_(f"s{j}", pool=f"p{j}", devices=[device(f"d{i}") for i in range(20)]) for j in range(2)]
    c = claim("c", request("a", count=20), request("b", count=13)).decode()
    with pytest.raises(AllocationError, match="exceeds the claim limit of 32"):
        solve(make_request([c], slices))


def test_several_claims_are_allocated_together() -> None:
    claims = [claim(f"c{i}", request(count=2)).decode() for i in range(2)]
    outcome = solve_both(make_request(claims, _four()))
    used = sorted(devices(outcome, 0) + devices(outcome, 1))
    assert used == [f"req-0=d{i}" for i in range(4)]
    assert not solve_both(make_request([*claims, claim("c2", request()).decode()], _four())).allocated
