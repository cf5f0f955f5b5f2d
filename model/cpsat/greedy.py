"""The fast path: first-fit without backtracking, for problems where that is enough.

API:
- ``greedy(problem) -> Choices | None``: the first option of every request and its chosen
  candidates, or None when the problem is not simple or first-fit does not find an allocation (then the CP-SAT
  model decides; a greedy failure proves nothing).

Simple means: every candidate device has the same capacities (so no policy prefers one
device over another by size and only upstream's order is left to break ties), no ``firstAvailable`` (so the score is 0 for every answer, hence optimal), no
claim constraints, no shared counters and no shareable devices among the candidates. Then
the only interaction between requests is exclusive use, and taking the first free eligible
devices in search order either succeeds (a valid, optimal answer, the one upstream's search
also finds first) or the model is asked. Typical single-claim requests ("one GPU") never
reach the solver.
"""

from __future__ import annotations

from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat.problem import Candidate, Choices, Problem, request_of
from dra_solver.model.matching import ALLOCATION_RESULTS_MAX_SIZE, RequestKey


def is_simple(problem: Problem) -> bool:
    if problem.deferred_errors:
        return False
    for plan in problem.plans:
        if plan.constraints:
            return False
        if any(req.first_available for req in plan.requests):
            return False
    gates = problem.request.gates
    capacities: set[tuple[tuple[str, object], ...]] = set()
    for option in problem.all_options():
        if not option.possible:
            return False
        for candidate in option.candidates:
            if candidate.multi:
                return False
            if gates.partitionable_devices and candidate.device.counters:
                return False
            capacities.add(tuple(sorted((n, c.value) for n, c in candidate.device.capacity.items())))
            if len(capacities) > 1:
                return False
    return True


def greedy(problem: Problem) -> Choices | None:
    if not is_simple(problem):
        return None
    exclusive: set[DeviceID] = set()
    chosen: dict[RequestKey, tuple[Candidate, ...]] = {}
    selected: dict[RequestKey, RequestKey] = {}
    for claim in problem.options:
        in_claim: set[DeviceID] = set()
        total = 0
        for options in claim:
            option = options[0]
            view = option.view
            picks: list[Candidate] = []
            for candidate in option.candidates:
                device = candidate.id
                free = device not in in_claim and (view.admin_access or device not in exclusive)
                if not free:
                    if view.is_all:
                        return None
                    continue
                picks.append(candidate)
                in_claim.add(device)
                if not view.admin_access:
                    exclusive.add(device)
                if not view.is_all and len(picks) == view.count:
                    break
            if not view.is_all and len(picks) < view.count:
                return None
            total += len(picks)
            chosen[option.key] = tuple(picks)
            selected[request_of(option.key)] = option.key
        if total > ALLOCATION_RESULTS_MAX_SIZE:
            return None
    return Choices(selected, chosen)
