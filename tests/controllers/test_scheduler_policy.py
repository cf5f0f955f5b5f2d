"""``dra-solver controllers --policy`` reaches every Schedule call the scheduler makes."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest

from controllers import cli
from controllers.metrics import ControllerMetrics
from controllers.scheduler import Solver


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def schedule(self, claims: list[Any], candidates: list[str], **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return SimpleNamespace(node="", nodes=[], reason="no node fits", claims=[])


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


def test_without_the_flag_the_service_default_applies() -> None:
    assert _options().policy == ""


def test_an_unknown_policy_is_refused_at_startup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        _options("--policy", "tightest")
    assert stopped.value.code == 2
    assert "invalid choice: 'tightest'" in capsys.readouterr().err
