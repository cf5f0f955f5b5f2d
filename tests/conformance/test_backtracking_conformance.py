"""Every shared allocator case through the backtracking allocator: upstream's outcome, and
where upstream allocated, exactly upstream's devices and search-step counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_solver.model.backtracking import allocate_backtracking
from dra_solver.model.errors import AllocationError, InvalidInput
from tests.conformance.cases import (
    case_paths,
    cel_environment,
    compare_results,
    error_matches,
    load_case,
)

CONFORMANCE = case_paths("conformance")
REALWORLD = case_paths("realworld")


def _run(path: Path) -> None:
    case = load_case(path)
    if case.outcome == "invalid":
        with pytest.raises(InvalidInput):
            case.to_request()
        return
    request = case.to_request(allocator="backtracking", time_limit=30.0)
    cel = cel_environment(case.gates)
    if case.outcome == "error":
        with pytest.raises(AllocationError) as caught:
            allocate_backtracking(request, cel=cel)
        assert error_matches(case, str(caught.value)), f"want {case.error!r}, got {caught.value}"
        return
    outcome = allocate_backtracking(request, cel=cel)
    if case.outcome == "unsatisfiable":
        assert not outcome.allocated, f"allocated: {[r.to_api() for r in outcome.results]}"
    else:
        assert outcome.allocated, outcome.reason
        problems = compare_results(case, outcome.results)
        assert not problems, "\n".join(problems)
    if case.expected_steps is not None:
        assert outcome.stats.steps == case.expected_steps


@pytest.mark.skipif(not CONFORMANCE, reason="shared test data not found (set DRA_SHARED_DIR)")
@pytest.mark.parametrize("path", CONFORMANCE, ids=[p.stem for p in CONFORMANCE])
def test_conformance_case(path: Path) -> None:
    _run(path)


@pytest.mark.skipif(not REALWORLD, reason="shared test data not found (set DRA_SHARED_DIR)")
@pytest.mark.parametrize("path", REALWORLD, ids=[p.stem for p in REALWORLD])
def test_realworld_case(path: Path) -> None:
    _run(path)
