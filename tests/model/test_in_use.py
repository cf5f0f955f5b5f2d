"""Devices in use kept claim by claim (model.in_use) and the node index that carries its
predecessor's layout when only claims changed (NodeIndex._carry): after any sequence of claims
allocated, changed, released and deleted, the carried index answers every question exactly as
an index built from scratch."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.model import AllocatedState, DeviceID, Inventory, NodeIndex
from dra_solver.model import objects as o
from dra_solver.model.cel import ALL
from dra_solver.model.decode import decode_object
from dra_solver.model.in_use import InUseByNode
from tests.model.alloc_builders import device_class, node, slice_

DRIVER = "gpu.example.com"
NODES = ("n0", "n1", "n2")
NETWORK = "net"
"""A network-attached pool (``allNodes``): its devices are in use for every node."""
POLICIES = ("pack", "spread", "first-fit")


def _devices() -> list[dict[str, Any]]:
    return [
        {"name": "d0"},
        {"name": "d1"},
        {"name": "d2"},
        {"name": "s0", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "8Gi"}}},
    ]


CLASSES = (device_class("gpu", DRIVER),)
SLICES = (
    *(slice_(f"{n}-gpus", pool=n, driver=DRIVER, node_name=n, devices=_devices()) for n in NODES),
    slice_("net", pool=NETWORK, driver=DRIVER, node_name=None, devices=[{"name": "x0"}, {"name": "x1"}], allNodes=True),
)
NODE_OBJECTS = tuple(node(n, rack="r1") for n in NODES)
POOLS = (*NODES, NETWORK)


def _result(pool: str, device: str, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {"request": "r", "driver": DRIVER, "pool": pool, "device": device}
    if kind == "admin":
        out["adminAccess"] = True
    elif kind == "shared":
        out["shareID"] = str(uuid.UUID(int=hash((pool, device)) & (2**128 - 1)))
        out["consumedCapacity"] = {"memory": "2Gi"}
    return out


def _claim(name: str, results: list[dict[str, Any]] | None) -> o.ResourceClaim:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if results is not None:
        body["status"] = {"allocation": {"devices": {"results": results}}}
    obj = decode_object(body)
    assert isinstance(obj, o.ResourceClaim)
    return obj


a_result = st.one_of(
    st.builds(lambda p, d: _result(p, d, "exclusive"), st.sampled_from(POOLS[:3]), st.sampled_from(["d0", "d1", "d2"])),
    st.builds(lambda p: _result(p, "s0", "shared"), st.sampled_from(POOLS[:3])),
    st.builds(lambda p, d: _result(p, d, "admin"), st.sampled_from(POOLS[:3]), st.sampled_from(["d0", "d1"])),
    st.builds(lambda d: _result(NETWORK, d, "exclusive"), st.sampled_from(["x0", "x1"])),
)
# (claim name, its allocation: None = pending, [] = deleted, else results)
a_change = st.tuples(st.sampled_from([f"c{i}" for i in range(6)]), st.one_of(st.none(), st.just([]), st.lists(a_result, min_size=1, max_size=3)))


def _inventory(claims: dict[str, o.ResourceClaim], nodes: tuple[o.Node, ...] = NODE_OBJECTS) -> Inventory:
    return Inventory(classes=CLASSES, slices=SLICES, nodes=nodes, claims=tuple(claims[k] for k in sorted(claims)))


def _warm(index: NodeIndex) -> None:
    """Fill the caches a carried index keeps for the nodes that did not change."""
    for policy in POLICIES:
        for full_last in (False, True):
            index.preference_names(policy, full_last=full_last)
    for n in NODES:
        index.inuse_key(n)
        index.state_key(n, ALL)


def _answers(index: NodeIndex) -> dict[str, Any]:
    return {
        "allocated": index.allocated,
        "shared": index.shared_inuse_key,
        "orders": {(p, f): index.preference_order(p, full_last=f) for p in POLICIES for f in (False, True)},
        "nodes": {
            n: (
                index.in_use(n),
                index.inuse_key(n),
                index.free_units(n),
                index.free_devices(n, frozenset()),
                index.no_free_device(n),
                index.state_key(n, ALL),
                index.node_inventory(n).extra_allocated,
            )
            for n in NODES
        },
        "holders": dict(index.holders()),
        "by_ref": {ref: id(c) for ref, c in index.claims_by_ref().items()},
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(a_change, min_size=1, max_size=4), min_size=1, max_size=8))
def test_a_carried_index_answers_as_a_fresh_one(steps: list[list[tuple[str, list[dict[str, Any]] | None]]]) -> None:
    claims: dict[str, o.ResourceClaim] = {}
    index = NodeIndex(_inventory(claims))
    for changes in steps:
        _warm(index)
        for name, results in changes:
            if results == []:
                claims.pop(name, None)
            else:
                claims[name] = _claim(name, results)
        inventory = _inventory(claims)
        carried = NodeIndex(inventory, previous=index)
        assert carried.views is index.views, "only claims changed: the layout is carried"
        assert _answers(carried) == _answers(NodeIndex(inventory))
        index = carried


def test_an_unchanged_claim_is_not_read_again_and_a_changed_one_touches_its_nodes_only() -> None:
    pool_node = {(DRIVER, n): n for n in NODES}
    a, b = _claim("a", [_result("n0", "d0", "exclusive")]), _claim("b", [_result("n1", "d1", "exclusive"), _result(NETWORK, "x0", "exclusive")])
    before = InUseByNode.of([a, b], AllocatedState(), pool_node)
    same, touched = before.updated([a, b])
    assert touched == set() and same.states is before.states
    moved = _claim("a", [_result("n2", "d2", "exclusive")])
    after, touched = before.updated([moved, b])
    assert touched == {"n0", "n2"}
    assert after.states == {
        "n1": AllocatedState(frozenset({DeviceID(DRIVER, "n1", "d1")})),
        "n2": AllocatedState(frozenset({DeviceID(DRIVER, "n2", "d2")})),
        "": AllocatedState(frozenset({DeviceID(DRIVER, NETWORK, "x0")})),
    }
    assert after.states["n1"] is before.states["n1"], "an untouched node keeps its state object"
    assert after.by_ref == {"ns/a": moved, "ns/b": b}
    gone, touched = after.updated([moved])
    assert touched == {"n1", ""} and set(gone.states) == {"n2"}
    assert gone.by_ref == {"ns/a": moved}
    pending = _claim("a", None)
    waiting, touched = gone.updated([pending])
    assert touched == {"n2"} and waiting.states == {} and waiting.by_ref["ns/a"] is pending


def test_anything_but_claims_changing_lays_the_index_out_again() -> None:
    claims = {"a": _claim("a", [_result("n0", "d0", "exclusive")])}
    index = NodeIndex(_inventory(claims))
    relabelled = (node("n0", rack="r2"), *NODE_OBJECTS[1:])
    assert NodeIndex(_inventory(claims, relabelled), previous=index).views is not index.views
    same_labels = tuple(node(n.name, rack="r1") for n in NODE_OBJECTS)
    assert NodeIndex(_inventory(claims, same_labels), previous=index).views is index.views, "a Node update that kept its labels"
    more = Inventory(classes=CLASSES, slices=(*SLICES, slice_("n3-gpus", pool="n3", driver=DRIVER, node_name="n3", devices=_devices())),
                     nodes=NODE_OBJECTS, claims=tuple(claims.values()))
    grown = NodeIndex(more, previous=index)
    assert "n3" in grown.views and grown.views is not index.views
    assert grown.views == NodeIndex(more).views, "fingerprints and device counts carried for unchanged slices"
    broken = NodeIndex(_inventory(claims), previous=index, invalid_pools={(DRIVER, "n1"): "incomplete"})
    assert broken.views is not index.views
