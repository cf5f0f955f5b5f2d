"""Explain from the allocation model itself (``model.explain``, ``model.cpsat.explain``): one
switch per rule instance, reasons that are irreducible, fixes that are fewest, every rule the
model switches is worded."""

from __future__ import annotations

from dra_solver.model import DeviceID, FeatureGates, explain_node, headline
from dra_solver.model.cpsat.model import AllocationModel
from dra_solver.model.cpsat.problem import Rule, prepare_problem
from dra_solver.model.explain import UNLIFTABLE_KINDS
from tests.builders import DRIVER_A, claim, request
from tests.model.alloc_builders import device, slice_, taint_rule
from tests.model.cpsat_helpers import CEL, consumes, counter_slice, make_request


def _gpus(n: int, **fields: object) -> list[dict[str, object]]:
    return [device(f"d{i}", attributes={"n": {"int": i}}, **fields) for i in range(n)]


def test_the_allocation_model_has_no_switches_and_a_relaxed_one_has_one_per_rule_instance() -> None:
    slices = [slice_("s1", devices=_gpus(4))]
    selector = [{"cel": {"expression": "device.attributes['driver-a'].n >= 2"}}]
    req = make_request(
        [claim("c", request(count=1, selectors=selector)).decode()],
        slices,
        allocated_claims=(claim("holder").request(count=None).allocated("d3").decode(),),
    )
    plain = AllocationModel(prepare_problem(req, cel=CEL))
    assert plain.switches == {} and len(plain.choices) == 1, "only d2 is eligible: no variable for the others"
    relaxed = AllocationModel(prepare_problem(req, cel=CEL, relaxed=True))
    kinds = sorted({rule.kind for rule in relaxed.switches})
    assert kinds == ["in-use", "request", "selector"]
    assert Rule("in-use", (DeviceID(DRIVER_A, "pool-1", "d3"),)) in relaxed.switches
    assert len(relaxed.choices) == 4, "a relaxed problem keeps every pair a rule forbids"


def test_reasons_are_irreducible_and_fixes_fewest() -> None:
    slices = [slice_("s1", devices=_gpus(4))]
    selector = [{"cel": {"expression": "device.attributes['driver-a'].n >= 2"}}]
    req = make_request(
        [claim("c", request(count=2, selectors=selector)).decode()],
        slices,
        allocated_claims=(claim("holder").request(count=None).allocated("d3").decode(),),
    )
    answer = explain_node(req, cel=CEL, holders={DeviceID(DRIVER_A, "pool-1", "d3"): "claim default/holder"})
    assert not answer.allocatable and answer.minimal
    assert [r.kind for r in answer.reasons] == ["request", "selector", "in-use"]
    assert "rejects 2 devices: pool-1/d0, pool-1/d1" in answer.reasons[1].message
    assert answer.reasons[2].message == "device driver-a/pool-1/d3 is in use by claim default/holder"
    # Freeing d3 is one change; relaxing the selector is one too: the tie goes to the rule
    # that sorts first by name ("in-use|..." < "selector|..."), whatever the solver's path.
    assert [r.kind for r in answer.fixes] == ["in-use"]
    assert answer.summary.endswith("It would fit if: driver-a/pool-1/d3 were free.")


def test_taints_counters_and_constraints_are_explained() -> None:
    counters = counter_slice({"gpu-0": {"mem": "4"}})
    devices = [
        device("whole", attributes={"numa": {"int": 0}}, consumesCounters=consumes("gpu-0", mem="4")),
        device("half", attributes={"numa": {"int": 1}}, consumesCounters=consumes("gpu-0", mem="2")),
    ]
    slices = [counters, slice_("s1", devices=devices, count=2)]
    c = claim(
        "c",
        request("a", count=1),
        request("b", count=1),
        constraints=[{"matchAttribute": "driver-a/numa"}],
    ).decode()
    answer = explain_node(make_request([c], slices), cel=CEL, holders={})
    kinds = {r.kind for r in answer.reasons}
    assert not answer.allocatable and "constraint" in kinds, answer
    assert any("matchAttribute driver-a/numa" in r.message for r in answer.reasons)
    tainted = make_request(
        [claim("t", request(count=2)).decode()],
        [slice_("s1", devices=_gpus(2))],
        rules=(taint_rule("r", driver=DRIVER_A, device="d1"),),
        gates=FeatureGates(),
    )
    answer = explain_node(tainted, cel=CEL, holders={})
    assert [r.kind for r in answer.reasons] == ["request", "taint"]
    assert answer.reasons[1].message == "device driver-a/pool-1/d1 has taint k=v:NoSchedule, which the requests do not tolerate"


def test_the_claims_fit_when_the_allocator_allocates() -> None:
    from dra_solver.model import allocate

    req = make_request([claim("c", request(count=1)).decode()], [slice_("s1", devices=_gpus(2))])
    answer = explain_node(req, cel=CEL, holders={}, solve=lambda r: allocate(r, cel=CEL, validate=False))
    assert answer.allocatable and not answer.reasons and answer.summary == "the claims fit on this node"


def test_a_count_above_what_the_node_has_is_proven_to_have_no_fix() -> None:
    # Issue 18: this printed "time ran out" after milliseconds; no fix exists, and that is proven.
    req = make_request([claim("c", request(count=3)).decode()], [slice_("s1", devices=_gpus(2))])
    answer = explain_node(req, cel=CEL, holders={})
    assert not answer.allocatable and answer.minimal and answer.no_fix and answer.limit == ""
    assert [r.message for r in answer.reasons] == [
        "claim default/c, request req-0 needs 3 devices of class class-a (the node has 2 devices)"
    ]
    assert answer.fixes == ()
    assert answer.summary.endswith(" No change makes them fit on this node.")
    assert headline(answer.reasons) == answer.reasons[0].message


def test_a_deadline_gives_sufficient_reasons_and_says_so() -> None:
    slices = [slice_("s1", devices=_gpus(4))]
    selector = [{"cel": {"expression": "device.attributes['driver-a'].n >= 2"}}]
    req = make_request(
        [claim("c", request(count=2, selectors=selector)).decode()],
        slices,
        allocated_claims=(claim("holder").request(count=None).allocated("d3").decode(),),
    )
    ticks = iter(range(0, 10**6, 100))  # every reading of the clock is 100 s later: no time left
    answer = explain_node(req, cel=CEL, holders={}, clock=lambda: float(next(ticks)))
    assert not answer.allocatable and not answer.minimal and answer.limit == "deadline" and not answer.no_fix
    assert {r.kind for r in answer.reasons} == {"request", "selector", "in-use"}, "sufficient, maybe more than needed"


def test_the_headline_is_the_first_reason_a_user_can_lift() -> None:
    slices = [slice_("s1", devices=_gpus(4))]
    selector = [{"cel": {"expression": "device.attributes['driver-a'].n >= 2"}}]
    req = make_request(
        [claim("c", request(count=2, selectors=selector)).decode()],
        slices,
        allocated_claims=(claim("holder").request(count=None).allocated("d3").decode(),),
    )
    answer = explain_node(req, cel=CEL, holders={})
    line = headline(answer.reasons)
    assert line.startswith("claim default/c, request req-0, selector #0 (")
    assert line.endswith("rejects 2 devices: pool-1/d0, pool-1/d1 (and 2 more reasons)")
    assert all((r.kind not in UNLIFTABLE_KINDS) == r.fixable for r in answer.reasons)
