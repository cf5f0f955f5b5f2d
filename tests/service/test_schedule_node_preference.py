"""Schedule's node choice per policy: after the FirstAvailable score, ``pack`` takes the
fullest node that fits (empty nodes stay empty for claims that need a whole node), ``spread``
the emptiest, ``first-fit`` the first in name order. Devices in flight (reservations) count."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra_solver.service import engine as e
from dra_solver.service.bench import device_class, gpu_node
from dra_solver.service.inventory import StaticSource, decode_documents
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from tests import builders as b

DRIVER = "gpu.example.com"


def _engine(used: dict[str, int]) -> e.Engine:
    docs: list[dict[str, Any]] = [device_class()]
    for name in ("n1", "n2", "n3", "n4"):
        docs.extend(gpu_node(name))
    for i, (node, count) in enumerate(sorted(used.items())):
        used = b.claim(f"used-{i}", ns="x", uid=f"u{i}", cls=DRIVER, driver=DRIVER, pool=node)
        docs.append(used.request("gpu", count=count).allocated(*(f"gpu-{g}" for g in range(count))).obj())
    engine = e.Engine(source=StaticSource(decode_documents(docs)), reservations=ReservationStore(), metrics=Metrics())
    engine.source.start()
    return engine


def _schedule(engine: e.Engine, claim: dict[str, Any], policy: str = "", *, reserve: bool = False,
              nodes: tuple[str, ...] = ()) -> e.ScheduleAnswer:
    return engine.schedule([json.dumps(claim).encode()], nodes, opts=e.SolveOptions(policy=policy), reserve=reserve)


@pytest.mark.parametrize(
    ("policy", "node"),
    [("", "n3"), ("pack", "n3"), ("spread", "n1"), ("first-fit", "n1"), ("score", "n1")],
)
def test_node_choice_per_policy(policy: str, node: str) -> None:
    # n1 empty, n2 has 2 GPUs in use, n3 has 6, n4 is full.
    engine = _engine({"n2": 2, "n3": 6, "n4": 8})
    answer = _schedule(engine, b.SOLVER_TEST.named("two").request("gpu", count=2).obj(), policy)
    assert answer.node == node
    assert all(c.result is not None for c in answer.claims)


def test_pack_falls_back_to_the_next_fullest_node_that_fits() -> None:
    engine = _engine({"n2": 2, "n3": 6, "n4": 8})
    assert _schedule(engine, b.SOLVER_TEST.named("four").request("gpu", count=4).obj()).node == "n2"
    assert _schedule(engine, b.SOLVER_TEST.named("eight").request("gpu", count=8).obj()).node == "n1"


def test_explicit_candidates_follow_the_policy_too() -> None:
    engine = _engine({"n2": 2, "n3": 6})
    assert _schedule(engine, b.SOLVER_TEST.named("one").request("gpu").obj(), "pack", nodes=("n1", "n2")).node == "n2"
    assert _schedule(engine, b.SOLVER_TEST.named("one").request("gpu").obj(), "spread", nodes=("n2", "n3")).node == "n2"


def test_reservations_count_as_load() -> None:
    engine = _engine({})
    placed = [_schedule(engine, b.SOLVER_TEST.named(f"c{i}").request("gpu").obj(), "spread", reserve=True).node for i in range(4)]
    assert placed == ["n1", "n2", "n3", "n4"]  # every reservation makes its node fuller
    packed = _engine({})
    placed = [_schedule(packed, b.SOLVER_TEST.named(f"c{i}").request("gpu").obj(), "pack", reserve=True).node for i in range(4)]
    assert placed == ["n1", "n1", "n1", "n1"]


def test_the_firstavailable_score_comes_before_node_preference() -> None:
    # The best alternative (8 GPUs) fits only on the empty node: pack must not prefer n3.
    engine = _engine({"n3": 6})
    claim = b.SOLVER_TEST.named("flexible").request("gpu").obj()
    claim["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "eight", "deviceClassName": DRIVER, "count": 8},
        {"name": "one", "deviceClassName": DRIVER, "count": 1},
    ]}]
    answer = _schedule(engine, claim, "pack")
    assert answer.node == "n1"
    assert answer.score == 8
