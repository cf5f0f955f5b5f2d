"""Consumable capacity request-policy math (upstream ``consumable_capacity_test.go`` shapes)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.capacity import (
    CapacitySpec,
    binary_si_quantity,
    capacity_fits,
    consumed_amount,
    consumed_capacity,
    violates_policy,
)
from dra_solver.model.quantity import parse_quantity


def spec(value: str, **policy: Any) -> CapacitySpec:
    body: dict[str, Any] = {"value": value}
    if policy:
        body["requestPolicy"] = policy
    return CapacitySpec.from_api(o.DeviceCapacity.model_validate(body))


def q(text: str) -> Any:
    return parse_quantity(text)


RANGE = {"default": "1Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}}
VALUES = {"default": "1", "validValues": ["1", "2", "4"]}


@pytest.mark.parametrize(
    ("capacity", "requested", "consumed"),
    [
        pytest.param(spec("10Gi"), None, "10Gi", id="no-request-no-policy-takes-all"),
        pytest.param(spec("10Gi", **RANGE), None, "1Gi", id="no-request-default"),
        pytest.param(spec("10Gi"), "3Gi", "3Gi", id="no-policy-as-requested"),
        pytest.param(spec("10Gi", **RANGE), "512Mi", "1Gi", id="below-min-rounds-to-min"),
        pytest.param(spec("10Gi", **RANGE), "1500Mi", "2Gi", id="step-rounds-up"),
        pytest.param(spec("10Gi", **RANGE), "3Gi", "3Gi", id="on-step"),
        pytest.param(spec("10Gi", validRange={"min": "1Gi"}), "1500Mi", "1500Mi", id="no-step"),
        pytest.param(spec("8", **VALUES), "3", "4", id="valid-values-round-up"),
        pytest.param(spec("8", **VALUES), "5", "5", id="above-valid-values-kept"),
    ],
)
def test_consumed_amount(capacity: CapacitySpec, requested: str | None, consumed: str) -> None:
    amount = consumed_amount(q(requested) if requested else None, capacity)
    assert amount.cmp(q(consumed)) == 0


@pytest.mark.parametrize(
    ("capacity", "amount", "violates"),
    [
        (spec("10Gi", **RANGE), "9Gi", True),
        (spec("10Gi", **RANGE), "8Gi", False),
        (spec("10Gi", validRange={"min": "1Gi", "step": "1Gi"}), "1536Mi", True),
        (spec("8", **VALUES), "5", True),
        (spec("8", **VALUES), "2", False),
        (spec("8"), "100", False),
    ],
)
def test_violates_policy(capacity: CapacitySpec, amount: str, violates: bool) -> None:
    assert violates_policy(q(amount), capacity) is violates


def test_capacity_fits_counts_committed_and_in_flight() -> None:
    caps = {"memory": spec("8Gi", **RANGE)}
    wanted = {"memory": q("3Gi")}
    assert capacity_fits(wanted, caps)
    assert capacity_fits(wanted, caps, allocated={"memory": q("5Gi")})
    assert not capacity_fits(
        wanted, caps, allocated={"memory": q("4Gi")}, allocating={"memory": q("2Gi")}
    )


def test_capacity_fits_rejects_over_max_and_undefined() -> None:
    caps = {"memory": spec("16Gi", **RANGE)}
    assert not capacity_fits({"memory": q("9Gi")}, caps)
    assert not capacity_fits({"bandwidth": q("1")}, caps)


def test_unrequested_capacities_are_consumed_too() -> None:
    caps = {"memory": spec("8Gi", **RANGE), "shares": spec("4")}
    consumed = consumed_capacity({"memory": q("2Gi")}, caps)
    assert consumed["memory"].cmp(q("2Gi")) == 0
    assert consumed["shares"].cmp(q("4")) == 0


@pytest.mark.parametrize(
    ("value", "text"), [(0, "0"), (1024, "1Ki"), (3 * 2**30, "3Gi"), (1000, "1k"), (1536, "1536")]
)
def test_binary_si(value: int, text: str) -> None:
    assert str(binary_si_quantity(value)) == text
