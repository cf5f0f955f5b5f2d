"""The joint path is anytime: when its model cannot finish in time, the greedy placement made
before it is the answer (FEASIBLE), and it is valid; with neither, the deadline is an error.

The joint model's solve is replaced by one that runs out of time (deterministic, no clocks)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from ortools.sat.python import cp_model

from dra_solver import model
from dra_solver.model import group as group_mod
from dra_solver.model.cpsat import group_model, group_solve
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


def test_the_greedy_placement_answers_when_the_bounds_run_out_of_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # At thousands of nodes the bounds (per-node solves in every domain) alone can outlast the
    # deadline: the greedy placement is made before them.
    objs = g.cluster([g.Rack("r1", [g.Node(gpus=4), g.Node(gpus=4)], fabric=1), g.Rack("r2", [g.Node(gpus=8), g.Node(gpus=8, busy=4)], fabric=1)])
    req = g.group_request(objs, [8, 2, 2], shared=True, path="joint")

    def out_of_time(*_args: object) -> tuple[int, ...]:
        raise model.SolveTimeout("podgroup: the time limit passed")

    monkeypatch.setattr(group_mod._Runner, "_bound", out_of_time)
    out = model.schedule_group(req, cel=CEL)
    assert out.placed and out.stats.status == "FEASIBLE" and out.pods_placed == 3 and out.domain == "r2"
    assert model.check_group(req, out, cel=CEL) == []


def test_a_later_stage_out_of_time_keeps_the_earlier_stages_answer() -> None:
    m = cp_model.CpModel()
    x = m.new_int_var(0, 3, "x")
    y = m.new_int_var(0, 3, "y")
    m.add(x + y <= 4)
    calls = []

    def time_left() -> float:
        calls.append(1)
        if len(calls) > 1:
            raise model.SolveTimeout("the time limit passed")
        return 5.0

    staged = group_solve.solve_stages(m, [group_solve.Level(x, "max"), group_solve.Level(y, "max")], time_left=time_left)
    assert staged.status == "FEASIBLE" and staged.values == [3] and staged.value(x) == 3
    with pytest.raises(model.SolveTimeout):  # nothing found at all: the caller's deadline error
        group_solve.solve_stages(m, [group_solve.Level(x, "max")], time_left=time_left)


def test_placement_levels_get_a_deterministic_work_budget() -> None:
    # A packing level no solver proves within the budget (a strongly correlated knapsack): the
    # stages before it are proven, the level's best answer is kept (FEASIBLE, with its gap),
    # the same on every run; a bigger budget never does worse.
    rng = random.Random(7)
    weights = [rng.randint(10**6, 2 * 10**6) for _ in range(200)]

    def staged(work: float) -> group_solve.Staged:
        m = cp_model.CpModel()
        xs = [m.new_bool_var(f"x{i}") for i in range(200)]
        m.add(sum(w * x for w, x in zip(weights, xs, strict=True)) <= sum(weights) // 2)
        stages = [group_solve.Level(xs[0], "max"), group_solve.Level(xs[1], "max"),
                  group_solve.Level(sum((w + 100_000) * x for w, x in zip(weights, xs, strict=True)), "max")]
        return group_solve.solve_stages(m, stages, time_left=lambda: 60.0, hints=xs, level_work=work)

    runs = [staged(0.001) for _ in range(2)]
    assert runs[0].values[:2] == [1, 1] and runs[0].status == "FEASIBLE" and runs[0].gap > 0
    assert runs[0].values == runs[1].values
    assert staged(0.02).values[2] >= runs[0].values[2]
