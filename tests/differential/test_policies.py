"""Every placement policy keeps the FirstAvailable score: the quality objective comes after it,
lexicographically. On generated problems all policies reach the same verdict and the same
score (the best one), every answer is valid, and each policy is deterministic."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given

from dra_solver.model import POLICIES, allocate
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.errors import AllocationError
from tests.differential.strategies import Scenario, scenarios
from tests.differential.test_differential import check_valid

CEL = CelEnvironment()


@given(scenarios())
def test_no_policy_trades_the_firstavailable_score(scenario: Scenario) -> None:
    base = scenario.request("cpsat")
    seen: dict[str, tuple[str, int]] = {}
    for policy in POLICIES:
        request = replace(base, policy=policy)
        try:
            outcome = allocate(request, cel=CEL)
        except AllocationError as err:
            seen[policy] = ("error", 0)
            del err
            continue
        check_valid(request, outcome, CEL)
        assert outcome.stats is not None and outcome.stats.policy == policy
        seen[policy] = ("allocated" if outcome.allocated else "unsatisfiable", outcome.score)
        again = allocate(request, cel=CEL)
        assert [r.to_api() for r in again.results] == [r.to_api() for r in outcome.results]
    assert len(set(seen.values())) == 1, seen
