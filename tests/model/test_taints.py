"""Toleration matching and effective taints (upstream ``devicetoleration_test.go`` semantics)."""

from __future__ import annotations

import pytest

from dra_solver.model import objects as o
from dra_solver.model.features import FeatureGates
from dra_solver.model.taints import (
    effective_taints,
    rule_taints,
    taint_prevents_allocation,
    tolerates,
)
from tests.model.alloc_builders import device, slice_, taint_rule

TAINT = o.DeviceTaint(key="k", value="v", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        pytest.param(
            o.DeviceToleration(key="k", operator="Equal", value="v", effect="NoSchedule"),
            True,
            id="exact",
        ),
        pytest.param(
            o.DeviceToleration(key="k", operator="Equal", value="other"), False, id="value-differs"
        ),
        pytest.param(o.DeviceToleration(key="k", value="v"), True, id="operator-defaults-to-equal"),
        pytest.param(o.DeviceToleration(key="k", operator="Exists"), True, id="exists-any-value"),
        pytest.param(
            o.DeviceToleration(operator="Exists"), True, id="empty-key-exists-matches-all"
        ),
        pytest.param(o.DeviceToleration(key="other", operator="Exists"), False, id="key-differs"),
        pytest.param(
            o.DeviceToleration(key="k", operator="Exists", effect="NoExecute"),
            False,
            id="effect-differs",
        ),
        pytest.param(
            o.DeviceToleration(key="k", operator="Exists", effect=""),
            True,
            id="empty-effect-matches-all",
        ),
        pytest.param(o.DeviceToleration(key="k", operator="Bogus"), False, id="unknown-operator"),
    ],
)
def test_tolerates(toleration: o.DeviceToleration, expected: bool) -> None:
    assert tolerates(toleration, TAINT) is expected


@pytest.mark.parametrize(
    ("effect", "tolerations", "blocked"),
    [
        ("NoSchedule", None, True),
        ("NoExecute", None, True),
        ("None", None, False),
        ("SomeFutureEffect", None, False),
        ("NoSchedule", [o.DeviceToleration(key="k", operator="Exists")], False),
        ("NoExecute", [o.DeviceToleration(key="k", operator="Exists", effect="NoSchedule")], True),
    ],
)
def test_taint_prevents_allocation(
    effect: str, tolerations: list[o.DeviceToleration] | None, blocked: bool
) -> None:
    taint = o.DeviceTaint(key="k", value="v", effect=effect)
    assert taint_prevents_allocation([taint], tolerations) is blocked


def test_rule_selector_fields_must_all_match() -> None:
    rules = [
        taint_rule("all"),
        taint_rule("driver", driver="driver-a", key="d"),
        taint_rule("other-driver", driver="driver-b", key="x"),
        taint_rule("pool", pool="pool-2", key="x"),
        taint_rule("device", device="device-1", key="dev"),
        taint_rule("other-device", device="device-2", key="x"),
    ]
    keys = [t.key for t in rule_taints("driver-a", "pool-1", "device-1", rules)]
    assert keys == ["k", "d", "dev"]


def test_a_rule_without_selector_taints_no_device() -> None:
    # The API: "The empty selector matches all devices. Without a selector, no devices are
    # matched." (upstream's slice tracker skips such a rule).
    without = taint_rule("none", key="none")
    without = without.model_copy(update={"spec": without.spec.model_copy(update={"device_selector": None})})
    assert rule_taints("driver-a", "pool-1", "device-1", [without, taint_rule("empty", key="all")])[0].key == "all"
    assert rule_taints("driver-a", "pool-1", "device-1", [without]) == ()


def test_effective_taints_gate() -> None:
    s = slice_(
        "s",
        devices=[device("device-1", taints=[{"key": "own", "value": "v", "effect": "NoSchedule"}])],
    )
    rules = [taint_rule("r", key="rule")]
    on = effective_taints(s, s.spec.devices[0], rules, gates=FeatureGates())  # type: ignore[index]
    off = effective_taints(s, s.spec.devices[0], rules, gates=FeatureGates(device_taints=False))  # type: ignore[index]
    assert [t.key for t in on] == ["own", "rule"]
    assert [t.key for t in off] == ["own"]
