"""Node load in units (``model.node_load``) and the order policies visit nodes in."""

from __future__ import annotations

import pytest

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocatedState, DeviceID
from dra_solver.model.decode import decode_all
from dra_solver.model.node_load import NodeUnits, node_key
from dra_solver.service.bench import gpu_node, mig_node

DRIVER = "gpu.example.com"


def _slices(docs: list[dict[str, object]]) -> list[o.ResourceSlice]:
    return [s for s in decode_all(docs) if isinstance(s, o.ResourceSlice)]


def _dev(node: str, name: str) -> DeviceID:
    return DeviceID(DRIVER, node, name)


def test_plain_gpus_are_one_unit_each() -> None:
    units = NodeUnits.of(_slices(gpu_node("n1")))
    assert units.total == 8
    assert units.free(AllocatedState()) == 8
    assert units.free(AllocatedState(devices=frozenset({_dev("n1", "gpu-0"), _dev("n1", "gpu-5")}))) == 6
    # Devices of other nodes do not count.
    assert units.free(AllocatedState(devices=frozenset({_dev("n2", "gpu-0")}))) == 8


def test_a_partitioned_gpu_is_one_unit_used_by_its_largest_counter_share() -> None:
    slices = _slices(mig_node("m1"))
    units = NodeUnits.of(slices)
    assert units.total == 8  # eight counter sets, whatever the partitions
    names = [d.name for s in slices for d in s.spec.devices or []]
    small = next(n for n in names if n.startswith("gpu-1-1g"))
    whole = next(n for n in names if n.startswith("gpu-2") and "g-" not in n)
    busy_small = units.busy(AllocatedState(devices=frozenset({_dev("m1", small)})))
    assert 0 < busy_small < 1
    assert units.busy(AllocatedState(devices=frozenset({_dev("m1", whole)}))) == 1
    assert units.free(AllocatedState(devices=frozenset({_dev("m1", small), _dev("m1", whole)}))) == pytest.approx(8 - 1 - busy_small)


def test_pack_visits_the_fullest_node_first_spread_the_emptiest() -> None:
    free = {"a": 8.0, "b": 2.0, "c": 5.0, "d": 2.0}
    order = {p: [n for _, n in sorted((node_key(p, f, n), n) for n, f in free.items())] for p in ("pack", "spread", "first-fit", "score")}
    assert order["pack"] == ["b", "d", "c", "a"]
    assert order["spread"] == ["a", "c", "b", "d"]
    assert order["first-fit"] == order["score"] == ["a", "b", "c", "d"]
