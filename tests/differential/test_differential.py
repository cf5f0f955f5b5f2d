"""Differential properties between the CP-SAT and the backtracking allocator.

On every generated input both must reach the same verdict (allocated / unsatisfiable /
error), every result must pass the independent validator, CP-SAT's FirstAvailable score can
never be lower than first-fit's, and the same input twice gives the same output. The last
test shows the harness has teeth: an allocator that returns a wrong device is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given

from dra_solver.model import allocate
from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.check import check_allocation
from dra_solver.model.errors import AllocationError
from tests.differential.strategies import Scenario, scenarios

Allocator = Callable[[AllocationRequest, CelEnvironment], AllocationOutcome]


def _verdict(run: Allocator, request: AllocationRequest, cel: CelEnvironment) -> tuple[str, AllocationOutcome | None]:
    try:
        outcome = run(request, cel)
    except AllocationError:
        return "error", None
    return ("allocated" if outcome.allocated else "unsatisfiable"), outcome


def _real(request: AllocationRequest, cel: CelEnvironment) -> AllocationOutcome:
    return allocate(request, cel=cel)


def check_valid(request: AllocationRequest, outcome: AllocationOutcome | None, cel: CelEnvironment) -> None:
    if outcome is not None and outcome.allocated:
        violations = check_allocation(request, list(outcome.results), cel=cel)
        assert not violations, f"{outcome.stats.allocator}: {violations}"


def check_properties(scenario: Scenario, cpsat: Allocator = _real) -> None:
    cel = CelEnvironment()
    bt_request = scenario.request("backtracking")
    cp_request = scenario.request("cpsat")
    bt_verdict, bt = _verdict(_real, bt_request, cel)
    cp_verdict, cp = _verdict(cpsat, cp_request, cel)
    check_valid(bt_request, bt, cel)
    check_valid(cp_request, cp, cel)
    assert cp_verdict == bt_verdict, f"verdicts differ: cpsat={cp_verdict} backtracking={bt_verdict}"
    if bt is not None and cp is not None and bt.allocated:
        assert cp.score >= bt.score, f"cpsat score {cp.score} < backtracking score {bt.score}"
    again = _verdict(cpsat, cp_request, cel)[1]
    if cp is not None and again is not None:
        assert [r.to_api() for r in again.results] == [r.to_api() for r in cp.results]


@given(scenarios())
def test_allocators_agree(scenario: Scenario) -> None:
    check_properties(scenario)


def _wrong_device(request: AllocationRequest, cel: CelEnvironment) -> AllocationOutcome:
    """CP-SAT, then every claim's first device swapped for one that does not exist."""
    outcome = allocate(request, cel=cel)
    if not outcome.allocated:
        return outcome
    broken: list[o.AllocationResult] = []
    for result in outcome.results:
        devices = result.devices
        if devices and devices.results:
            first = devices.results[0]
            swapped = [first.model_copy(update={"device": "does-not-exist"}), *devices.results[1:]]
            result = result.model_copy(update={"devices": devices.model_copy(update={"results": swapped})})
        broken.append(result)
    return replace(outcome, results=tuple(broken))


def test_a_wrong_allocator_is_caught() -> None:
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import given as given_

    @settings(max_examples=100, suppress_health_check=list(HealthCheck), database=None,
              report_multiple_bugs=False, phases=[Phase.generate])
    @given_(scenarios())
    def run(scenario: Scenario) -> None:
        cel = CelEnvironment()
        request = scenario.request("cpsat")
        check_valid(request, _verdict(_wrong_device, request, cel)[1], cel)

    with pytest.raises(AssertionError, match="does-not-exist"):
        run()
