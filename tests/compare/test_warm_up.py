"""``compare`` warms both allocators on a node (untimed, briefly) before it times them, so
neither side's time includes imports, OR-Tools' set-up or filling the CEL caches."""

from __future__ import annotations

from typing import Any

import pytest

from dra_solver.model import AllocationRequest, FeatureGates, allocate
from dra_solver.service import compare
from tests.builders import claim, request
from tests.model.alloc_builders import device_class, node, slice_
from tests.model.cpsat_helpers import CEL


def test_compare_warms_both_allocators_before_timing_them(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, float | None]] = []
    real = allocate

    def recording(req: AllocationRequest, **kw: Any) -> Any:
        calls.append((req.allocator, req.time_limit))
        return real(req, **kw)

    monkeypatch.setattr(compare, "allocate", recording)
    objects = [device_class(), node(), slice_("s1"), claim("c", request()).decode()]
    rows = compare.compare_scenario("s", objects, nodes=["node-1"], gates=FeatureGates(), time_limit=5.0, cel=CEL, validate=False)
    assert rows[0].agree and rows[0].cpsat.verdict == "allocated"
    assert calls == [
        ("cpsat", compare.WARM_UP_SECONDS),
        ("backtracking", compare.WARM_UP_SECONDS),
        ("cpsat", 5.0),
        ("backtracking", 5.0),
    ]
