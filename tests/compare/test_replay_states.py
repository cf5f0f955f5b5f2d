"""Replays solve once per node state (``service.replay``): nodes whose devices differ only in
names and attributes the claim cannot read answer alike, so a claim that fits none of them is
tried once per state, and a placed claim changes only its node's state."""

from __future__ import annotations

from typing import Any

from dra_solver.model import AllocationOutcome, AllocationRequest, allocate
from dra_solver.model import objects as o
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.decode import decode_all
from dra_solver.service.replay import DEFAULT_CONFIGS, replay
from tests import builders as b

CEL = CelEnvironment()
CPSAT_FIRST_FIT = next(c for c in DEFAULT_CONFIGS if c.name == "cpsat-first-fit")


def _cluster(nodes: int) -> list[o.TypedObject]:
    docs: list[dict[str, Any]] = [b.device_class()]
    for i in range(nodes):
        name = f"node-{i:02d}"
        docs.append(b.node(name))
        sl = b.gpu_slice(name, count=2)
        for g, device in enumerate(sl["spec"]["devices"]):
            device["name"] = f"gpu-{name}-{g}"  # device names differ from node to node
            device["attributes"]["uuid"] = {"string": f"GPU-{i}-{g}"}  # and an attribute nobody reads
        docs.append(sl)
    return decode_all(docs)


def _claim(name: str, count: int, expression: str = "") -> o.ResourceClaim:
    fields = {"selectors": [b.selector(expression)]} if expression else {}
    built = b.claim(name, b.request("gpu", cls=b.CLASS, count=count, **fields)).decode()
    assert isinstance(built, o.ResourceClaim)
    return built


def _counted(calls: list[str]) -> Any:
    def run(request: AllocationRequest) -> AllocationOutcome:
        calls.append(request.node.name)
        return allocate(request, cel=CEL, validate=False)

    return run


def test_a_claim_that_fits_nowhere_is_tried_once_per_node_state() -> None:
    calls: list[str] = []
    workload = [_claim("big", 3), _claim("one", 1), _claim("two", 2)]
    result = replay(_cluster(12), workload, CPSAT_FIRST_FIT, cel=CEL, allocate_with=_counted(calls))
    assert result.nodes == [None, "node-00", "node-01"]
    # "big": every node is empty and alike: one try. "one": the first node. "two": node-00
    # (one GPU left) does not fit, node-01 does: nodes 02.. are never reached.
    assert calls == ["node-00", "node-00", "node-00", "node-01"]
    assert result.errors == []


def test_a_selector_reading_a_per_node_attribute_tries_every_node() -> None:
    calls: list[str] = []
    expression = f'device.attributes["{b.DRIVER}"].uuid == "GPU-5-1"'
    result = replay(_cluster(8), [_claim("pinned", 1, expression)], CPSAT_FIRST_FIT, cel=CEL, allocate_with=_counted(calls))
    assert result.nodes == ["node-05"]
    assert calls == [f"node-{i:02d}" for i in range(6)]


def test_score_choice_takes_the_policy_preferred_node_among_equal_states() -> None:
    pack = next(c for c in DEFAULT_CONFIGS if c.name == "cpsat-pack")
    workload = [_claim("a", 1), _claim("b", 1), _claim("c", 2)]
    result = replay(_cluster(6), workload, pack, cel=CEL, node_choice="score")
    # pack fills the node already in use before opening another; the 2-GPU claim then needs
    # an empty node, the first by name of the equal empty ones.
    assert result.nodes == ["node-00", "node-00", "node-01"]
