"""Solving an ``AllocationModel`` and turning the solution into per-claim choices.

API:
- ``SolverConfig(time_limit, ...)``: the solver parameters (``SolverConfig.for_model`` picks
  them by model size); ``parameters()`` renders them for ``SolveStats.parameters``.
- ``solve(model, config) -> Solution``: status, choices per option, objective figures.
- ``Solution``: ``status`` (OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, MODEL_INVALID), ``choices``
  (``model.cpsat.problem.Choices``: the selected option of every request and the chosen
  candidates of every option, by ``RequestKey``), ``score`` and ``score_bound`` (the
  FirstAvailable score and a proven upper bound), ``gap``.
- ``solve_trivial()``: one solve of a two-variable model (OR-Tools' one-time set-up; see
  ``model.cpsat.warm_up``).

Presolve: off for small models (its fixed cost dominates there), on for larger ones but without
the quadratic inclusion detection (see ``SolverConfig``).

Why one worker: CP-SAT with several workers races them, and under a time limit which one wins
depends on timing; one worker with a fixed seed gives the same answer for the same input,
which the project promises. The models of one node are small enough that a single worker
proves optimality in milliseconds; the deadline still bounds the rare hard case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import floor

from ortools.sat.python import cp_model

from dra_solver.model.cpsat.model import AllocationModel
from dra_solver.model.cpsat.problem import Choices, request_of
from dra_solver.model.score import subrequest_weight

SMALL_MODEL_VARIABLES = 150
"""Up to this many variables presolve costs more than it saves (measured: an 8-GPU x 7-partition
node solves in 1.0 ms without presolve and 2.6 ms with it)."""


@dataclass(frozen=True, slots=True)
class SolverConfig:
    time_limit: float | None
    """Seconds the solver may take (None: no limit)."""
    num_workers: int = 1
    random_seed: int = 0
    relative_gap: float = 0.0
    presolve: bool = True
    presolve_inclusion_work_limit: int = 0
    """0 turns off presolve's constraint-inclusion detection, which is quadratic in the
    at-most-one constraints that distinctAttribute and exclusive use create (measured: 3.7 s
    versus 71 ms on 320 devices, 8 values, 9 distinct requests)."""

    @staticmethod
    def for_model(variables: int, *, time_limit: float | None) -> SolverConfig:
        return SolverConfig(time_limit=time_limit, presolve=variables > SMALL_MODEL_VARIABLES)

    def parameters(self) -> dict[str, str]:
        out = {
            "num_workers": str(self.num_workers),
            "random_seed": str(self.random_seed),
            "relative_gap_limit": repr(self.relative_gap),
            "cp_model_presolve": str(self.presolve).lower(),
            "presolve_inclusion_work_limit": str(self.presolve_inclusion_work_limit),
        }
        if self.time_limit is not None:
            out["max_time_in_seconds"] = f"{self.time_limit:.6f}"
        return out


@dataclass(frozen=True, slots=True)
class Solution:
    status: str
    choices: Choices = field(default_factory=lambda: Choices({}, {}))
    score: int = 0
    score_bound: int | None = None
    gap: float | None = None
    wall_seconds: float = 0.0


def solve(built: AllocationModel, config: SolverConfig) -> Solution:
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = config.num_workers
    params.random_seed = config.random_seed
    params.relative_gap_limit = config.relative_gap
    params.cp_model_presolve = config.presolve
    params.presolve_inclusion_work_limit = config.presolve_inclusion_work_limit
    params.log_search_progress = False
    if config.time_limit is not None:
        params.max_time_in_seconds = max(config.time_limit, 0.001)
    status = solver.solve(built.model)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Solution(status=name, wall_seconds=solver.wall_time)
    selected = {request_of(key): key for key, var in built.selected.items() if solver.boolean_value(var)}
    score = sum(subrequest_weight(key.subrequest) for key in selected.values() if key.subrequest is not None)
    bound: int | None = score
    gap: float | None = 0.0
    if status == cp_model.FEASIBLE and built.score_weight:
        # objective = weight * score - penalty with 0 <= penalty < weight.
        best = solver.best_objective_bound
        bound = floor((best + built.max_penalty) / built.score_weight)
        bound = max(bound, score)
        # The gap covers the whole objective (score and policy): 0 only when proven optimal.
        value = solver.objective_value
        gap = max(0.0, best - value) / max(1.0, abs(best))
    return Solution(
        status=name,
        choices=Choices(selected, built.choices.extract(solver)),
        score=score,
        score_bound=bound,
        gap=gap,
        wall_seconds=solver.wall_time,
    )


def solve_trivial() -> None:
    """Solve a two-variable model: the first solve of a process pays OR-Tools' one-time set-up
    (a few milliseconds), which must not land in an allocation's reported time."""
    model = cp_model.CpModel()
    x, y = model.new_bool_var("x"), model.new_bool_var("y")
    model.add(x + y == 1)
    model.maximize(x)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.solve(model)
