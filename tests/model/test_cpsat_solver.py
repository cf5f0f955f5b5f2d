"""CP-SAT allocator: taints, binding conditions, node selection, upstream's error semantics,
determinism, solver parameters, time limits, policies and symmetry."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import allocate, allocate_cpsat
from dra_solver.model import objects as o
from dra_solver.model.cpsat.model import AllocationModel
from dra_solver.model.cpsat.problem import prepare_problem
from dra_solver.model.errors import AllocationError, InvalidInput, NodeLocalError, SolveTimeout
from dra_solver.model.features import FeatureGates
from tests.builders import claim, first_available, request, sub
from tests.model.alloc_builders import device, slice_, taint_rule
from tests.model.cpsat_helpers import CEL, devices, make_request, solve, solve_both

NO_SCHEDULE = {"key": "k", "value": "v", "effect": "NoSchedule"}


def _two(first: dict[str, Any] | None = None) -> list[o.ResourceSlice]:
    return [slice_("s1", devices=[first or device("d0"), device("d1")])]


# --- taints -----------------------------------------------------------------------------------


def test_untolerated_taints_block_and_tolerated_ones_do_not() -> None:
    tainted = _two(device("d0", taints=[NO_SCHEDULE]))
    assert devices(solve_both(make_request([claim("c", request()).decode()], tainted))) == ["req-0=d1"]
    tolerant = claim("c", request(tolerations=[{"key": "k", "operator": "Exists"}])).decode()
    outcome = solve_both(make_request([tolerant], tainted))
    assert devices(outcome) == ["req-0=d0"]
    result = outcome.results[0].devices
    assert result is not None and result.results is not None
    assert result.results[0].tolerations is not None


def test_effect_none_is_ignored_and_the_gate_turns_taints_off() -> None:
    soft = _two(device("d0", taints=[{**NO_SCHEDULE, "effect": "None"}]))
    assert devices(solve(make_request([claim("c", request()).decode()], soft))) == ["req-0=d0"]
    hard = _two(device("d0", taints=[NO_SCHEDULE]))
    off = FeatureGates(device_taints=False)
    assert devices(solve(make_request([claim("c", request()).decode()], hard, gates=off))) == ["req-0=d0"]


def test_device_taint_rules_taint_devices() -> None:
    rule = taint_rule("r", effect="NoExecute", device="d0")
    outcome = solve_both(make_request([claim("c", request(count=2)).decode()], _two(), rules=(rule,)))
    assert not outcome.allocated


# --- binding conditions and node selection ----------------------------------------------------


def test_binding_conditions_are_copied_and_need_their_gate() -> None:
    bound = _two(device("d0", bindingConditions=["ready"], bindingFailureConditions=["failed"]))
    outcome = solve(make_request([claim("c", request(count=2)).decode()], bound))
    items = outcome.results[0].devices.results  # type: ignore[union-attr]
    assert items is not None and items[0].binding_conditions == ["ready"]
    off = FeatureGates(device_binding_and_status=False)
    assert not solve(make_request([claim("c", request(count=2)).decode()], bound, gates=off)).allocated


def test_node_selector_of_network_attached_devices() -> None:
    labelled = slice_(
        "net",
        node_name=None,
        nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
        devices=[device("n0")],
    )
    req = make_request([claim("c", request()).decode()], [labelled])
    assert not solve(req).allocated  # node-1 has no zone label
    everywhere = slice_("net", node_name=None, allNodes=True, devices=[device("n0")])
    outcome = solve(make_request([claim("c", request()).decode()], [everywhere]))
    assert outcome.results[0].node_selector is None


# --- upstream's error semantics ---------------------------------------------------------------


_NEEDS_N = [{"cel": {"expression": "device.attributes['driver-a'].n == 1"}}]


def test_selector_error_on_a_device_upstream_never_reaches_is_not_an_error() -> None:
    slices = _two(device("d0", attributes={"n": {"int": 1}}))  # d1 lacks "n"
    outcome = solve(make_request([claim("c", request(selectors=_NEEDS_N)).decode()], slices))
    assert devices(outcome) == ["req-0=d0"]


def test_selector_error_on_a_device_upstream_reaches_is_its_error() -> None:
    slices = [slice_("s1", devices=[device("d0"), device("d1", attributes={"n": {"int": 1}})])]
    with pytest.raises(AllocationError, match=r"claim default/c: selector #0 on device driver-a/pool-1/d0: CEL runtime error: no such key: n"):
        solve(make_request([claim("c", request(selectors=_NEEDS_N)).decode()], slices))


def test_unknown_class_is_an_error() -> None:
    with pytest.raises(AllocationError, match="could not retrieve device class nope"):
        solve(make_request([claim("c", request(cls="nope")).decode()], _two()))


def test_invalid_pool_without_a_solution_is_a_node_local_error() -> None:
    broken = slice_("s1", devices=[device("d0"), device("d0")])
    with pytest.raises(AllocationError, match="invalid resource pools were encountered") as caught:
        solve(make_request([claim("c", request()).decode()], [broken]))
    assert isinstance(caught.value, NodeLocalError)
    other = slice_("s2", pool="pool-2", devices=[device("ok")])
    assert solve(make_request([claim("c", request()).decode()], [broken, other])).allocated


# --- solver settings, determinism, time --------------------------------------------------------


def _scored() -> Any:
    c = claim("c", first_available("r", sub("many", count=3), sub("one"))).decode()
    return make_request([c], _two())


def test_parameters_are_recorded_and_answers_repeat() -> None:
    first = solve(_scored())
    again = solve(_scored())
    assert [r.to_api() for r in first.results] == [r.to_api() for r in again.results]
    params = first.stats.parameters
    assert params["num_workers"] == "1" and params["random_seed"] == "0"
    assert first.stats.status == "OPTIMAL" and first.stats.gap == 0.0
    assert first.stats.variables > 0 and first.stats.constraints > 0


def test_fast_path_is_reported_as_trivial() -> None:
    outcome = allocate_cpsat(make_request([claim("c", request()).decode()], _two()), cel=CEL)
    assert outcome.stats.status == "TRIVIAL"


def test_no_time_left_is_a_timeout() -> None:
    req = make_request([claim("c", first_available("r", sub("a"), sub("b"))).decode()], _two(), time_limit=0.0)
    with pytest.raises(SolveTimeout):
        allocate_cpsat(req, cel=CEL)


def test_unknown_policy_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="policy"):
        solve(make_request([claim("c", request()).decode()], _two(), policy="fastest"))


def test_front_door_validates_and_dispatches() -> None:
    req = make_request([claim("c", request()).decode()], _two())
    assert allocate(req, cel=CEL).stats.allocator == "cpsat"
    from dataclasses import replace

    assert allocate(replace(req, allocator="backtracking"), cel=CEL).stats.allocator == "backtracking"
    bad = make_request([claim("c", request(count=0)).decode()], _two())
    with pytest.raises(Exception, match="must be greater than zero"):
        allocate(bad, cel=CEL)


# --- symmetry ---------------------------------------------------------------------------------


def test_identical_devices_are_used_in_order() -> None:
    slices = [slice_("s1", devices=[device(f"gpu-{i}") for i in range(8)])]
    c = claim("c", first_available("r", sub("nine", count=9), sub("four", count=4))).decode()
    req = make_request([c], slices, policy="score")
    built = AllocationModel(prepare_problem(req, cel=CEL), policy="score")
    # 7 ordering constraints chain the 8 identical GPUs.
    linear2 = sum(1 for ct in built.model.proto.constraints if ct.has_linear() and len(ct.linear.vars) == 2)
    assert linear2 >= 7
    assert devices(solve(req)) == [f"r/four=gpu-{i}" for i in range(4)]
