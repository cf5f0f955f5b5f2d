"""Lexicographic solving for the group models: one objective level at a time.

API:
- ``Level(expr, sense, span)``: one objective level, ``max`` or ``min``; ``span`` bounds
  ``|expr|`` (used to stack several levels into one weighted sum).
- ``stacked(levels) -> Level``: one ``min`` level that orders solutions like the levels in
  turn (each level's weight exceeds what the levels below can add up to); ``stages_of(levels)``
  as few stacked stages as fit in 64 bits.
- ``solve_stages(model, stages, *, time_left, hints) -> Staged``: optimise ``stages[0]``,
  fix its value, optimise ``stages[1]``, ...; each solve is hinted with the previous answer.
  The placement levels (from the third stage on) each have a deterministic work budget
  (``LEVEL_WORK``), so a hard packing question cannot take the whole deadline and the answer
  does not depend on the machine's speed.
  When the time runs out in a stage its best answer so far is kept (``status`` FEASIBLE,
  ``gap`` relative to that stage's bound) and later stages are skipped; no answer in the first
  stage is ``UNKNOWN`` (or ``INFEASIBLE`` when proven).

Why stages: pods placed, the FirstAvailable score and the placement levels have ranges whose
product overflows a single 64-bit weighted objective on large clusters, and a proven optimum
per level is what the brute force in tests compares with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ortools.sat.python import cp_model

from dra_solver.model.errors import SolveTimeout

Sense = Literal["max", "min"]


@dataclass(frozen=True, slots=True)
class Level:
    expr: Any
    sense: Sense
    span: int = 0


MAX_WEIGHT = 1 << 60
"""Largest weight a stacked objective may reach (CP-SAT's objective must stay in 64 bits)."""


def stages_of(levels: Sequence[Level]) -> list[Level]:
    """``levels`` as few stages as possible: consecutive levels stacked while their weights
    fit in ``MAX_WEIGHT``, a new stage where they would not."""
    out: list[Level] = []
    group: list[Level] = []
    weight = 1
    for level in levels:
        factor = 2 * level.span + 1
        if group and weight * factor > MAX_WEIGHT:
            out.append(stacked(group))
            group, weight = [], 1
        group.append(level)
        weight *= factor
    if group:
        out.append(stacked(group))
    return out


def stacked(levels: Sequence[Level]) -> Level:
    """One minimised level ordering solutions by ``levels`` lexicographically."""
    total: Any = 0
    weight = 1
    for level in reversed(levels):
        sign = 1 if level.sense == "min" else -1
        total = total + sign * weight * level.expr
        weight *= 2 * level.span + 1
    return Level(total, "min", weight)


@dataclass
class Staged:
    status: str
    """OPTIMAL (every stage proven), FEASIBLE (time ran out in some stage), INFEASIBLE, UNKNOWN."""
    solver: cp_model.CpSolver | None = None
    """The solver of the last stage that found an answer (read the solution from it)."""
    gap: float = 0.0
    values: list[int] = field(default_factory=list)
    """Each completed stage's objective value."""
    solves: int = 0

    def value(self, expr: Any) -> int:
        assert self.solver is not None
        if isinstance(expr, int):
            return expr
        return int(self.solver.value(expr))


LEVEL_WORK = 5.0
"""CP-SAT deterministic time (roughly seconds) for each placement level after the first two."""


def _solver(time_limit: float | None, work_limit: float | None = None) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = 1
    params.random_seed = 0
    params.log_search_progress = False
    params.presolve_inclusion_work_limit = 0
    if time_limit is not None:
        params.max_time_in_seconds = max(time_limit, 0.001)
    if work_limit is not None:
        params.max_deterministic_time = work_limit
    return solver


def solve_stages(
    model: cp_model.CpModel,
    stages: Sequence[Level],
    *,
    time_left: Callable[[], float | None],
    hints: Sequence[Any] = (),
    level_work: float | None = LEVEL_WORK,
) -> Staged:
    out = Staged(status="UNKNOWN")
    for n, stage in enumerate(stages):
        if isinstance(stage.expr, int) and n > 0:
            out.values.append(stage.expr)  # nothing to choose at this level
            continue
        if stage.sense == "max":
            model.maximize(stage.expr)
        else:
            model.minimize(stage.expr)
        try:
            limit = time_left()
        except SolveTimeout:
            if n == 0:
                raise
            out.status = "FEASIBLE"  # the earlier stages' answer stands
            return out
        # The placement levels (after pods placed and score) may take long to prove on big
        # models: each gets a deterministic work budget, so the answer stays the same from run
        # to run (a wall-clock cut would not) and comes back FEASIBLE with its gap when cut.
        solver = _solver(limit, level_work if n >= 2 else None)
        status = solver.solve(model)
        out.solves += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if n == 0:
                out.status = solver.status_name(status)
                return out
            out.status = "FEASIBLE"  # the earlier stages' answer stands; this one is unproven
            return out
        out.solver = solver
        value = round(solver.objective_value)
        out.values.append(value)
        if status == cp_model.FEASIBLE:
            bound = solver.best_objective_bound
            out.gap = abs(bound - value) / max(1.0, abs(bound))
            out.status = "FEASIBLE"
            return out
        model.add(stage.expr == value)
        model.clear_hints()  # type: ignore[no-untyped-call]
        for var in hints:
            model.add_hint(var, solver.value(var))
    out.status = "OPTIMAL"
    return out
