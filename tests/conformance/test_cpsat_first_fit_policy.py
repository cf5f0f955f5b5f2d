"""The ``first-fit`` policy is a drop-in for upstream: wherever the FirstAvailable score does
not force another answer, CP-SAT returns exactly upstream's devices.

"No other term applies" means: upstream allocated, and CP-SAT's best FirstAvailable score is
the score of upstream's answer (where CP-SAT finds a better score it must differ). The search
order term is exact (lexicographic over request, then device position), so the first answer
of upstream's depth-first search is the unique optimum.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dra_solver.model import allocate_cpsat
from dra_solver.model import objects as o
from dra_solver.model.check import check_allocation
from dra_solver.model.score import first_available_score
from tests.conformance.cases import case_paths, cel_environment, compare_results, load_case

ALLOCATED = [
    p for p in case_paths("conformance") + case_paths("realworld") if load_case(p).outcome == "allocated"
]


@pytest.mark.parametrize("path", ALLOCATED, ids=[f"{p.parent.name}/{p.stem}" for p in ALLOCATED])
def test_first_fit_returns_upstreams_devices(path: Path) -> None:
    case = load_case(path)
    request = replace(case.to_request(allocator="cpsat", time_limit=30.0), policy="first-fit")
    cel = cel_environment(case.gates)
    outcome = allocate_cpsat(request, cel=cel)
    assert outcome.allocated, outcome.reason
    assert not check_allocation(request, outcome, cel=cel)
    upstream = first_available_score(
        request.claims, [o.AllocationResult.model_validate(r) for r in case.expected_results]
    )
    if outcome.score > upstream:
        pytest.skip(f"CP-SAT reaches a better FirstAvailable score ({outcome.score} > {upstream})")
    assert outcome.score == upstream
    assert outcome.stats.policy == "first-fit"
    problems = compare_results(case, outcome.results)
    assert not problems, "\n".join(problems)


def test_the_default_policy_is_pack_and_may_differ_from_upstream() -> None:
    """Guards the test above: without the first-fit policy, some answers do differ."""
    differing = 0
    for path in ALLOCATED:
        case = load_case(path)
        if "mig" not in path.stem:
            continue
        request = case.to_request(allocator="cpsat", time_limit=30.0)
        outcome = allocate_cpsat(request, cel=cel_environment(case.gates))
        assert outcome.stats.policy == "pack"
        if outcome.allocated and compare_results(case, outcome.results):
            differing += 1
    if ALLOCATED:
        assert differing > 0
