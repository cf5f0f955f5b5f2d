"""``AllocatedState.merge``, ``AllocatedState.union`` and ``Inventory.allocated_state``: what is
in use, whichever side is empty (merging with an empty state hands back the other state
itself), and a union of many equal to merging them one by one."""

from __future__ import annotations

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocatedState, Inventory
from dra_solver.model.cluster import DeviceID
from dra_solver.model.quantity import parse_quantity

A = DeviceID("gpu.example.com", "node-1", "gpu-0")
B = DeviceID("gpu.example.com", "node-1", "gpu-1")
C = DeviceID("gpu.example.com", "node-1", "gpu-2")


def _view(state: AllocatedState) -> tuple[object, ...]:
    return (sorted(state.devices), sorted(state.shared), {d: {k: str(v) for k, v in a.items()} for d, a in state.capacity.items()})


def test_merging_with_an_empty_state_keeps_everything_in_use() -> None:
    full = AllocatedState(frozenset({A}), frozenset({(B, "s1")}), {C: {"memory": parse_quantity("1Gi")}})
    empty = AllocatedState()
    assert _view(full.merge(empty)) == _view(empty.merge(full)) == _view(full)
    assert _view(empty.merge(empty)) == _view(empty)
    # Each part alone makes a state non-empty.
    for part in (AllocatedState(devices=frozenset({B})), AllocatedState(shared=frozenset({(A, "s2")})),
                 AllocatedState(capacity={C: {"memory": parse_quantity("2Gi")}})):
        assert _view(part.merge(empty)) == _view(empty.merge(part)) == _view(part)
        merged = full.merge(part)
        assert set(merged.devices) >= set(full.devices) | set(part.devices)
        assert set(merged.shared) == set(full.shared) | set(part.shared)
    both = full.merge(AllocatedState(capacity={C: {"memory": parse_quantity("2Gi")}}))
    assert str(both.capacity[C]["memory"]) == "3Gi"


def _claim(device: str) -> o.ResourceClaim:
    return o.ResourceClaim.model_validate({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": f"c-{device}", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "gpu.example.com", "pool": "node-1", "device": device}]}}},
    })


def test_an_inventory_counts_its_allocated_claims_and_the_extra_state() -> None:
    extra = AllocatedState(frozenset({A}))
    assert _view(Inventory(extra_allocated=extra).allocated_state()) == _view(extra)
    with_claims = Inventory(claims=(_claim("gpu-1"),), extra_allocated=extra)
    assert with_claims.allocated_state().devices == {A, B}
    assert Inventory(claims=(_claim("gpu-2"),)).allocated_state().devices == {C}


def test_a_union_of_states_equals_merging_them_one_by_one() -> None:
    parts = [
        AllocatedState(frozenset({A}), frozenset({(B, "s1")}), {C: {"memory": parse_quantity("1Gi")}}),
        AllocatedState(frozenset({B}), capacity={C: {"memory": parse_quantity("2Gi"), "cores": parse_quantity("1")}}),
        AllocatedState(shared=frozenset({(B, "s2")})),
    ]
    stepwise = AllocatedState()
    for part in parts:
        stepwise = stepwise.merge(part)
    assert _view(AllocatedState.union(parts)) == _view(stepwise)
    assert str(AllocatedState.union(parts).capacity[C]["memory"]) == "3Gi"
    assert AllocatedState.union(parts[:1]) is parts[0], "one state is handed back as it is"
    assert _view(AllocatedState.union([])) == _view(AllocatedState())
