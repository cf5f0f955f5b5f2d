"""Schedule's shortcuts (pruning, one solve per group of identical nodes, the answer cache, the
reduced per-node inventory) never change an answer: every node's verdict equals a direct
allocation on that node with the whole inventory."""

from __future__ import annotations

import json
from typing import Any

from dra_solver.model import allocate
from dra_solver.model.allocation import AllocationRequest, Inventory
from dra_solver.model.decode import decode_object
from dra_solver.service import engine as e
from dra_solver.service.bench import gpu_node, mig_node, pod_claim
from dra_solver.service.inventory import StaticSource, decode_documents
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from tests import builders as b
from tests.service.conftest import cel


def _cluster() -> list[dict[str, Any]]:
    from dra_solver.service.bench import device_class

    docs: list[dict[str, Any]] = [device_class()]
    for i in range(24):
        docs.extend((mig_node if i % 3 == 0 else gpu_node)(f"n{i:02d}"))
    # Some nodes partly used, some identically so (same devices in use).
    for i, (node, devices) in enumerate([("n01", ["gpu-0"]), ("n02", ["gpu-0"]), ("n04", [f"gpu-{k}" for k in range(8)]),
                                         ("n05", ["gpu-3", "gpu-4"]), ("n03", ["gpu-0"]), ("n06", ["gpu-1-1g-10gb-0"])]):
        used = b.claim(f"used-{i}", ns="x", uid=f"u{i}", cls=b.CLASS, driver=b.DRIVER, pool=node)
        docs.append(used.request("gpu", count=len(devices)).allocated(*devices).obj())
    return docs


def test_schedule_verdicts_equal_direct_allocation() -> None:
    objects = decode_documents(_cluster())
    env = cel()
    engine = e.Engine(source=StaticSource(objects), reservations=ReservationStore(), metrics=Metrics())
    engine.source.start()
    inventory = Inventory.from_objects(objects)
    import random

    rng = random.Random(3)
    claims = [b.SOLVER_TEST.named("one").request("gpu").obj(), b.SOLVER_TEST.named("seven").request("gpu", count=7).obj(), b.SOLVER_TEST.named("eight").request("gpu", count=8).obj(), pod_claim(1, shape="mig", rng=rng),
              pod_claim(2, shape="mig", rng=rng), pod_claim(3, shape="mig", rng=rng)]
    total_solves = 0
    for claim in claims:
        answer = engine.schedule([json.dumps(claim).encode()], wanted=10_000)
        total_solves += answer.stats.solves
        verdicts = {v.node: v for v in answer.verdicts}
        assert len(verdicts) == 24
        decoded = decode_object(claim)
        for node in inventory.node_names():
            request = AllocationRequest(claims=(decoded,), node=inventory.node(node), inventory=inventory)  # type: ignore[arg-type]
            direct = allocate(request, cel=env, validate=False)
            v = verdicts[node]
            assert (v.verdict == "feasible") == direct.allocated, (claim["metadata"]["name"], node, v)
            if direct.allocated:
                assert v.score == direct.score
        assert answer.stats.groups < 24, "identical nodes were solved once"
    assert total_solves < 6 * 24 / 2
