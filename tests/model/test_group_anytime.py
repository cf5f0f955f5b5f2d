"""The joint path is anytime: when its model cannot finish in time, the greedy placement made
before it is the answer (FEASIBLE), and it is valid; with neither, the deadline is an error.

The joint model's solve is replaced by one that runs out of time (deterministic, no clocks)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dra_solver import model
from dra_solver.model.cpsat import group_model
from tests import gang_builders as g

CEL = model.CelEnvironment()


def _out_of_time(self: group_model.JointModel) -> group_model.JointAnswer:
    return group_model.JointAnswer("UNKNOWN")


def test_greedy_placement_answers_when_the_joint_model_runs_out_of_time(monkeypatch: pytest.MonkeyPatch) -> None:
    objs = g.cluster([g.Rack("r1", [g.Node(gpus=4), g.Node(gpus=4)], fabric=1), g.Rack("r2", [g.Node(gpus=8), g.Node(gpus=8, busy=4)], fabric=1)])
    req = g.group_request(objs, [8, 2, 2], shared=True, path="joint")
    monkeypatch.setattr(group_model.JointModel, "solve", _out_of_time)
    out = model.schedule_group(req, cel=CEL)
    assert out.placed and out.stats.status == "FEASIBLE" and out.stats.path == "joint"
    assert out.domain == "r2" and out.pods_placed == 3
    assert model.check_group(req, out, cel=CEL) == []


def test_without_a_greedy_placement_the_deadline_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two nodes with 7 free GPUs; pods of 3, 3, 2, 2, 2, 2 fit only as 3+2+2 on each. Greedy
    # (most devices first, first node that fits) puts both 3s on one node and places five.
    objs = g.cluster([g.Rack("r1", [g.Node(gpus=8, busy=1), g.Node(gpus=8, busy=1)])])
    req = g.group_request(objs, [3, 3, 2, 2, 2, 2], path="joint")
    assert model.schedule_group(req, cel=CEL).placed  # the joint model finds it
    monkeypatch.setattr(group_model.JointModel, "solve", _out_of_time)
    with pytest.raises(model.SolveTimeout):
        model.schedule_group(req, cel=CEL)
    # With minCount 5 the greedy placement is an answer.
    out = model.schedule_group(replace(req, min_count=5), cel=CEL)
    assert out.placed and out.pods_placed == 5 and out.stats.status == "FEASIBLE"
    assert model.check_group(replace(req, min_count=5), out, cel=CEL) == []
