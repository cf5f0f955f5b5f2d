"""Issue 8's replays in small: placement policies over a stream of claims (``service.replay``).

- MIG-like GPUs in every device order: ``pack`` never places fewer claims than ``first-fit``
  and reaches the best-fit reference; with whole GPUs listed first it beats first-fit.
- 8-GPU nodes (some partly used), 1/2/4/8-GPU claims, best node by score: ``pack`` node
  choice keeps nodes empty for 8-GPU claims; first node in name order and ``spread`` do not.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dra_solver.model import objects as o
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.decode import decode_all
from dra_solver.service.replay import DEFAULT_CONFIGS, SMALLEST_FIRST, ReplayResult, replay

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import generate

CEL = CelEnvironment()
CONFIGS = {c.name: c for c in (*DEFAULT_CONFIGS, SMALLEST_FIRST)}


def _claims(docs: list[dict[str, object]]) -> list[o.ResourceClaim]:
    return [c for c in decode_all(docs) if isinstance(c, o.ResourceClaim)]


def _run(cluster: list[o.TypedObject], workload: list[o.ResourceClaim], name: str, node_choice: str = "first") -> ReplayResult:
    return replay(cluster, workload, CONFIGS[name], cel=CEL, node_choice=node_choice)


@pytest.mark.parametrize("order", ["whole-first", "partitions-first", "shuffled"])
def test_pack_places_at_least_as_many_as_first_fit_in_every_device_order(order: str) -> None:
    cluster = decode_all(generate.mig_cluster(order, nodes=1))
    workload = _claims(generate.mig_workload(claims=40)["items"])
    first_fit = _run(cluster, workload, "cpsat-first-fit")
    upstream = _run(cluster, workload, "backtracking")
    pack = _run(cluster, workload, "cpsat-pack")
    best_fit = _run(cluster, workload, SMALLEST_FIRST.name)
    assert first_fit.placed == upstream.placed  # the drop-in mode behaves like upstream
    assert pack.placed >= first_fit.placed
    assert pack.placed >= 0.95 * best_fit.placed
    if order == "whole-first":
        assert pack.placed > first_fit.placed, (pack.placed, first_fit.placed)


def test_pack_node_choice_keeps_nodes_for_8_gpu_claims() -> None:
    cluster = decode_all(generate.plain_cluster())
    workload = _claims(generate.plain_workload()["items"])
    eight = {}
    for name in ("cpsat-pack", "cpsat-spread", "cpsat-first-fit", "backtracking"):
        result = _run(cluster, workload, name, "score")
        eight[name] = result.placed_by_size()["8gpu"]["placed"]
        expected = {"cpsat-pack": "pack", "cpsat-spread": "spread", "cpsat-first-fit": "first-fit"}
        assert result.node_policy == expected.get(name, "name-order")
    assert eight["cpsat-pack"] > eight["cpsat-spread"], eight
    assert eight["cpsat-pack"] > eight["cpsat-first-fit"] == eight["backtracking"], eight
