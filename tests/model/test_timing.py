"""Timing that measures the work: imports and OR-Tools' one-time set-up are never part of a
reported solve time (``model.cpsat``)."""

from __future__ import annotations

import pytest

from dra_solver.model import allocate_cpsat, cpsat
from tests.builders import claim, request
from tests.model.alloc_builders import slice_
from tests.model.cpsat_helpers import CEL, make_request


def test_the_first_model_solve_does_not_count_the_import(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]

    def slow_warm_up() -> None:
        now[0] += 100.0  # what importing OR-Tools and its first solve would cost
        monkeypatch.setattr(cpsat, "_warm", True)

    monkeypatch.setattr(cpsat, "_warm", False)
    monkeypatch.setattr(cpsat, "warm_up", slow_warm_up)
    req = make_request([claim("c", request(count=2)).decode()], [slice_("s1", devices=[{"name": f"d{i}"} for i in range(4)])])
    outcome = allocate_cpsat(req, cel=CEL, clock=lambda: now[0], fast_path=False)
    assert outcome.allocated and outcome.stats.status == "OPTIMAL"
    assert now[0] == 100.0, "the model was solved after a (slow) warm-up"
    assert outcome.stats.wall_seconds < 1.0, "the warm-up is not the attempt's time"
