"""CP-SAT allocator: exclusive use, adminAccess, shareable devices, shared counters and
consumable capacity."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocatedState, DeviceID
from dra_solver.model.errors import AllocationError
from dra_solver.model.features import FeatureGates
from dra_solver.model.quantity import parse_quantity
from tests.builders import DRIVER_A, claim, request
from tests.model.alloc_builders import device, slice_
from tests.model.cpsat_helpers import (
    consumes,
    counter_slice,
    devices,
    make_request,
    solve,
    solve_both,
)


def _one() -> list[o.ResourceSlice]:
    return [slice_("s1", devices=[device("d0")])]


def _results(outcome: Any, c: int = 0) -> list[o.DeviceRequestAllocationResult]:
    result = outcome.results[c]
    assert result.devices is not None
    return list(result.devices.results or [])


# --- exclusive use and adminAccess ------------------------------------------------------------


def test_a_device_serves_one_claim() -> None:
    assert not solve_both(make_request([claim("a", request()).decode(), claim("b", request()).decode()], _one())).allocated


def test_devices_in_use_are_skipped() -> None:
    slices = [slice_("s1", devices=[device("d0"), device("d1")])]
    held = (claim("old").request(count=None).allocated("d0").decode(),)
    outcome = solve_both(make_request([claim("c", request()).decode()], slices, allocated_claims=held))
    assert devices(outcome) == ["req-0=d1"]


def test_admin_access_takes_devices_in_use() -> None:
    held = (claim("old").request(count=None).allocated("d0").decode(),)
    outcome = solve_both(make_request([claim("c", request(adminAccess=True)).decode()], _one(), allocated_claims=held))
    assert _results(outcome)[0].admin_access is True


def test_admin_access_shares_with_other_claims_but_not_inside_its_claim() -> None:
    assert solve_both(make_request([claim("a", request()).decode(), claim("b", request(adminAccess=True)).decode()], _one())).allocated
    two = claim("a", request("x", adminAccess=True), request("y", adminAccess=True)).decode()
    assert not solve_both(make_request([two], _one())).allocated


def test_admin_access_with_the_gate_off_is_an_error() -> None:
    req = make_request([claim("c", request(adminAccess=True)).decode()], _one(), gates=FeatureGates(admin_access=False))
    with pytest.raises(AllocationError, match="admin access is requested, but the feature is disabled"):
        solve(req)


# --- shareable devices and consumable capacity ------------------------------------------------


def _shareable(**capacity: Any) -> list[o.ResourceSlice]:
    return [slice_("s1", devices=[device("d0", allowMultipleAllocations=True, capacity=capacity)])]


def _wants(amount: str, name: str = "c") -> o.ResourceClaim:
    return claim(name, request(capacity={"requests": {"mem": amount}})).decode()


def test_shareable_device_serves_several_claims_with_own_share_ids() -> None:
    req = make_request([_wants("1Gi", "a"), _wants("1Gi", "b")], _shareable(mem={"value": "4Gi"}))
    outcome = solve_both(req)
    ids = {_results(outcome, 0)[0].share_id, _results(outcome, 1)[0].share_id}
    assert None not in ids and len(ids) == 2
    assert _results(outcome, 0)[0].consumed_capacity == {"mem": "1Gi"}


def test_shareable_device_is_exclusive_without_consumable_capacity() -> None:
    slices = [slice_("s1", devices=[device("d0", allowMultipleAllocations=True)])]
    gates = FeatureGates(consumable_capacity=False)
    assert solve(make_request([claim("a", request()).decode()], slices, gates=gates)).allocated
    assert not solve_both(make_request([claim("a", request()).decode(), claim("b", request()).decode()], slices, gates=gates)).allocated


def test_shares_fit_within_the_capacity() -> None:
    cap = {"mem": {"value": "4Gi"}}
    assert solve_both(make_request([_wants("2Gi", "a"), _wants("2Gi", "b")], _shareable(**cap))).allocated
    three = [_wants("2Gi", n) for n in "abc"]
    assert not solve_both(make_request(three, _shareable(**cap))).allocated


def test_capacity_consumed_before_counts() -> None:
    taken = AllocatedState(
        shared=frozenset({(DeviceID(DRIVER_A, "pool-1", "d0"), "old-share")}),
        capacity={DeviceID(DRIVER_A, "pool-1", "d0"): {"mem": parse_quantity("3Gi")}},
    )
    req = make_request([_wants("2Gi")], _shareable(mem={"value": "4Gi"}), allocated=taken)
    assert not solve_both(req).allocated
    req = make_request([_wants("1Gi")], _shareable(mem={"value": "4Gi"}), allocated=taken)
    assert solve_both(req).allocated


def test_request_policy_rounds_up_and_limits() -> None:
    policy = {"default": "1Gi", "validRange": {"min": "1Gi", "max": "2Gi", "step": "1Gi"}}
    cap = {"mem": {"value": "4Gi", "requestPolicy": policy}}
    outcome = solve(make_request([_wants("1200Mi")], _shareable(**cap)))
    assert _results(outcome)[0].consumed_capacity == {"mem": "2Gi"}
    # Over validRange.max: the device cannot serve the request at all.
    assert not solve(make_request([_wants("3Gi")], _shareable(**cap))).allocated
    # Without a request the default is consumed.
    outcome = solve(make_request([claim("c", request()).decode()], _shareable(**cap)))
    assert _results(outcome)[0].consumed_capacity == {"mem": "1Gi"}


def test_valid_values_round_up() -> None:
    cap = {"mem": {"value": "8Gi", "requestPolicy": {"default": "1Gi", "validValues": ["1Gi", "4Gi"]}}}
    outcome = solve(make_request([_wants("2Gi")], _shareable(**cap)))
    assert _results(outcome)[0].consumed_capacity == {"mem": "4Gi"}
    three = [_wants("2Gi", n) for n in "abc"]
    assert not solve(make_request(three, _shareable(**cap))).allocated


def test_undefined_capacity_makes_a_device_ineligible() -> None:
    req = make_request([claim("c", request(capacity={"requests": {"other": "1"}})).decode()], _shareable(mem={"value": "4Gi"}))
    assert not solve_both(req).allocated


def test_fractional_capacities_stay_exact() -> None:
    cap = {"cpu": {"value": "1"}}
    claims = [claim(n, request(capacity={"requests": {"cpu": "250m"}})).decode() for n in "abcd"]
    assert solve_both(make_request(claims, _shareable(**cap))).allocated
    five = [*claims, claim("e", request(capacity={"requests": {"cpu": "1m"}})).decode()]
    assert not solve_both(make_request(five, _shareable(**cap))).allocated


# --- shared counters --------------------------------------------------------------------------


def _gpu(sets: int = 1) -> list[o.ResourceSlice]:
    """Per GPU: the whole GPU (4 of 4) and three partitions of 2 on the counter set gpu-N."""
    devs = []
    for g in range(sets):
        devs.append(device(f"gpu-{g}", attributes={"kind": {"string": "whole"}}, consumesCounters=consumes(f"gpu-{g}", mem="4")))
        devs += [
            device(f"gpu-{g}-p{i}", attributes={"kind": {"string": "part"}}, consumesCounters=consumes(f"gpu-{g}", mem="2"))
            for i in range(3)
        ]
    return [counter_slice({f"gpu-{g}": {"mem": "4"} for g in range(sets)}), slice_("devs", count=2, devices=devs)]


def _kind(kind: str, count: int = 1, name: str = "req-0", **exactly: Any) -> dict[str, Any]:
    selector = {"cel": {"expression": f"device.attributes['driver-a'].kind == '{kind}'"}}
    return request(name, count=count, selectors=[selector], **exactly)


def test_counters_limit_partitions() -> None:
    assert solve_both(make_request([claim("c", _kind("part", 2)).decode()], _gpu())).allocated
    assert not solve_both(make_request([claim("c", _kind("part", 3)).decode()], _gpu())).allocated
    both = claim("c", _kind("whole", name="w"), _kind("part", name="p")).decode()
    assert not solve_both(make_request([both], _gpu())).allocated


def test_counters_consumed_by_allocated_devices_are_gone() -> None:
    held = (claim("old").request(count=None).allocated("gpu-0-p0").decode(),)
    req = make_request([claim("c", _kind("part", 2)).decode()], _gpu(), allocated_claims=held)
    assert not solve_both(req).allocated
    req = make_request([claim("c", _kind("whole")).decode()], _gpu(), allocated_claims=held)
    assert not solve_both(req).allocated


def test_overdrawn_counters_block_only_their_own_devices() -> None:
    """Allocated before: the whole gpu-0 and a partition (more than its counters hold). Its
    partitions are out; gpu-1's are not (upstream would refuse the whole pool: README quirk)."""
    held = (claim("old").request(count=None).allocated("gpu-0", "gpu-0-p0").decode(),)
    req = make_request([claim("c", _kind("part")).decode()], _gpu(2), allocated_claims=held)
    assert devices(solve_both(req)) == ["req-0=gpu-1-p0"]


def test_admin_access_uses_draw_on_counters_but_not_twice() -> None:
    """adminAccess to free devices takes their counters (as upstream's attempt does); to a
    device already allocated it takes nothing more (upstream counts it again: README quirk)."""
    every = claim("c", request(allocationMode="All", adminAccess=True)).decode()
    assert not solve(make_request([every], _gpu())).allocated  # whole GPU + partitions > counters
    held = (claim("old").request(count=None).allocated("gpu-0").decode(),)
    whole = claim("c", _kind("whole", adminAccess=True)).decode()
    assert solve(make_request([whole], _gpu(), allocated_claims=held)).allocated


def test_partitions_without_the_gate_are_not_used() -> None:
    gates = FeatureGates(partitionable_devices=False)
    assert not solve(make_request([claim("c", _kind("part")).decode()], _gpu(), gates=gates)).allocated


def test_shareable_device_consumes_its_counters_once() -> None:
    devs = [device("d0", allowMultipleAllocations=True, consumesCounters=consumes("set", mem="2"))]
    slices = [counter_slice({"set": {"mem": "2"}}), slice_("devs", count=2, devices=devs)]
    assert solve_both(make_request([claim("a", request()).decode(), claim("b", request()).decode()], slices)).allocated


def test_pack_policy_fills_a_gpu_in_use_before_opening_another() -> None:
    # gpu-1's partitions come first in search order; gpu-0 already has one in use.
    slices = _gpu(2)
    devs = slices[1].spec.devices or []
    slices[1].spec.devices = [d for d in devs if d.name.startswith("gpu-1")] + [d for d in devs if d.name.startswith("gpu-0")]
    held = (claim("old").request(count=None).allocated("gpu-0-p0").decode(),)
    first_fit = solve(make_request([claim("c", _kind("part")).decode()], slices, allocated_claims=held, policy="first-fit"))
    pack = solve(make_request([claim("c", _kind("part")).decode()], slices, allocated_claims=held))
    assert devices(first_fit) == ["req-0=gpu-1-p0"]
    assert devices(pack) == ["req-0=gpu-0-p1"]
    assert pack.stats.policy == "pack"  # the default
    spread = solve(make_request([claim("c", _kind("part")).decode()], slices, allocated_claims=held, policy="spread"))
    assert devices(spread) == ["req-0=gpu-1-p0"]  # the untouched GPU


def test_pack_shares_a_device_already_shared_spread_takes_a_fresh_one() -> None:
    # d0 comes first in search order but nobody shares it yet; d1 already has a share.
    cap = {"mem": {"value": "4Gi"}}
    slices = [slice_("s1", devices=[device("d0", allowMultipleAllocations=True, capacity=cap),
                                    device("d1", allowMultipleAllocations=True, capacity=cap)])]
    taken = AllocatedState(
        shared=frozenset({(DeviceID(DRIVER_A, "pool-1", "d1"), "old-share")}),
        capacity={DeviceID(DRIVER_A, "pool-1", "d1"): {"mem": parse_quantity("1Gi")}},
    )
    picked = {
        policy: devices(solve(make_request([_wants("1Gi")], slices, allocated=taken, policy=policy)))
        for policy in ("pack", "spread", "first-fit")
    }
    assert picked == {"pack": ["req-0=d1"], "spread": ["req-0=d0"], "first-fit": ["req-0=d0"]}


def test_spread_puts_a_claims_partitions_on_different_gpus() -> None:
    two = _kind("part", count=2)
    packed = devices(solve(make_request([claim("c", two).decode()], _gpu(2))))
    spread = devices(solve(make_request([claim("c", two).decode()], _gpu(2), policy="spread")))
    gpus = {policy: {d.split("=")[1].split("-p")[0] for d in picked} for policy, picked in (("pack", packed), ("spread", spread))}
    assert len(gpus["pack"]) == 1, packed
    assert len(gpus["spread"]) == 2, spread


def test_kept_capacity_verdicts_follow_what_is_consumed() -> None:
    """The whole-capacity fit kept per device (``DeviceParseCache``) answers only a request that
    names no capacity on a device nothing consumes: the same device objects with part of it
    consumed, or a request naming capacity, are checked again."""
    from dataclasses import replace

    from dra_solver.model.cel import CelEnvironment
    from dra_solver.model.cpsat.problem import prepare_problem
    from dra_solver.model.pools import DeviceParseCache

    cel = CelEnvironment()
    plain = replace(make_request([claim("c", request()).decode()], _shareable(mem={"value": "4Gi"})), device_cache=DeviceParseCache())

    def candidates(req: Any) -> int:
        return len(prepare_problem(req, cel=cel).options[0][0][0].candidates)

    assert candidates(plain) == 1
    assert plain.device_cache is not None and len(plain.device_cache.whole_capacity_fits) == 1
    d0 = DeviceID(DRIVER_A, "pool-1", "d0")
    consumed = replace(plain, inventory=replace(plain.inventory, extra_allocated=AllocatedState(capacity={d0: {"mem": parse_quantity("1Gi")}})))
    assert candidates(consumed) == 0  # the whole device no longer fits
    assert candidates(plain) == 1
    wants = replace(plain, claims=(_wants("5Gi"),))
    assert candidates(wants) == 0
