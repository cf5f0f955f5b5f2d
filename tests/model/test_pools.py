"""Pool gathering per node, shaped like upstream's allocator cases (obsolete-slice,
no-allocation-from-incomplete-pools, invalid-pool-*, network-attached-device, ...)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.errors import AllocationError
from dra_solver.model.features import FeatureGates
from dra_solver.model.pools import Pool, gather_pools, node_selector_matches
from tests.builders import DRIVER_A, DRIVER_B, NODE_1, NODE_2
from tests.model.alloc_builders import device, node, slice_

ALL = FeatureGates()


def _ids(pools: list[Pool]) -> list[tuple[str, list[str]]]:
    return [(p.id, [d.name for d in p.devices]) for p in pools]


def _selector(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeSelectorTerms": list(terms)}


def test_node_local_and_other_node() -> None:
    slices = [
        slice_("s1", node_name=NODE_1, pool="p1"),
        slice_("s2", node_name=NODE_2, pool="p2"),
    ]
    assert _ids(gather_pools(slices, node(NODE_1), gates=ALL)) == [("driver-a/p1", ["device-1"])]


@pytest.mark.parametrize(
    ("spec", "relevant"),
    [
        pytest.param({"allNodes": True}, True, id="all-nodes"),
        pytest.param(
            {
                "nodeSelector": _selector(
                    {"matchExpressions": [{"key": "region", "operator": "In", "values": ["r1"]}]}
                )
            },
            True,
            id="label-in",
        ),
        pytest.param(
            {
                "nodeSelector": _selector(
                    {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["r1"]}]}
                )
            },
            False,
            id="label-notin",
        ),
        pytest.param(
            {
                "nodeSelector": _selector(
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [NODE_1]}
                        ]
                    }
                )
            },
            True,
            id="field-name",
        ),
        pytest.param(
            {
                "nodeSelector": _selector(
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [NODE_2]}
                        ]
                    }
                )
            },
            False,
            id="field-other-name",
        ),
        pytest.param(
            {
                "nodeSelector": _selector(
                    {"matchExpressions": [{"key": "region", "operator": "In", "values": ["nope"]}]},
                    {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["3"]}]},
                )
            },
            True,
            id="terms-are-ored-gt",
        ),
        pytest.param(
            {
                "nodeSelector": _selector(
                    {"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"}]}
                )
            },
            True,
            id="does-not-exist",
        ),
        pytest.param({"nodeSelector": _selector({})}, False, id="empty-term-matches-nothing"),
    ],
)
def test_network_attached_slices(spec: dict[str, Any], relevant: bool) -> None:
    slices = [slice_("s1", node_name=None, **spec)]
    pools = gather_pools(slices, node(NODE_1, region="r1", gpus="4"), gates=ALL)
    assert bool(pools) is relevant


def test_broken_node_selector_is_fatal() -> None:
    spec = {
        "nodeSelector": _selector(
            {"matchExpressions": [{"key": "a", "operator": "Sideways", "values": ["x"]}]}
        )
    }
    with pytest.raises(
        AllocationError,
        match="gather pool information: failed to perform node selection for slice s1",
    ):
        gather_pools([slice_("s1", node_name=None, nodeSelector=spec["nodeSelector"])], node(NODE_1), gates=ALL)


def test_node_selector_fields_ignored_without_node_name() -> None:
    sel = o.NodeSelector.model_validate(
        _selector({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]})
    )
    nameless = o.Node(metadata=o.ObjectMeta())
    assert node_selector_matches(sel, nameless)


def test_newest_generation_only() -> None:
    slices = [
        slice_("old", generation=1, devices=[device("old-device")]),
        slice_("new", generation=2, devices=[device("new-device")]),
    ]
    assert _ids(gather_pools(slices, node(), gates=ALL)) == [("driver-a/pool-1", ["new-device"])]


def test_incomplete_pool_is_recorded() -> None:
    pools = gather_pools([slice_("s1", count=2)], node(), gates=ALL)
    assert len(pools) == 1 and pools[0].incomplete and not pools[0].devices


def test_obsolete_slice_when_newer_generation_elsewhere() -> None:
    # The node's slice is generation 1 of a 2-slice pool; generation 2 lives on another node.
    slices = [
        slice_("s1", generation=1, count=2),
        slice_("s2", generation=2, count=2, node_name=NODE_2),
    ]
    assert gather_pools(slices, node(), gates=ALL) == []


def test_pool_completed_by_slices_for_other_nodes() -> None:
    slices = [
        slice_("s1", count=2, devices=[device("here")]),
        slice_("s2", count=2, node_name=NODE_2, devices=[device("there")]),
    ]
    (pool,) = gather_pools(slices, node(), gates=ALL)
    assert not pool.incomplete
    assert [d.name for d in pool.devices] == ["here"]
    assert [d.name for d in pool.other_devices] == ["there"]


@pytest.mark.parametrize(
    ("slices", "reason"),
    [
        pytest.param(
            [
                slice_("s1", count=2, devices=[device("d")]),
                slice_("s2", count=2, devices=[device("d")]),
            ],
            "duplicate device name d",
            id="duplicate-device",
        ),
        pytest.param(
            [
                slice_(
                    "s1",
                    count=3,
                    devices=[],
                    sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}],
                ),
                slice_(
                    "s2",
                    count=3,
                    devices=[],
                    sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}],
                ),
                slice_("s3", count=3),
            ],
            "duplicate counter set name cs",
            id="duplicate-counter-set",
        ),
        pytest.param(
            [
                slice_(
                    "s1",
                    devices=[
                        device(
                            "d",
                            consumesCounters=[
                                {"counterSet": "nope", "counters": {"c": {"value": "1"}}}
                            ],
                        )
                    ],
                )
            ],
            "counter set nope not found",
            id="unknown-counter-set",
        ),
        pytest.param(
            [
                slice_(
                    "s1",
                    count=2,
                    devices=[],
                    sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}],
                ),
                slice_(
                    "s2",
                    count=2,
                    devices=[
                        device(
                            "d",
                            consumesCounters=[
                                {"counterSet": "cs", "counters": {"x": {"value": "1"}}}
                            ],
                        )
                    ],
                ),
            ],
            "counter x not found in counter set cs",
            id="unknown-counter",
        ),
    ],
)
def test_invalid_pools(slices: list[o.ResourceSlice], reason: str) -> None:
    (pool,) = gather_pools(slices, node(), gates=ALL)
    assert pool.invalid_reason == reason
    assert not pool.devices


def test_partitionable_devices_gate_ignores_counters() -> None:
    # Upstream skips the counter slice while looking for the node's slices, but then finds it
    # again when checking completeness; without the gate its counters are simply not used.
    slices = [
        slice_(
            "s1",
            count=2,
            devices=[],
            sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}],
        ),
        slice_("s2", count=2),
    ]
    (pool,) = gather_pools(slices, node(), gates=FeatureGates(partitionable_devices=False))
    assert not pool.incomplete and not pool.invalid
    assert pool.counter_sets == {}
    assert [d.name for d in pool.devices] == ["device-1"]


def test_order_driver_pool_slices_devices_binding_last() -> None:
    slices = [
        slice_("z", driver=DRIVER_B, pool="a", devices=[device("b1")]),
        slice_("y", driver=DRIVER_A, pool="b", count=2, devices=[device("y1"), device("y0")]),
        slice_("x", driver=DRIVER_A, pool="b", count=2, devices=[device("x1")]),
        slice_("w", driver=DRIVER_A, pool="a", devices=[device("bc", bindingConditions=["ready"])]),
    ]
    assert _ids(gather_pools(slices, node(), gates=ALL)) == [
        ("driver-a/b", ["x1", "y1", "y0"]),
        ("driver-b/a", ["b1"]),
        ("driver-a/a", ["bc"]),
    ]


def test_per_device_node_selection() -> None:
    slices = [
        slice_(
            "s1",
            perDeviceNodeSelection=True,
            devices=[
                device("mine", nodeName=NODE_1),
                device("theirs", nodeName=NODE_2),
                device("shared", allNodes=True),
            ],
        )
    ]
    (pool,) = gather_pools(slices, node(), gates=ALL)
    assert [(d.name, d.node_match) for d in pool.devices] == [
        ("mine", True),
        ("theirs", False),
        ("shared", True),
    ]
    assert gather_pools(slices, node(NODE_1), gates=FeatureGates(partitionable_devices=False)) == []


def test_device_parsing() -> None:
    slices = [
        slice_(
            "s1",
            devices=[
                device(
                    "d",
                    attributes={"model": {"string": "a100"}, "broken": {}},
                    capacity={"memory": {"value": "40Gi"}},
                    taints=[{"key": "k", "effect": "NoExecute"}],
                )
            ],
        )
    ]
    (pool,) = gather_pools(slices, node(), gates=ALL)
    (dev,) = pool.devices
    assert str(dev.id) == "driver-a/pool-1/d"
    assert dev.capacity["memory"].value.cmp(dev.capacity["memory"].value) == 0
    assert dev.cel_error == "attribute broken: unsupported attribute value"
    assert [t.key for t in dev.taints] == ["k"]
