"""``K8sModel.model_copy``: the short path gives what pydantic's own copy gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from dra_solver.model import objects as o

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "web-gpu", "namespace": "default", "uid": "u-1", "labels": {"app": "web"}},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}]}},
    "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0", "shareID": "00000000-0000-0000-0000-000000000001"},
    ]}, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}}},
}
"""A claim with nested objects of several kinds, and a field no type declares (kept as extra)."""


def _objects() -> list[o.K8sModel]:
    claim = o.ResourceClaim.model_validate({**CLAIM, "futureField": {"x": 1}})
    assert claim.status is not None and claim.status.allocation is not None
    allocation = claim.status.allocation
    assert allocation.devices is not None and allocation.devices.results
    return [claim, claim.metadata, claim.spec, allocation, allocation.devices, allocation.devices.results[0]]


def _state(model: BaseModel) -> tuple[Any, ...]:
    return (type(model), dict(model.__dict__), model.__pydantic_extra__, set(model.__pydantic_fields_set__), model.__pydantic_private__)


def _pydantic_copy(model: BaseModel, update: dict[str, Any] | None) -> BaseModel:
    return BaseModel.model_copy(model, update=update)


@pytest.mark.parametrize("index", range(6))
def test_copy_without_update_equals_pydantics(index: int) -> None:
    model = _objects()[index]
    mine, theirs = model.model_copy(), _pydantic_copy(model, None)
    assert _state(mine) == _state(theirs)
    assert mine is not model and mine.__dict__ is not model.__dict__
    assert mine.__pydantic_fields_set__ is not model.__pydantic_fields_set__


def test_the_copy_is_independent_of_the_original() -> None:
    claim = _objects()[0]
    assert isinstance(claim, o.ResourceClaim)
    copy = claim.model_copy(update={"metadata": o.ObjectMeta(name="other")})
    assert claim.metadata.name == "web-gpu" and copy.metadata.name == "other"
    assert "metadata" in copy.model_fields_set
    unset = claim.metadata.model_copy(update={"generate_name": "web-"})
    assert "generate_name" not in claim.metadata.model_fields_set and "generate_name" in unset.model_fields_set
    assert unset.to_api()["generateName"] == "web-" and "generateName" not in claim.metadata.to_api()
    assert copy.__pydantic_extra__ == claim.__pydantic_extra__ == {"futureField": {"x": 1}}
    assert copy.__pydantic_extra__ is not claim.__pydantic_extra__
    copy.__pydantic_extra__["more"] = 1  # type: ignore[index]
    assert "more" not in (claim.__pydantic_extra__ or {})
    assert copy.to_api()["metadata"] == {"name": "other"}
    assert copy.to_api()["spec"] == claim.to_api()["spec"]


@settings(max_examples=200, deadline=None)
@given(
    index=st.integers(0, 5),
    picks=st.lists(st.sampled_from(["name", "namespace", "uid", "spec", "devices", "results", "request", "device", "pool",
                                    "futureField", "status", "nodeSelector", "node_selector", "labels", "generate_name", "annotations",
                                    "admin_access", "config", "tolerations", "allocation_timestamp"]), max_size=4),
    value=st.one_of(st.none(), st.text(max_size=5), st.integers()),
    deep=st.booleans(),
)
def test_copies_equal_pydantics_whatever_the_update(index: int, picks: list[str], value: Any, deep: bool) -> None:
    """Declared fields (by name, not alias), unknown keys (extra), aliases, deep copies: the
    result is pydantic's in every case, those the short path takes and those it hands on."""
    model = _objects()[index]
    update = {key: value for key in picks} or None
    mine = model.model_copy(update=update, deep=deep)
    theirs = BaseModel.model_copy(model, update=update, deep=deep)
    assert _state(mine)[0] is _state(theirs)[0]
    assert mine.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
    assert mine.__pydantic_extra__ == theirs.__pydantic_extra__
    assert mine.__dict__ == theirs.__dict__
    assert mine.model_dump(by_alias=True, exclude_none=True, warnings=False) == theirs.model_dump(by_alias=True, exclude_none=True, warnings=False)
