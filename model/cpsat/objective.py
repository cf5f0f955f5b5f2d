"""The objective of the CP-SAT model: the FirstAvailable score, then the placement policy.

API:
- ``add_objective(model, problem, choices, selected, *, policy, used) -> Scale``: sets
  ``model.maximize(...)``: the scheduler's FirstAvailable score (``model.score``: ``8 - i`` per
  chosen subrequest ``i``), then the policy's levels below it, lexicographically by weights
  (``stack``). ``used(candidate)`` is the model's "device newly in use" literal.
- ``Scale(score_weight, max_penalty)``: objective = ``score_weight * score - penalty`` with
  ``0 <= penalty <= max_penalty < score_weight``; ``model.cpsat.solve`` recovers the score and
  its bound from it.

Policies (``model.policy``), in levels that each dominate the ones below: ``pack`` (the
default) opens as few untouched counter sets (whole GPUs whose partitions are all free) and
unshared shareable devices as possible, then takes the smallest devices, then upstream's
order; ``spread`` opens as many as possible, then the same; ``first-fit`` is upstream's order
only, exactly lexicographic where the weights fit, so its answer is the one upstream's
depth-first search finds first whenever the score allows; ``score`` is the score only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from dra_solver.model.cpsat.amounts import device_sizes
from dra_solver.model.cpsat.problem import Candidate, Problem, request_of
from dra_solver.model.cpsat.variables import DeviceChoiceVars
from dra_solver.model.matching import RequestKey
from dra_solver.model.policy import Policy
from dra_solver.model.score import subrequest_weight

OBJECTIVE_BUDGET = 1 << 50
"""Largest policy penalty range; the FirstAvailable score is multiplied above it and the
objective must stay well inside 64 bits."""

Term = tuple[Any, int]
"""A literal (or a sum of literals) and its weight in the policy penalty."""


@dataclass(frozen=True, slots=True)
class Scale:
    score_weight: int = 1
    max_penalty: int = 0


def add_objective(
    model: cp_model.CpModel,
    problem: Problem,
    choices: DeviceChoiceVars,
    selected: Mapping[RequestKey, cp_model.IntVar],
    *,
    policy: Policy,
    used: Callable[[Candidate], Any],
) -> Scale:
    """Maximise the FirstAvailable score, then the policy's levels, lexicographically."""
    levels_of = _Levels(model, problem, choices, selected, used)
    score_terms: list[tuple[cp_model.IntVar, int]] = [
        (var, subrequest_weight(key.subrequest)) for key, var in selected.items() if key.subrequest is not None
    ]
    levels: list[list[Term]] = []
    if policy in (Policy.PACK, Policy.SPREAD):
        levels.append(levels_of.opened(reward=policy == Policy.SPREAD))
        levels.append(levels_of.device_sizes())
    if policy in (Policy.FIRST_FIT, Policy.PACK, Policy.SPREAD):
        levels.append(levels_of.search_order(budget=OBJECTIVE_BUDGET // level_product(levels)))
    penalty = stack(levels)
    max_penalty = sum(abs(w) for _, w in penalty)
    scale = Scale(score_weight=max_penalty + 1, max_penalty=max_penalty)
    if not score_terms and not penalty:
        return scale
    # A rewarded term (negative weight) is written as a penalty for not taking it, so the
    # penalty stays within [0, max_penalty] (solve.py recovers the score bound from it).
    objective = sum(scale.score_weight * w * var for var, w in score_terms) - sum(
        w * var if w > 0 else -w * (1 - var) for var, w in penalty
    )
    model.maximize(objective)
    return scale


class _Levels:
    """The policy levels, each a list of weighted terms over the model's literals."""

    def __init__(
        self,
        model: cp_model.CpModel,
        problem: Problem,
        choices: DeviceChoiceVars,
        selected: Mapping[RequestKey, cp_model.IntVar],
        used: Callable[[Candidate], Any],
    ) -> None:
        self.model = model
        self.problem = problem
        self.choices = choices
        self.selected = selected
        self.used = used

    def _in_use_before(self, device_id: Any) -> bool:
        return device_id in self.problem.in_use_before

    def search_order(self, *, budget: int) -> list[Term]:
        """Upstream's search order as a penalty: what its depth-first search finds first is the
        lexicographically smallest choice over (request, device position). Exact when the
        weights fit in ``budget``; else per request stacked sums of positions; else plain sums
        weighted by how early the request comes."""
        by_request: dict[RequestKey, list[tuple[int, Any]]] = defaultdict(list)
        for key in self.selected:
            for candidate, var in self.choices.of_option(key):
                by_request[request_of(key)].append((candidate.index, var))
        order = sorted(by_request, key=lambda k: k.sort_key)
        tries = [[[(var, i) for i, var in by_request[cr] if i] for cr in order]]
        if all(len({i for i, _ in by_request[cr]}) <= 62 for cr in order):
            tries.insert(0, [lexicographic(by_request[cr]) for cr in order])
        for levels in tries:
            if level_product(levels) <= budget:
                return stack(levels)
        later = {cr: len(order) - n for n, cr in enumerate(order)}
        return [(var, i * later[cr]) for cr in order for i, var in by_request[cr] if i]

    def device_sizes(self) -> list[tuple[Any, int]]:
        """Per newly used device, how big it is (0..1000 per counter or capacity): its share of
        each counter set it draws on, else its capacity relative to the largest candidate's."""
        candidates = list(self.choices.candidates())
        sizes = device_sizes(candidates)
        out: list[tuple[Any, int]] = []
        for candidate in candidates:
            size = sizes[candidate.id]
            used = self.used(candidate)
            if size and not isinstance(used, int):
                out.append((used, size))
        return out

    def opened(self, *, reward: bool) -> list[Term]:
        """What a new device opens: an untouched counter set (a whole GPU whose partitions are
        all free) or a shareable device nobody shares yet. ``pack`` pays 1 per opening,
        ``spread`` gains 1 (then the literal must mean "opened", not only "may be opened")."""
        weight = -1 if reward else 1
        terms: list[Term] = [(var, weight) for var in self._opened_counter_sets(exact=reward)]
        for candidate in self.choices.candidates():
            if not candidate.multi or self._in_use_before(candidate.id):
                continue
            used = self.used(candidate)
            if isinstance(used, int):
                continue
            if reward:
                uses = [var for _, var in self.choices.of_device(candidate.id)]
                self.model.add(used <= sum(uses))
            terms.append((used, weight))
        return terms

    def _opened_counter_sets(self, *, exact: bool) -> list[cp_model.IntVar]:
        """One literal per untouched counter set that a newly used device draws on: at least
        "some device on it is used", and with ``exact`` also at most."""
        touched: set[tuple[str, str]] = set()
        pools = {}
        for candidate in self.problem.candidates:
            for consumption in candidate.device.counters:
                if self._in_use_before(candidate.id):
                    touched.add((candidate.pool.id, consumption.counter_set))
            pools[candidate.pool.id] = candidate.pool
        for pool in pools.values():
            for device in pool.other_devices:
                if self._in_use_before(device.id):
                    for consumption in device.counters:
                        touched.add((pool.id, consumption.counter_set))
        opened: dict[tuple[str, str], cp_model.IntVar] = {}
        users: dict[tuple[str, str], list[Any]] = defaultdict(list)
        for candidate in self.choices.candidates():
            for consumption in candidate.device.counters:
                slot = (candidate.pool.id, consumption.counter_set)
                if slot in touched:
                    continue
                if slot not in opened:
                    opened[slot] = self.model.new_bool_var(f"open[{candidate.pool.id},{consumption.counter_set}]")
                used = self.used(candidate)
                if isinstance(used, int):
                    continue
                users[slot].append(used)
        for slot, var in opened.items():
            # One constraint per counter set: "any device on it used" forces it open.
            if users[slot]:
                self.model.add(sum(users[slot]) <= len(users[slot]) * var)
                if exact:
                    self.model.add(var <= sum(users[slot]))
        return [opened[s] for s in sorted(opened)]


def lexicographic(pairs: Sequence[tuple[int, Any]]) -> list[Term]:
    """Weights under which the smallest sum is the lexicographically first set of positions:
    an earlier device outweighs all later ones together (2**n per distinct position)."""
    positions = sorted({i for i, _ in pairs})
    top = len(positions) - 1
    rank = {i: n for n, i in enumerate(positions)}
    return [(var, (1 << top) - (1 << (top - rank[i]))) for i, var in pairs if rank[i]]


def _span(terms: Sequence[Term]) -> int:
    return sum(abs(w) for _, w in terms)


def level_product(levels: Sequence[Sequence[Term]]) -> int:
    """How many distinct values the stacked levels can take, at most: the multiplier a level
    above them needs to dominate them."""
    product = 1
    for level in levels:
        product *= _span(level) + 1
    return product


def stack(levels: Sequence[Sequence[Term]]) -> list[Term]:
    """One weighted sum that orders solutions by ``levels[0]``, then ``levels[1]``, ...: each
    level's weight exceeds everything the levels below it can add up to."""
    out: list[Term] = []
    weight = 1
    for level in reversed(levels):
        out.extend((var, w * weight) for var, w in level)
        weight *= _span(level) + 1
    return out
