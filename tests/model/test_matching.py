"""Request views, the pre-search checks and device eligibility, with upstream's error texts."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocatedState, DeviceID, Inventory
from dra_solver.model.errors import AllocationError
from dra_solver.model.features import FeatureGates
from dra_solver.model.matching import (
    Matcher,
    RequestKey,
    device_eligible,
    lookup_attribute,
    prepare_claims,
)
from dra_solver.model.pools import DeviceParseCache, Pool, gather_pools
from tests.builders import CLASS_A, claim, first_available, request, sub
from tests.conformance.cases import cel_environment
from tests.model.alloc_builders import device, device_class, node, slice_

ALL = FeatureGates()
NONE = FeatureGates(False, False, False, False, False, False, False)


def _prepare(
    claims: list[o.ResourceClaim],
    *,
    slices: list[o.ResourceSlice] | None = None,
    classes: list[o.DeviceClass] | None = None,
    gates: FeatureGates = ALL,
) -> tuple[list[Any], list[Pool]]:
    inventory = Inventory(
        classes=tuple(classes if classes is not None else [device_class()]),
        slices=tuple(slices or [slice_("s1")]),
    )
    pools = gather_pools(inventory.slices, node(), gates=gates)
    matcher = Matcher(cel_environment(gates), gates=gates, node=node())
    plans = prepare_claims(
        claims, pools, inventory=inventory, gates=gates, matcher=matcher, allocated=AllocatedState()
    )
    return plans, pools


@pytest.mark.parametrize(
    ("claims", "gates", "message"),
    [
        pytest.param(
            [claim("c", first_available("req-0", sub("s0")), ns="").decode()],
            NONE,
            "claim c, request req-0: has subrequests, but the DRAPrioritizedList feature is disabled",
            id="prioritized-list-disabled",
        ),
        pytest.param(
            [claim("c", request(capacity={"requests": {"memory": "1Gi"}})).decode()],
            NONE,
            "claim default/c, request req-0: has capacity requests, but the DRAConsumableCapacity feature is disabled",
            id="consumable-capacity-disabled",
        ),
        pytest.param(
            [claim("c", request(adminAccess=True)).decode()],
            NONE,
            "claim default/c, request req-0: admin access is requested, but the feature is disabled",
            id="admin-access-disabled",
        ),
        pytest.param(
            [claim("c", request(cls="unknown-class")).decode()],
            ALL,
            "claim default/c, request req-0: could not retrieve device class unknown-class",
            id="unknown-class",
        ),
        pytest.param(
            [claim("c", request(cls="")).decode()],
            ALL,
            "claim default/c, request req-0: missing device class name (unsupported request type?)",
            id="empty-class",
        ),
        pytest.param(
            [claim("c", request(count=33)).decode()],
            ALL,
            "claim default/c, request req-0: adding 33 devices exceeds the claim limit of 32, with 0 already accounted for",
            id="too-many-devices",
        ),
        pytest.param(
            # Upstream v0.37.2 checks the limit per request, before validating the next one:
            # the second request's unknown class is never reached.
            [claim("c", request(count=20), request("req-1", count=13), request("req-2", cls="unknown-class")).decode()],
            ALL,
            "claim default/c, request req-1: adding 13 devices exceeds the claim limit of 32, with 20 already accounted for",
            id="too-many-devices-total",
        ),
        pytest.param(
            [claim("c", request(), constraints=[{"requests": ["req-0"]}]).decode()],
            ALL,
            "claim default/c, constraint #0: empty constraint (unsupported constraint type?)",
            id="unknown-constraint",
        ),
    ],
)
def test_pre_search_errors(
    claims: list[o.ResourceClaim], gates: FeatureGates, message: str
) -> None:
    with pytest.raises(AllocationError) as caught:
        _prepare(claims, gates=gates)
    assert message in str(caught.value)


def test_unknown_allocation_mode() -> None:
    c = claim("c", request()).decode()
    c.spec.devices.requests[0].exactly.allocation_mode = "future-mode"  # type: ignore[index, union-attr]
    with pytest.raises(AllocationError, match="unsupported count mode future-mode"):
        _prepare([c])


def test_all_devices_over_incomplete_pool() -> None:
    with pytest.raises(
        AllocationError,
        match="asks for all devices, but resource pool driver-a/pool-1 is currently being updated",
    ):
        _prepare([claim("c", request(allocationMode="All")).decode()], slices=[slice_("s1", count=2)])


def test_all_devices_are_listed_up_front() -> None:
    slices = [
        slice_("s1", devices=[device("d1"), device("d2")]),
        slice_("s2", driver="driver-b", pool="p"),
    ]
    plans, _ = _prepare([claim("c", request(allocationMode="All")).decode()], slices=slices)
    (view,) = plans[0].requests[0].options
    assert view.num_devices == 2
    assert [d.name for d in view.all_devices or ()] == ["d1", "d2"]


def test_first_available_options_in_order() -> None:
    plans, _ = _prepare([claim("c", first_available("req", sub("big", count=2), sub("small"))).decode()])
    options = plans[0].requests[0].options
    assert [v.ref for v in options] == ["req/big", "req/small"]
    assert [v.key for v in options] == [RequestKey(0, 0, 0), RequestKey(0, 0, 1)]
    assert plans[0].min_devices == 1


def test_cel_runtime_error_names_class_selector_and_device() -> None:
    cls = device_class(
        selectors=[{"cel": {"expression": 'device.attributes["driver-a"].missing == "x"'}}]
    )
    with pytest.raises(AllocationError) as caught:
        _prepare([claim("c", request(allocationMode="All")).decode()], classes=[cls])
    assert str(caught.value).startswith(
        "class class-a: selector #0 on device driver-a/pool-1/device-1: CEL runtime error:"
    )


def test_cel_runtime_error_names_claim() -> None:
    req = request(
        allocationMode="All",
        selectors=[{"cel": {"expression": 'device.attributes["driver-a"].missing'}}],
    )
    with pytest.raises(AllocationError) as caught:
        _prepare([claim("c", req).decode()])
    assert str(caught.value).startswith(
        "claim default/c: selector #0 on device driver-a/pool-1/device-1: CEL runtime error:"
    )


def test_unrepresentable_attribute_fails_any_selector() -> None:
    slices = [slice_("s1", devices=[device("d", attributes={"broken": {}})])]
    with pytest.raises(AllocationError, match="attribute broken: unsupported attribute value"):
        _prepare([claim("c", request(allocationMode="All")).decode()], slices=slices)


def test_device_eligible() -> None:
    slices = [
        slice_(
            "s1",
            devices=[
                device("plain"),
                device("tainted", taints=[{"key": "k", "effect": "NoSchedule"}]),
                device("other-driver-looking", attributes={"kind": {"string": "x"}}),
            ],
        )
    ]
    plans, pools = _prepare([claim("c", request()).decode()], slices=slices)
    view = plans[0].requests[0].options[0]
    matcher = Matcher(cel_environment(ALL), gates=ALL, node=node())
    used = AllocatedState(
        devices=frozenset({DeviceID("driver-a", "pool-1", "other-driver-looking")})
    )
    eligible = [
        d.name
        for d in pools[0].devices
        if device_eligible(view, d, matcher=matcher, gates=ALL, allocated=used)
    ]
    assert eligible == ["plain"]


def test_lookup_attribute_by_driver_domain() -> None:
    slices = [
        slice_(
            "s1",
            devices=[device("d", attributes={"numa": {"int": 1}, "example.com/x": {"bool": True}})],
        )
    ]
    (pool,) = gather_pools(slices, node(), gates=ALL)
    dev = pool.devices[0]
    numa = lookup_attribute(dev, "driver-a/numa")
    assert numa is not None and numa.int_ == 1
    assert lookup_attribute(dev, "other/numa") is None
    x = lookup_attribute(dev, "example.com/x")
    assert x is not None and x.bool_ is True
    assert CLASS_A == "class-a"


def _verdicts(memo: DeviceParseCache, slices: list[o.ResourceSlice], req: dict[str, Any]) -> dict[str, bool]:
    """One attempt's ``selectable`` per device, with verdicts shared across attempts (``memo``)."""
    inventory = Inventory(classes=(device_class(),), slices=tuple(slices))
    pools = gather_pools(inventory.slices, node(), gates=ALL, parsed=memo)
    matcher = Matcher(cel_environment(ALL), gates=ALL, node=node(), memo=memo)
    (plan,) = prepare_claims([claim("c", req).decode()], pools, inventory=inventory, gates=ALL, matcher=matcher, allocated=AllocatedState())
    view = plan.requests[0].options[0]
    return {d.id.device: matcher.selectable(view, d) for p in pools for d in p.devices}


def test_verdicts_kept_across_attempts_are_for_the_same_device_view_only() -> None:
    memo = DeviceParseCache()
    a100 = request(selectors=[{"cel": {"expression": 'device.attributes["driver-a"].model == "a100"'}}])
    devices = [device("d0", attributes={"model": {"string": "a100"}}), device("d1", attributes={"model": {"string": "h100"}})]
    first = _verdicts(memo, [slice_("s1", devices=devices)], a100)
    assert first == {"d0": True, "d1": False}
    assert _verdicts(memo, [slice_("s1", devices=devices)], a100) == first
    # The same names with other attributes (new objects, as a new snapshot brings): no stale verdict.
    swapped = [device("d0", attributes={"model": {"string": "h100"}}), device("d1", attributes={"model": {"string": "a100"}})]
    assert _verdicts(memo, [slice_("s1", devices=swapped)], a100) == {"d0": False, "d1": True}
    # Other selectors on the same devices: their own verdicts.
    h100 = request(selectors=[{"cel": {"expression": 'device.attributes["driver-a"].model == "h100"'}}])
    assert _verdicts(memo, [slice_("s1", devices=devices)], h100) == {"d0": False, "d1": True}


def test_errors_are_never_kept_across_attempts() -> None:
    memo = DeviceParseCache()
    broken = request(selectors=[{"cel": {"expression": 'device.attributes["driver-a"].missing == "x"'}}])
    for _ in range(2):
        with pytest.raises(AllocationError, match="CEL runtime error"):
            _verdicts(memo, [slice_("s1", devices=[device("d0")])], broken)
