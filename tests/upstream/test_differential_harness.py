"""The differential harness against upstream can fail: run with a deliberately wrong side, it
stops on the first disagreement no documented deviation explains, shrinks it, and prints the
minimal input (the harness ``note``s it; hypothesis attaches it to the error and pytest prints
it).

A harness that passed whatever our allocators answered would prove nothing; these tests run
``check_against_upstream`` unchanged with one of our allocators mutated.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from dra_solver.model.allocation import AllocationOutcome, AllocationRequest
from dra_solver.model.cel import CelEnvironment
from dra_solver.service import upstream
from tests.differential.strategies import Scenario, upstream_scenarios
from tests.upstream.test_differential_upstream import _ours, check_against_upstream


def _cpsat_refuses(request: AllocationRequest, cel: CelEnvironment) -> tuple[str, AllocationOutcome | None, str]:
    """CP-SAT answering unsatisfiable wherever it allocated: no deviation (all make upstream
    refuse more, never less) can explain that."""
    verdict, outcome, error = _ours(request, cel)
    if request.allocator == "cpsat" and verdict == "allocated":
        return "unsatisfiable", None, ""
    return verdict, outcome, error


def _port_refuses(request: AllocationRequest, cel: CelEnvironment) -> tuple[str, AllocationOutcome | None, str]:
    verdict, outcome, error = _ours(request, cel)
    if request.allocator == "backtracking" and verdict == "allocated":
        return "unsatisfiable", None, ""
    return verdict, outcome, error


def _cpsat_scores_lower(request: AllocationRequest, cel: CelEnvironment) -> tuple[str, AllocationOutcome | None, str]:
    verdict, outcome, error = _ours(request, cel)
    if request.allocator == "cpsat" and outcome is not None and outcome.allocated:
        return verdict, dataclasses.replace(outcome, score=outcome.score - 1), error
    return verdict, outcome, error


@pytest.mark.parametrize(("wrong", "message"), [
    pytest.param(_cpsat_refuses, "CP-SAT differs from upstream and no documented deviation explains it", id="cpsat-verdict"),
    pytest.param(_port_refuses, "backtracking differs from upstream", id="port-verdict"),
    pytest.param(_cpsat_scores_lower, "CP-SAT differs from upstream and no documented deviation explains it",
                 id="cpsat-score"),
])
def test_an_unexplained_disagreement_fails_with_its_minimal_example(
    upstream_allocator: upstream.UpstreamAllocator, wrong: object, message: str,
) -> None:
    tally: Counter[str] = Counter()
    cel = CelEnvironment()

    @settings(max_examples=100, derandomize=True, database=None, deadline=None, report_multiple_bugs=False,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
    @given(upstream_scenarios())
    def run(scenario: Scenario) -> None:
        check_against_upstream(scenario, upstream_allocator, cel, ours=wrong, tally=tally)  # type: ignore[arg-type]

    with pytest.raises(AssertionError, match=message) as failure:
        run()
    notes = "\n".join(getattr(failure.value, "__notes__", []))
    assert "Failing test case" in notes or "Falsifying example" in notes, notes
    # The noted input is the shrunk one: JSON with one claim of one plain request, one slice of
    # GPUs, and none of the features the failure does not need.
    shown = json.loads(notes[notes.index("{\n"):notes.rindex("\n}") + 2])
    kinds = Counter(obj["kind"] for obj in shown["objects"])
    assert kinds == Counter({"DeviceClass": 2, "ResourceSlice": 1, "Node": 1, "ResourceClaim": 1}), kinds
    (claim,) = (obj for obj in shown["objects"] if obj["kind"] == "ResourceClaim")
    assert claim["spec"]["devices"] == {"requests": [{"name": "req-0", "exactly": {
        "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}, claim
    assert shown["inUse"] == []
    assert tally["examples"] >= 1


def test_an_upstream_timeout_is_inconclusive_not_a_failure() -> None:
    """Upstream's search hitting the time limit (an input exponential for first fit) is no
    answer to compare against: counted, not failed."""

    class TimesOut:
        def run(self, document: dict[str, object]) -> upstream.UpstreamAnswer:
            return upstream.UpstreamAnswer("timeout", error="filter operation aborted: context deadline exceeded",
                                           tier="incubating")

    tally: Counter[str] = Counter()

    @settings(max_examples=5, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(upstream_scenarios())
    def run(scenario: Scenario) -> None:
        check_against_upstream(scenario, TimesOut(), CelEnvironment(), ours=_cpsat_refuses, tally=tally)  # type: ignore[arg-type]

    run()
    assert tally["inconclusive: upstream hit its time limit"] == tally["examples"] == 5
