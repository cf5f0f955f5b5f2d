"""Schedule solves once per node state up to names (issue 16): nodes whose GPUs differ only in
names and a per-GPU UUID no selector reads share a solve; a selector that reads the UUID
tells them apart again. Verdicts equal direct allocations either way."""

from __future__ import annotations

import json
from typing import Any

from dra_solver.model import allocate
from dra_solver.model.allocation import AllocationRequest, Inventory
from dra_solver.service import engine as e
from dra_solver.service.inventory import StaticSource, decode_documents
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from tests import builders as b
from tests.service.conftest import cel

NODES = 12


def _cluster() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [b.device_class()]
    for i in range(NODES):
        name = f"node-{i:02d}"
        docs.append(b.node(name))
        sl = b.gpu_slice(name, count=4, name=f"{name}-slice-{i * 7919 % 1000:03d}")
        for g, device in enumerate(sl["spec"]["devices"]):
            device["name"] = f"gpu-{i}-{g}"
            device["attributes"]["uuid"] = {"string": f"GPU-{i:02d}-{g}"}
        docs.append(sl)
    # Two states besides "empty": one GPU in use (nodes 0-3), two in use (node 4).
    for i, (node, devices) in enumerate([(f"node-{n:02d}", [f"gpu-{n}-0"]) for n in range(4)] + [("node-04", ["gpu-4-0", "gpu-4-1"])]):
        used = b.claim(f"used-{i}", ns="x", uid=f"u{i}", cls=b.CLASS, driver=b.DRIVER, pool=node)
        docs.append(used.request("gpu", count=len(devices)).allocated(*devices).obj())
    return docs


def _schedule(expression: str, count: int) -> tuple[Any, list[Any]]:
    """Schedule over every node; each verdict checked against a direct allocation."""
    objects = decode_documents(_cluster())
    engine = e.Engine(source=StaticSource(objects), reservations=ReservationStore(), metrics=Metrics())
    engine.source.start()
    claim = b.SOLVER_TEST.named("c").request("gpu", count=count, selectors=[b.selector(expression)]).obj()
    answer = engine.schedule([json.dumps(claim).encode()], wanted=10_000)
    inventory = Inventory.from_objects(objects)
    decoded = decode_documents([claim])[0]
    for v in answer.verdicts:
        direct = allocate(AllocationRequest(claims=(decoded,), node=inventory.node(v.node), inventory=inventory), cel=cel(), validate=False)
        assert (v.verdict == "feasible") == direct.allocated, v
    return answer, objects


def test_an_unplaceable_claim_costs_one_solve_per_state() -> None:
    answer, _ = _schedule(f'device.attributes["{b.DRIVER}"].model == "h100"', count=1)
    assert answer.node == ""
    assert len(answer.verdicts) == NODES
    # Three states (empty, one GPU in use, two in use), one solve each, whatever the names.
    assert answer.stats.solves == 3


def test_a_selector_reading_the_uuid_keeps_nodes_apart() -> None:
    answer, _ = _schedule(f'device.attributes["{b.DRIVER}"].uuid == "GPU-07-3"', count=1)
    assert answer.node == "node-07"
    assert answer.stats.solves == NODES  # every node's UUIDs differ: no two share a state
