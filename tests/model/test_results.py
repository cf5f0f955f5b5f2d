"""Result shaping: node selectors, configs, share IDs, and the FirstAvailable score."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocatedState, DeviceID, Inventory
from dra_solver.model.features import FeatureGates
from dra_solver.model.matching import Matcher, prepare_claims
from dra_solver.model.pools import gather_pools
from dra_solver.model.results import ChosenDevice, build_result, node_selector_for, share_id_for
from dra_solver.model.score import first_available_score
from tests.builders import NODE_1, claim, first_available, request, sub
from tests.conformance.cases import cel_environment
from tests.model.alloc_builders import device, device_class, node, slice_

ALL = FeatureGates()
REGION = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["r1"]}]}
    ]
}


def _devices(*slices: o.ResourceSlice) -> list[Any]:
    pools = gather_pools(list(slices), node(NODE_1, region="r1", zone="z"), gates=ALL)
    return [d for p in pools for d in p.devices]


def _selector_api(selector: o.NodeSelector | None) -> Any:
    return selector.to_api() if selector else None


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        pytest.param(
            [slice_("s1")],
            {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [NODE_1]}
                        ]
                    }
                ]
            },
            id="node-local",
        ),
        pytest.param([slice_("s1", node_name=None, allNodes=True)], None, id="all-nodes"),
        pytest.param(
            [slice_("s1", node_name=None, nodeSelector=REGION)], REGION, id="slice-selector"
        ),
        pytest.param(
            [slice_("s1", node_name=None, allNodes=True, devices=[device("d", bindsToNode=True)])],
            {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [NODE_1]}
                        ]
                    }
                ]
            },
            id="binds-to-node",
        ),
    ],
)
def test_node_selector(slices: list[o.ResourceSlice], expected: Any) -> None:
    assert _selector_api(node_selector_for(_devices(*slices), NODE_1)) == expected


def test_node_selectors_are_merged_without_duplicates() -> None:
    other = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}
        ]
    }
    devs = _devices(
        slice_("a", node_name=None, pool="a", nodeSelector=REGION),
        slice_("b", node_name=None, pool="b", nodeSelector=REGION),
        slice_("c", node_name=None, pool="c", nodeSelector=other),
    )
    got = _selector_api(node_selector_for(devs, NODE_1))
    keys = [r["key"] for r in got["nodeSelectorTerms"][0]["matchExpressions"]]
    assert keys == ["region", "zone"]


def _plan(c: o.ResourceClaim, classes: list[o.DeviceClass]) -> Any:
    inventory = Inventory(
        classes=tuple(classes), slices=(slice_("s1", devices=[device("d1"), device("d2")]),)
    )
    pools = gather_pools(inventory.slices, node(), gates=ALL)
    matcher = Matcher(cel_environment(ALL), gates=ALL, node=node())
    (plan,) = prepare_claims(
        [c], pools, inventory=inventory, gates=ALL, matcher=matcher, allocated=AllocatedState()
    )
    return plan, pools[0].devices


def test_result_fields_and_configs() -> None:
    opaque = {"opaque": {"driver": "driver-a", "parameters": {"a": 1}}}
    cls = device_class(config=[opaque])
    c = claim(
        "c",
        request("r0", tolerations=[{"key": "k", "operator": "Exists"}]),
        first_available("r1", sub("s0")),
        config=[
            {"requests": ["r0"], **opaque},
            {"requests": ["r1/s0"], **opaque},
            {"requests": ["other"], **opaque},
            {**opaque},
        ],
    ).decode()
    plan, devs = _plan(c, [cls])
    chosen = [
        ChosenDevice(plan.requests[0].options[0], devs[0]),
        ChosenDevice(plan.requests[1].options[0], devs[1]),
    ]
    result = build_result(plan, chosen, node_name=NODE_1, gates=ALL).to_api()
    assert [r["request"] for r in result["devices"]["results"]] == ["r0", "r1/s0"]
    assert result["devices"]["results"][0]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    configs = result["devices"]["config"]
    assert [(cfg["source"], cfg.get("requests")) for cfg in configs] == [
        ("FromClass", None),  # the class config lists every request, so "all"
        ("FromClaim", ["r0"]),
        ("FromClaim", ["r1/s0"]),
        ("FromClaim", None),
    ]


def test_share_ids_are_deterministic_and_distinct() -> None:
    c = claim("c", request()).decode()
    dev = DeviceID("d", "p", "x")
    assert share_id_for(c, 0, dev) == share_id_for(c, 0, dev)
    assert share_id_for(c, 0, dev) != share_id_for(c, 1, dev)
    assert len(share_id_for(c, 0, dev)) == 36


def _result(*requests: str) -> o.AllocationResult:
    return o.AllocationResult(
        devices=o.DeviceAllocationResult(
            results=[
                o.DeviceRequestAllocationResult(request=r, driver="d", pool="p", device=f"x{i}")
                for i, r in enumerate(requests)
            ]
        )
    )


def test_first_available_score() -> None:
    c = claim(
        "c",
        first_available("a", sub("a0"), sub("a1")),
        first_available("b", sub("b0"), sub("b1"), sub("b2")),
        request("e"),
    ).decode()
    # a1 twice counts once (7), b2 adds 6, the exactly-request adds nothing.
    assert first_available_score([c], [_result("a/a1", "a/a1", "b/b2", "e")]) == 13
    assert first_available_score([c], [_result("a/a0", "b/b0", "e")]) == 16
