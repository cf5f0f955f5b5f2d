"""What one allocation attempt cost and how it ended: the statistics every allocator reports.

API:
- ``SolveStats``: allocator, status, wall time (the solve itself: imports and one-time
  warm-up are never included, see ``model.warm_up``), model size, search steps, objective
  figures, the policy and the solver parameters.

Why its own module: answers (``model.allocation``) and errors (``model.errors``: a timeout or a
node-local failure says how far the attempt got) both carry it, and errors sit below answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SolveStats:
    allocator: str
    status: str
    """cpsat: OPTIMAL/FEASIBLE/INFEASIBLE/UNKNOWN/MODEL_INVALID/TRIVIAL; backtracking: FOUND/EXHAUSTED/DEADLINE."""
    wall_seconds: float
    variables: int = 0
    constraints: int = 0
    steps: int = 0
    """Backtracking: upstream's allocateOne invocation count."""
    objective: float | None = None
    best_bound: float | None = None
    gap: float | None = None
    policy: str = ""
    parameters: Mapping[str, str] = field(default_factory=dict)
    reused: bool = False
    """Not solved for this answer: mapped from an earlier solve of a node in the same state,
    whose figures the others are."""
