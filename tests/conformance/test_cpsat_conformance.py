"""Every shared allocator case through the CP-SAT allocator: upstream's outcome (allocated,
unsatisfiable or error) on all of them, and every allocation passes the independent checker.

Devices may differ from upstream's where several answers are valid (CP-SAT maximises the
FirstAvailable score and breaks ties its own way); the outcome and validity may not. The
score is never below the one of upstream's answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_solver.model import allocate_cpsat
from dra_solver.model import objects as o
from dra_solver.model.check import check_allocation
from dra_solver.model.errors import AllocationError, InvalidInput
from dra_solver.model.score import first_available_score
from tests.conformance.cases import (
    Case,
    case_paths,
    cel_environment,
    error_substring,
    load_case,
)

CONFORMANCE = case_paths("conformance")
REALWORLD = case_paths("realworld")


def _upstream_score(case: Case, claims: tuple[o.ResourceClaim, ...]) -> int:
    results = [o.AllocationResult.model_validate(r) for r in case.expected_results]
    return first_available_score(claims, results)


def _run(path: Path) -> None:
    case = load_case(path)
    if case.outcome == "invalid":
        with pytest.raises(InvalidInput):
            case.to_request(allocator="cpsat")
        return
    request = case.to_request(allocator="cpsat", time_limit=30.0)
    cel = cel_environment(case.gates)
    if case.outcome == "error":
        with pytest.raises(AllocationError) as caught:
            allocate_cpsat(request, cel=cel)
        wanted = error_substring(case)
        if wanted:
            assert wanted in str(caught.value)
        return
    outcome = allocate_cpsat(request, cel=cel)
    if case.outcome == "unsatisfiable":
        assert not outcome.allocated, f"allocated: {[r.to_api() for r in outcome.results]}"
        return
    assert outcome.allocated, outcome.reason
    violations = check_allocation(request, outcome, cel=cel)
    assert not violations, "\n".join(str(v) for v in violations)
    assert outcome.score >= _upstream_score(case, request.claims)


@pytest.mark.skipif(not CONFORMANCE, reason="shared test data not found (set DRA_SHARED_DIR)")
@pytest.mark.parametrize("path", CONFORMANCE, ids=[p.stem for p in CONFORMANCE])
def test_conformance_case(path: Path) -> None:
    _run(path)


@pytest.mark.skipif(not REALWORLD, reason="shared test data not found (set DRA_SHARED_DIR)")
@pytest.mark.parametrize("path", REALWORLD, ids=[p.stem for p in REALWORLD])
def test_realworld_case(path: Path) -> None:
    _run(path)
