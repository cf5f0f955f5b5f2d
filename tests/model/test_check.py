"""The reference checker: valid allocations pass, and each rule catches a result broken on
purpose (a copy of a valid answer with one thing changed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dra_solver.model import allocate_cpsat
from dra_solver.model import objects as o
from dra_solver.model.allocation import (
    AllocatedState,
    AllocationOutcome,
    AllocationRequest,
    DeviceID,
    Inventory,
    SolveStats,
)
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.check import (
    InvalidAllocation,
    PoolCache,
    Violation,
    assert_valid,
    check_allocation,
)
from dra_solver.model.features import FeatureGates
from tests.builders import DRIVER_A, DRIVER_B, claim, first_available, request, sub
from tests.model.alloc_builders import device, device_class, node, slice_

CEL = CelEnvironment()
Item = o.DeviceRequestAllocationResult


def _request(
    claims: list[o.ResourceClaim],
    slices: list[o.ResourceSlice],
    *,
    classes: tuple[o.DeviceClass, ...] = (),
    allocated: AllocatedState | None = None,
    gates: FeatureGates | None = None,
    rules: tuple[o.DeviceTaintRule, ...] = (),
) -> AllocationRequest:
    inventory = Inventory(
        classes=classes or (device_class(), device_class("class-b", DRIVER_B)),
        slices=tuple(slices),
        taint_rules=rules,
        extra_allocated=allocated or AllocatedState(),
    )
    return AllocationRequest(
        claims=tuple(claims), node=node(), inventory=inventory, gates=gates or FeatureGates()
    )


def _solve(req: AllocationRequest) -> list[o.AllocationResult]:
    outcome = allocate_cpsat(req, cel=CEL, fast_path=False)
    assert outcome.allocated, outcome.reason
    assert check_allocation(req, outcome, cel=CEL) == []
    return [r.model_copy(deep=True) for r in outcome.results]


def _items(result: o.AllocationResult) -> list[Item]:
    assert result.devices is not None and result.devices.results is not None
    return result.devices.results


def _rules(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


def _broken(
    req: AllocationRequest, change: Callable[[list[o.AllocationResult]], object]
) -> set[str]:
    results = _solve(req)
    change(results)
    return _rules(check_allocation(req, results, cel=CEL))


def _four() -> list[o.ResourceSlice]:
    return [slice_("s1", devices=[device(f"d{i}") for i in range(4)])]


# --- the happy path and the API ---------------------------------------------------------------


def test_valid_allocation_passes_and_assert_valid_is_quiet() -> None:
    req = _request([claim("c", request(count=2)).decode(), claim("d", request()).decode()], _four())
    results = _solve(req)
    assert_valid(req, results, cel=CEL)


def test_a_pool_cache_shared_across_checks_never_answers_for_other_objects() -> None:
    pools = PoolCache(size=1)
    req = _request([claim("c", request(count=2)).decode()], _four())
    results = _solve(req)
    assert check_allocation(req, results, cel=CEL, pools=pools) == []
    assert check_allocation(req, results, cel=CEL, pools=pools) == []  # from the cache
    # The same results against other slices (d0, d1 gone): the cached pools must not answer.
    other = _request([claim("c", request(count=2)).decode()], [slice_("s1", devices=[device("d2"), device("d3")])])
    fresh = check_allocation(other, results, cel=CEL)
    assert fresh
    assert check_allocation(other, results, cel=CEL, pools=pools) == fresh
    assert check_allocation(req, results, cel=CEL, pools=pools) == []  # evicted (size 1), gathered again


def test_a_pool_cache_keeps_each_devices_cel_form_for_that_device_only() -> None:
    """The CEL form of a device is kept by the device object (shared by identical nodes) and
    answers for it alone: verdicts with the cache equal verdicts without, a wrong device still
    fails its selector, and a device CEL cannot read says why every time."""
    a100 = {"cel": {"expression": f"device.attributes['{DRIVER_A}'].model == 'a100'"}}
    slices = [slice_("s1", devices=[
        device("d0", attributes={"model": {"string": "a100"}}),
        device("d1", attributes={"model": {"string": "h100"}}),
        device("d2", attributes={"model": {}}),
    ])]
    req = _request([claim("c", request(selectors=[a100])).decode()], slices)
    results = _solve(req)
    assert [i.device for i in _items(results[0])] == ["d0"]
    pools = PoolCache()
    for _ in range(2):
        assert check_allocation(req, results, cel=CEL, pools=pools) == []
    for wrong in ("d1", "d2"):
        broken = [r.model_copy(deep=True) for r in results]
        _items(broken[0])[0].device = wrong
        alone = check_allocation(req, broken, cel=CEL)
        assert _rules(alone) == {"selector"}
        for _ in range(2):
            assert check_allocation(req, broken, cel=CEL, pools=pools) == alone
    assert "attribute model has no value" in str(check_allocation(req, broken, cel=CEL, pools=pools))


def test_outcome_not_allocated_is_trivially_valid() -> None:
    req = _request([claim("c", request(count=9)).decode()], _four())
    outcome = AllocationOutcome(False, (), 0, SolveStats("test", "INFEASIBLE", 0.0))
    assert check_allocation(req, outcome, cel=CEL) == []


def test_assert_valid_raises_with_every_violation() -> None:
    req = _request([claim("c", request(count=2)).decode()], _four())
    results = _solve(req)
    _items(results[0])[1].device = "d0"
    _items(results[0])[0].device = "d0"
    with pytest.raises(InvalidAllocation) as caught:
        assert_valid(req, results, cel=CEL)
    assert caught.value.violations
    assert "claim default/c" in str(caught.value)


def test_wrong_number_of_results() -> None:
    req = _request([claim("c", request()).decode(), claim("d", request()).decode()], _four())
    results = _solve(req)
    assert _rules(check_allocation(req, results[:1], cel=CEL)) == {"shape"}


def test_outcome_score_must_match_the_results() -> None:
    c = claim("c", first_available("r", sub("a", count=9), sub("b"))).decode()
    req = _request([c], _four())
    results = _solve(req)
    lying = AllocationOutcome(True, tuple(results), 8, SolveStats("test", "GIVEN", 0.0))
    assert _rules(check_allocation(req, lying, cel=CEL)) == {"score"}


# --- devices and pools ------------------------------------------------------------------------


def test_unknown_device() -> None:
    req = _request([claim("c", request()).decode()], _four())
    assert "device" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "device", "nope"))


def test_device_of_another_node() -> None:
    slices = [*_four(), slice_("far", pool="pool-2", node_name="node-2", devices=[device("x")])]
    req = _request([claim("c", request()).decode()], slices)

    def move(rs: list[o.AllocationResult]) -> None:
        _items(rs[0])[0].pool = "pool-2"
        _items(rs[0])[0].device = "x"

    assert "device" in _broken(req, move)


def test_device_of_an_incomplete_pool() -> None:
    slices = [*_four(), slice_("half", pool="pool-2", count=2, devices=[device("x")])]
    req = _request([claim("c", request()).decode()], slices)

    def move(rs: list[o.AllocationResult]) -> None:
        _items(rs[0])[0].pool = "pool-2"
        _items(rs[0])[0].device = "x"

    assert "device" in _broken(req, move)


def test_device_of_an_obsolete_generation() -> None:
    slices = [
        slice_("new", devices=[device("d0")], generation=2),
        slice_("old", devices=[device("d0"), device("gone")], generation=1),
    ]
    req = _request([claim("c", request()).decode()], slices)
    assert "device" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "device", "gone"))


def test_unknown_request_name() -> None:
    req = _request([claim("c", request()).decode()], _four())
    assert "request" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "request", "other"))


# --- selectors, counts, firstAvailable --------------------------------------------------------


def test_device_not_selected_by_the_class() -> None:
    slices = [*_four(), slice_("b", pool="pool-b", driver=DRIVER_B, devices=[device("b0")])]
    req = _request([claim("c", request()).decode()], slices)

    def swap(rs: list[o.AllocationResult]) -> None:
        item = _items(rs[0])[0]
        item.driver, item.pool, item.device = DRIVER_B, "pool-b", "b0"

    assert "selector" in _broken(req, swap)


def test_device_not_selected_by_the_request() -> None:
    slices = [slice_("s1", devices=[device("d0", attributes={"n": {"int": 1}}), device("d1")])]
    selector = [{"cel": {"expression": "device.attributes['driver-a'].n == 1"}}]
    req = _request([claim("c", request(selectors=selector)).decode()], slices)
    assert "selector" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "device", "d1"))


def test_selector_runtime_error_on_the_chosen_device() -> None:
    slices = [slice_("s1", devices=[device("d0", attributes={"n": {"int": 1}}), device("d1")])]
    selector = [{"cel": {"expression": "device.attributes['driver-a'].n == 1"}}]
    req = _request([claim("c", request(selectors=selector)).decode()], slices)
    results = _solve(req)
    _items(results[0])[0].device = "d1"
    messages = [str(v) for v in check_allocation(req, results, cel=CEL)]
    assert any("CEL runtime error" in m for m in messages)


def test_exact_count_too_few_and_too_many() -> None:
    req = _request([claim("c", request(count=2)).decode()], _four())
    assert "count" in _broken(req, lambda rs: _items(rs[0]).pop())

    def extra(rs: list[o.AllocationResult]) -> None:
        _items(rs[0]).append(Item(request="req-0", driver=DRIVER_A, pool="pool-1", device="d3"))

    assert "count" in _broken(req, extra)


def test_all_mode_needs_every_matching_device() -> None:
    req = _request([claim("c", request(allocationMode="All")).decode()], _four())
    assert "count" in _broken(req, lambda rs: _items(rs[0]).pop())


def test_first_available_uses_exactly_one_subrequest() -> None:
    c = claim("c", first_available("r", sub("a"), sub("b"))).decode()
    req = _request([c], _four())

    def both(rs: list[o.AllocationResult]) -> None:
        _items(rs[0]).append(Item(request="r/b", driver=DRIVER_A, pool="pool-1", device="d3"))

    assert "first-available" in _broken(req, both)
    assert "first-available" in _broken(req, lambda rs: _items(rs[0]).clear())


def test_subrequests_with_prioritized_list_off() -> None:
    c = claim("c", first_available("r", sub("a"))).decode()
    req = _request([c], _four())
    results = _solve(req)
    off = _request([c], _four(), gates=FeatureGates(prioritized_list=False))
    assert "gate" in _rules(check_allocation(off, results, cel=CEL))


def test_result_limit_of_32_devices() -> None:
    slices = [slice_(f"s{j}", pool=f"p{j}", devices=[device(f"d{i}") for i in range(20)]) for j in range(2)]
    req = _request([claim("c", request("a", count=20), request("b", count=12)).decode()], slices)

    def more(rs: list[o.AllocationResult]) -> None:
        used = {(i.pool, i.device) for i in _items(rs[0])}
        free = [(p, d) for p in ("p0", "p1") for d in (f"d{i}" for i in range(20)) if (p, d) not in used]
        p, d = free[0]
        _items(rs[0]).append(Item(request="b", driver=DRIVER_A, pool=p, device=d))

    assert "limit" in _broken(req, more)


# --- exclusive use and sharing ----------------------------------------------------------------


def test_device_given_to_two_claims() -> None:
    req = _request([claim("c", request()).decode(), claim("d", request()).decode()], _four())

    def same(rs: list[o.AllocationResult]) -> None:
        _items(rs[1])[0].device = _items(rs[0])[0].device

    assert "exclusive" in _broken(req, same)


def test_device_already_allocated() -> None:
    taken = AllocatedState(devices=frozenset({DeviceID(DRIVER_A, "pool-1", "d0")}))
    req = _request([claim("c", request()).decode()], _four(), allocated=taken)
    assert "exclusive" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "device", "d0"))


def test_admin_access_may_share_across_claims_but_not_within_one() -> None:
    admin = claim("a", request(adminAccess=True)).decode()
    req = _request([claim("c", request()).decode(), admin], [slice_("s1", devices=[device("d0")])])
    _solve(req)  # the admin claim gets the same device: valid
    two = claim("a", request("x", adminAccess=True), request("y", adminAccess=True)).decode()
    req = _request([two], [slice_("s1", devices=[device("d0"), device("d1")])])
    assert "exclusive" in _broken(req, lambda rs: setattr(_items(rs[0])[1], "device", _items(rs[0])[0].device))


def test_admin_access_flag_must_follow_the_request() -> None:
    req = _request([claim("c", request()).decode()], _four())
    assert "admin-access" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "admin_access", True))


def _shareable(**capacity: Any) -> list[o.ResourceSlice]:
    return [
        slice_(
            "s1",
            devices=[device("d0", allowMultipleAllocations=True, capacity=capacity)],
        )
    ]


def test_shares_need_distinct_share_ids() -> None:
    cap = {"mem": {"value": "8Gi"}}
    req = _request(
        [claim("c", request(capacity={"requests": {"mem": "2Gi"}})).decode(), claim("d", request(capacity={"requests": {"mem": "2Gi"}})).decode()],
        _shareable(**cap),
    )

    def same_id(rs: list[o.AllocationResult]) -> None:
        _items(rs[1])[0].share_id = _items(rs[0])[0].share_id

    assert "exclusive" in _broken(req, same_id)
    assert "exclusive" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "share_id", None))


def test_consumed_capacity_must_be_the_rounded_request() -> None:
    cap = {"mem": {"value": "8Gi", "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}
    req = _request([claim("c", request(capacity={"requests": {"mem": "1500Mi"}})).decode()], _shareable(**cap))
    results = _solve(req)
    assert _items(results[0])[0].consumed_capacity == {"mem": "2Gi"}
    assert "capacity" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "consumed_capacity", {"mem": "1500Mi"}))


def test_shares_over_capacity() -> None:
    cap = {"mem": {"value": "4Gi"}}
    claims = [claim(f"c{i}", request(capacity={"requests": {"mem": "2Gi"}})).decode() for i in range(2)]
    req = _request(claims, _shareable(**cap))
    results = _solve(req)
    taken = AllocatedState(capacity={DeviceID(DRIVER_A, "pool-1", "d0"): {"mem": _q("1Gi")}})
    fuller = _request(claims, _shareable(**cap), allocated=taken)
    assert "capacity" in _rules(check_allocation(fuller, results, cel=CEL))


def _q(text: str) -> Any:
    from dra_solver.model.quantity import parse_quantity

    return parse_quantity(text)


# --- shared counters --------------------------------------------------------------------------


def _partitions() -> list[o.ResourceSlice]:
    """Three partitions of 2 on a counter of 4: any two fit, three do not."""
    from dra_solver.model.decode import decode_object

    counters = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "counters"},
            "spec": {
                "driver": DRIVER_A,
                "nodeName": "node-1",
                "pool": {"name": "pool-1", "generation": 1, "resourceSliceCount": 2},
                "sharedCounters": [{"name": "gpu-0", "counters": {"mem": {"value": "4"}}}],
            },
        }
    )
    assert isinstance(counters, o.ResourceSlice)
    parts = [
        device(f"p{i}", consumesCounters=[{"counterSet": "gpu-0", "counters": {"mem": {"value": "2"}}}])
        for i in range(3)
    ]
    return [counters, slice_("parts", count=2, devices=parts)]


def test_counters_exceeded() -> None:
    slices = _partitions()
    two = _solve(_request([claim("c", request()).decode(), claim("d", request()).decode()], slices))
    used = {_items(r)[0].device for r in two}
    third = o.AllocationResult.model_validate(two[0].to_api())
    _items(third)[0].device = ({"p0", "p1", "p2"} - used).pop()
    req = _request([claim("c", request()).decode(), claim("d", request()).decode(), claim("e", request()).decode()], slices)
    assert _rules(check_allocation(req, [*two, third], cel=CEL)) == {"counters"}
    # The same two are too many when one partition was allocated before.
    before = AllocatedState(devices=frozenset({DeviceID(DRIVER_A, "pool-1", third.devices.results[0].device)}))  # type: ignore[union-attr,index]
    req = _request([claim("c", request()).decode(), claim("d", request()).decode()], slices, allocated=before)
    assert "counters" in _rules(check_allocation(req, two, cel=CEL))
    # Devices in use elsewhere (more than the pool has) do not hide the one that counts here,
    # and are not counted here.
    elsewhere = frozenset(DeviceID(DRIVER_A, "pool-2", f"x{i}") for i in range(5))
    req = _request([claim("c", request()).decode(), claim("d", request()).decode()], slices, allocated=AllocatedState(devices=before.devices | elsewhere))
    assert "counters" in _rules(check_allocation(req, two, cel=CEL))
    req = _request([claim("c", request()).decode(), claim("d", request()).decode()], slices, allocated=AllocatedState(devices=elsewhere))
    assert "counters" not in _rules(check_allocation(req, two, cel=CEL))


# --- constraints ------------------------------------------------------------------------------


def _numa(name: str, value: int) -> dict[str, Any]:
    return device(name, attributes={"numa": {"int": value}})


def test_match_attribute_values_differ() -> None:
    slices = [slice_("s1", devices=[_numa("a0", 0), _numa("a1", 0), _numa("b0", 1)])]
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}]).decode()
    req = _request([c], slices)
    assert "constraint" in _broken(req, lambda rs: setattr(_items(rs[0])[1], "device", "b0"))


def test_distinct_attribute_inside_one_request() -> None:
    """Documented semantics: distinct across all devices, also within one request."""
    slices = [slice_("s1", devices=[_numa("a0", 0), _numa("a1", 0), _numa("b0", 1)])]
    c = claim("c", request(count=2), constraints=[{"distinctAttribute": "driver-a/numa"}]).decode()
    req = _request([c], slices)
    results = _solve(req)
    assert sorted(i.device for i in _items(results[0])) in (["a0", "b0"], ["a1", "b0"])

    def dup(rs: list[o.AllocationResult]) -> None:
        _items(rs[0])[0].device, _items(rs[0])[1].device = "a0", "a1"

    assert "constraint" in _broken(req, dup)


def test_list_attributes_need_a_common_value() -> None:
    slices = [
        slice_(
            "s1",
            devices=[
                device("x", attributes={"roots": {"strings": ["r1", "r2"]}}),
                device("y", attributes={"roots": {"strings": ["r2", "r3"]}}),
                device("z", attributes={"roots": {"strings": ["r4"]}}),
            ],
        )
    ]
    c = claim("c", request(count=2), constraints=[{"matchAttribute": "driver-a/roots"}]).decode()
    req = _request([c], slices)
    results = _solve(req)
    assert sorted(i.device for i in _items(results[0])) == ["x", "y"]
    assert "constraint" in _broken(req, lambda rs: setattr(_items(rs[0])[1], "device", "z"))


# --- taints, binding conditions, node selector, config ----------------------------------------


def test_untolerated_taint_and_copied_tolerations() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    slices = [slice_("s1", devices=[device("bad", taints=[taint]), device("ok")])]
    req = _request([claim("c", request()).decode()], slices)
    assert "taint" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "device", "bad"))
    tolerant = claim("c", request(tolerations=[{"key": "k", "operator": "Exists"}])).decode()
    req = _request([tolerant], slices)
    assert "taint" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "tolerations", None))


def test_taint_rules_reach_the_check_and_a_rule_without_selector_taints_nothing() -> None:
    from tests.model.alloc_builders import taint_rule

    slices = [slice_("s1", devices=[device("bad"), device("ok")])]
    rule = taint_rule("broken", device="bad")
    req = _request([claim("c", request()).decode()], slices, rules=(rule,))
    assert "taint" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "device", "bad"))
    no_selector = rule.model_copy(update={"spec": rule.spec.model_copy(update={"device_selector": None})})
    req = _request([claim("c", request()).decode()], slices, rules=(no_selector,))
    assert _broken(req, lambda rs: setattr(_items(rs[0])[0], "device", "bad")) == set()


def test_binding_conditions_are_copied() -> None:
    slices = [slice_("s1", devices=[device("d0", bindingConditions=["ready"], bindingFailureConditions=["failed"])])]
    req = _request([claim("c", request()).decode()], slices)
    results = _solve(req)
    assert _items(results[0])[0].binding_conditions == ["ready"]
    assert "binding" in _broken(req, lambda rs: setattr(_items(rs[0])[0], "binding_conditions", None))


def test_node_selector_shape() -> None:
    req = _request([claim("c", request()).decode()], _four())
    assert "node-selector" in _broken(req, lambda rs: setattr(rs[0], "node_selector", None))
    network = [slice_("net", node_name=None, allNodes=True, devices=[device("d0")])]
    req = _request([claim("c", request()).decode()], network)
    results = _solve(req)
    assert results[0].node_selector is None
    wrong = o.NodeSelector.model_validate({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]})
    results[0].node_selector = wrong
    assert "node-selector" in _rules(check_allocation(req, results, cel=CEL))


def test_class_and_claim_config_are_copied() -> None:
    config = [{"opaque": {"driver": DRIVER_A, "parameters": {"a": 1}}}]
    cls = device_class(config=config)
    c = claim("c", request(), config=[{"requests": ["req-0"], "opaque": {"driver": DRIVER_A, "parameters": {"b": 2}}}]).decode()
    req = _request([c], _four(), classes=(cls,))
    results = _solve(req)
    assert results[0].devices is not None and results[0].devices.config is not None
    assert [x.source for x in results[0].devices.config] == ["FromClass", "FromClaim"]

    def drop(rs: list[o.AllocationResult]) -> None:
        assert rs[0].devices is not None and rs[0].devices.config is not None
        rs[0].devices.config.pop(0)

    assert "config" in _broken(req, drop)
