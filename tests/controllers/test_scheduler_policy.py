"""The scheduler's Schedule calls: ``dra-solver controllers --policy`` reaches every one, and an
answer that did not evaluate every candidate node is not taken as "the pod does not fit"."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest

from dra_solver.controllers import cli
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.scheduler import Solver, SolverError
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb


class RecordingClient:
    def __init__(self, evaluated: tuple[str, ...] = ("node-a",)) -> None:
        self.calls: list[dict[str, Any]] = []
        self.evaluated = evaluated

    def schedule(self, claims: list[Any], candidates: list[str], **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        nodes = [SimpleNamespace(node=n, verdict=pb.VERDICT_UNSCHEDULABLE, reason="cannot allocate all claims") for n in self.evaluated]
        return SimpleNamespace(node="", nodes=nodes, reason="no node fits", claims=[])


def _options(*argv: str) -> Any:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.options_from(parser.parse_args(list(argv)))


def test_the_policy_flag_reaches_schedule_calls() -> None:
    options = _options("--policy", "spread")
    assert options.policy == "spread"
    client = RecordingClient()
    solver = Solver(client, ControllerMetrics(), policy=options.policy)
    placement = solver.schedule([], ["node-a"], pod="ns/pod")
    assert placement.node == "" and placement.reason == "no node fits"
    assert client.calls[0]["policy"] == "spread"
    assert client.calls[0]["reserve"] is True
    assert client.calls[0]["validate"] == "ignore", "claims from the API server are already validated"


def test_without_the_flag_the_service_default_applies() -> None:
    assert _options().policy == ""


def test_an_unknown_policy_is_refused_at_startup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        _options("--policy", "tightest")
    assert stopped.value.code == 2
    assert "invalid choice: 'tightest'" in capsys.readouterr().err


def test_an_answer_that_ran_out_of_time_is_not_a_verdict() -> None:
    """The solver stopped at its deadline after node-a: node-b might have fitted. Parking the pod
    as unschedulable would leave it waiting for an event that never comes; it is retried."""
    solver = Solver(RecordingClient(evaluated=("node-a",)), ControllerMetrics())
    with pytest.raises(SolverError) as err:
        solver.schedule([], ["node-a", "node-b"], pod="ns/pod")
    assert err.value.code == "DEADLINE_EXCEEDED"
    assert "1 of 2 candidate nodes not evaluated in time" in err.value.message
    placement = Solver(RecordingClient(evaluated=("node-a", "node-b")), ControllerMetrics()).schedule([], ["node-a", "node-b"], pod="ns/pod")
    assert placement.node == "" and set(placement.verdicts or {}) == {"node-a", "node-b"}
