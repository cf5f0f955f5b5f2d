"""The CP-SAT model of one node's allocation problem.

API:
- ``AllocationModel(problem, *, policy)``: built in one pass from a prepared
  :class:`~model.cpsat.problem.Problem`. ``model`` is the ``CpModel``; ``choices`` the device
  choice variables; ``selected`` one literal per option; ``infeasible`` names a reason when the
  problem was found impossible while building (no solve needed).
- ``DeviceChoiceVars``: ``chosen(request_key, device_id)`` gives the literal "this device serves
  this request or subrequest"; ``extract(solver)`` the chosen candidates per option.
- Policies (``model.cpsat.problem.POLICIES``), the quality objective after the FirstAvailable
  score, in levels that each dominate the ones below: ``pack`` (the default, also ``""``)
  opens as few untouched counter sets (whole GPUs whose partitions are all free) and unshared
  shareable devices as possible, then takes the smallest devices, then upstream's order;
  ``spread`` opens as many as possible, then the same; ``first-fit`` is upstream's order only,
  exactly lexicographic where the weights fit, so its answer is the one upstream's
  depth-first search finds first whenever the score allows; ``score`` is the score only.

The translation, rule by rule (each ``_add_*`` method below):
- one boolean per (option, eligible device), none for ineligible pairs; an ``All`` option's
  devices all share the option's own literal;
- ExactCount: the option's devices sum to ``count`` times its literal;
- FirstAvailable: exactly one option of each request is selected;
- exclusive use: a device serves at most one option of a claim, and at most one option without
  adminAccess over all claims, unless it allows multiple allocations;
- the 32-device limit per claim;
- shared counters: per counter, the consumption of the devices newly used (once per device,
  also for shareable devices; adminAccess uses count, as in upstream's attempt) stays within
  what devices allocated before left; nothing left means no consumer may be used;
- consumable capacity: per shareable device and capacity, the policy-rounded amounts of its
  shares stay within what allocated shares left;
- matchAttribute: one chosen value per constraint; every device of the constraint has it
  (list-type attributes: the chosen value is in each list, i.e. the intersection is not empty);
- distinctAttribute: at most one device of the constraint per value (lists: disjoint);
- identical devices (same eligibility and coefficients everywhere) are used in search order,
  so the solver never explores their permutations;
- objective: the scheduler's FirstAvailable score (8 - index per chosen subrequest), then the
  policy's levels, lexicographically by weights (``_stack``).

Quantities become integers per constraint (common denominator), so fractional capacities and
counters stay exact.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from fractions import Fraction
from itertools import pairwise
from math import ceil, floor, lcm
from typing import Any

from ortools.sat.python import cp_model

from dra_solver.model.allocation import DeviceID
from dra_solver.model.cpsat.problem import (
    DEFAULT_POLICY,
    Candidate,
    Element,
    OptionData,
    OptionKey,
    Problem,
    attribute_elements,
    is_opaque,
)
from dra_solver.model.matching import ALLOCATION_RESULTS_MAX_SIZE, RequestKey, lookup_attribute
from dra_solver.model.quantity import Quantity
from dra_solver.model.score import subrequest_weight

_MAX_COEFFICIENT = 1 << 40
"""Scaled quantities above this are rounded conservatively (amounts up, limits down)."""


_OBJECTIVE_BUDGET = 1 << 50
"""Largest policy penalty range; the FirstAvailable score is multiplied above it and the
objective must stay well inside 64 bits."""

Term = tuple[Any, int]
"""A literal (or a sum of literals) and its weight in the policy penalty."""

Exact = int | Fraction
"""An exact quantity value: an int when it is one (fast), else a Fraction."""


def _exact(q: Quantity) -> Exact:
    as_int = q.as_int64()
    return as_int if as_int is not None else q.to_fraction()


class _CpModel(cp_model.CpModel):
    """``CpModel`` without its deprecated camelCase aliases, whose creation costs about half a
    millisecond per model (we build one per allocation attempt and use snake_case only)."""

    def _add_pre_pep8_methods(self) -> None:
        return None


class DeviceChoiceVars:
    """The literals "candidate d serves option o", keyed by option and candidate."""

    def __init__(self) -> None:
        self._vars: dict[OptionKey, dict[int, cp_model.IntVar]] = {}
        self._by_candidate: dict[int, list[tuple[OptionData, cp_model.IntVar]]] = defaultdict(list)
        self._index: dict[DeviceID, int] = {}

    def add(self, option: OptionData, key: OptionKey, candidate: Candidate, var: cp_model.IntVar) -> None:
        self._vars.setdefault(key, {})[candidate.index] = var
        self._by_candidate[candidate.index].append((option, var))
        self._index[candidate.id] = candidate.index

    def chosen(self, request: RequestKey, device: DeviceID) -> cp_model.IntVar | None:
        """The literal "``device`` serves this request or subrequest", if the pair is eligible."""
        key = (request.claim, request.request, request.subrequest or 0)
        index = self._index.get(device)
        return None if index is None else self._vars.get(key, {}).get(index)

    def of_option(self, key: OptionKey) -> dict[int, cp_model.IntVar]:
        return self._vars.get(key, {})

    def of_candidate(self, candidate: int) -> list[tuple[OptionData, cp_model.IntVar]]:
        return self._by_candidate.get(candidate, [])

    def candidates(self) -> list[int]:
        return sorted(self._by_candidate)

    def extract(self, solver: cp_model.CpSolver) -> dict[OptionKey, list[int]]:
        """Chosen candidates per option, in search order."""
        return {
            key: [index for index, var in sorted(by.items()) if solver.boolean_value(var)]
            for key, by in self._vars.items()
        }

    def __len__(self) -> int:
        return sum(len(by) for by in self._vars.values())


class AllocationModel:
    """CP-SAT model of ``problem``; see the module docstring for the rules."""

    def __init__(self, problem: Problem, *, policy: str = DEFAULT_POLICY) -> None:
        self.problem = problem
        self.policy = policy or DEFAULT_POLICY
        self.model: cp_model.CpModel = _CpModel()
        self.choices = DeviceChoiceVars()
        self.selected: dict[OptionKey, cp_model.IntVar] = {}
        self.infeasible = ""
        self._used: dict[int, Any] = {}
        self.max_penalty = 0
        self.score_weight = 1
        self._add_variables()
        if self.infeasible:
            return
        self._add_counts()
        self._add_first_available()
        self._add_exclusive_use()
        self._add_claim_limit()
        self._add_shared_counters()
        self._add_consumable_capacity()
        self._add_match_attribute()
        self._add_distinct_attribute()
        self._add_symmetry_breaking()
        self._add_objective()

    # -- variables ---------------------------------------------------------------------------

    def _add_variables(self) -> None:
        """One literal per option and one per (option, eligible device); none otherwise."""
        for c, claim in enumerate(self.problem.options):
            for r, options in enumerate(claim):
                if not any(opt.possible for opt in options):
                    self.infeasible = _why_impossible(options)
                    return
                for i, opt in enumerate(options):
                    if not opt.possible:
                        continue
                    key = (c, r, i)
                    selected = self.model.new_bool_var(f"sel[{c},{r},{i}]")
                    self.selected[key] = selected
                    for cand in opt.candidates:
                        if opt.view.is_all:
                            var = selected  # every device of an All option comes with it
                        else:
                            var = self.model.new_bool_var(f"x[{c},{r},{i},{cand.id}]")
                        self.choices.add(opt, key, cand, var)

    def _options(self) -> Iterable[tuple[OptionKey, OptionData]]:
        for c, claim in enumerate(self.problem.options):
            for r, options in enumerate(claim):
                for i, opt in enumerate(options):
                    if (c, r, i) in self.selected:
                        yield (c, r, i), opt

    # -- requests ----------------------------------------------------------------------------

    def _add_counts(self) -> None:
        """An ExactCount option gets exactly ``count`` devices when selected, none otherwise."""
        for key, opt in self._options():
            if opt.view.is_all:
                continue
            xs = list(self.choices.of_option(key).values())
            self.model.add(sum(xs) == opt.view.count * self.selected[key])

    def _add_first_available(self) -> None:
        """Each request is satisfied by exactly one of its options (``exactly``: the only one)."""
        by_request: dict[tuple[int, int], list[cp_model.IntVar]] = defaultdict(list)
        for (c, r, _), var in self.selected.items():
            by_request[(c, r)].append(var)
        for literals in by_request.values():
            self.model.add_exactly_one(literals)

    def _add_exclusive_use(self) -> None:
        """A device serves at most one option of a claim, and at most one option without
        adminAccess across claims, unless it allows multiple allocations."""
        for index in self.choices.candidates():
            candidate = self.problem.candidates[index]
            if candidate.multi:
                continue
            uses = self.choices.of_candidate(index)
            if len(uses) < 2:
                continue
            per_claim: dict[int, list[cp_model.IntVar]] = defaultdict(list)
            exclusive: list[cp_model.IntVar] = []
            for opt, var in uses:
                per_claim[opt.view.key.claim].append(var)
                if not opt.view.admin_access:
                    exclusive.append(var)
            for literals in per_claim.values():
                _at_most_one(self.model, literals)
            if len(per_claim) > 1:
                _at_most_one(self.model, exclusive)

    def _add_claim_limit(self) -> None:
        """A claim gets at most 32 devices (``AllocationResultsMaxSize``)."""
        per_claim: dict[int, list[cp_model.IntVar]] = defaultdict(list)
        for key, _opt in self._options():
            per_claim[key[0]].extend(self.choices.of_option(key).values())
        for literals in per_claim.values():
            if len(literals) > ALLOCATION_RESULTS_MAX_SIZE:
                self.model.add(sum(literals) <= ALLOCATION_RESULTS_MAX_SIZE)

    # -- shared resources --------------------------------------------------------------------

    def _used_literal(self, candidate: Candidate) -> Any:
        """"The device is newly in use": counters are consumed once per device. Like upstream,
        an adminAccess use draws on counters too. For an exclusive device without adminAccess
        uses this is the sum of its uses (at most one); otherwise a literal each use implies."""
        cached = self._used.get(candidate.index)
        if cached is not None:
            return cached
        uses = [var for _, var in self.choices.of_candidate(candidate.index)]
        shared = candidate.multi or any(
            opt.view.admin_access for opt, _ in self.choices.of_candidate(candidate.index)
        )
        used: Any
        if not uses:
            used = 0
        elif shared and len(uses) > 1:
            used = self.model.new_bool_var(f"used[{candidate.index}]")
            for var in uses:
                self.model.add_implication(var, used)
        else:
            used = sum(uses) if len(uses) > 1 else uses[0]
        self._used[candidate.index] = used
        return used

    def _in_use_before(self, device_id: Any) -> bool:
        return device_id in self.problem.in_use_before

    def _add_shared_counters(self) -> None:
        """Per counter of a pool: what newly used devices consume fits in what is left."""
        if not self.problem.request.gates.partitionable_devices:
            return
        by_pool: dict[int, list[Candidate]] = defaultdict(list)
        for index in self.choices.candidates():
            candidate = self.problem.candidates[index]
            if candidate.device.counters and not self._in_use_before(candidate.id):
                by_pool[id(candidate.pool)].append(candidate)
        for candidates in by_pool.values():
            pool = candidates[0].pool
            left = _counters_left(pool, self._in_use_before)
            demand: dict[tuple[str, str], list[tuple[Quantity, Candidate]]] = defaultdict(list)
            for candidate in candidates:
                for consumption in candidate.device.counters:
                    for name, amount in consumption.counters.items():
                        demand[(consumption.counter_set, name)].append((amount, candidate))
            for slot in sorted(demand):
                available = left.get(slot)
                if available is None:
                    continue
                amounts = [_exact(q) for q, _ in demand[slot]]
                if sum(amounts) <= available:
                    continue  # never binding: no need for the devices' "used" literals
                terms = [(a, self._used_literal(cand)) for a, (_, cand) in zip(amounts, demand[slot], strict=True)]
                self._add_within(terms, available)

    def _add_consumable_capacity(self) -> None:
        """Per shareable device and capacity: its shares' rounded amounts fit what is left."""
        if not self.problem.request.gates.consumable_capacity:
            return
        allocated = self.problem.allocated.capacity
        for index in self.choices.candidates():
            candidate = self.problem.candidates[index]
            if not candidate.multi or not candidate.device.capacity:
                continue
            uses = self.choices.of_candidate(index)
            if len(uses) < 2:
                continue  # one share alone was checked when the device was found eligible
            already = allocated.get(candidate.id, {})
            for name, spec in sorted(candidate.device.capacity.items()):
                available = _exact(spec.value)
                if name in already:
                    available -= _exact(already[name])
                self._add_within([(_exact(opt.consumed[index][name]), var) for opt, var in uses], available)

    def _add_within(self, terms: Sequence[tuple[Exact, Any]], available: Exact) -> None:
        """``sum(amount * used) <= available``; with nothing left (over-committed before this
        attempt), no term that consumes anything may be used."""
        if sum(amount for amount, _ in terms) <= available:
            return  # never binding
        if available < 0:
            for amount, used in terms:
                if amount > 0 and not isinstance(used, int):
                    self.model.add(used == 0)
            return
        coefficients, limit = _scaled([amount for amount, _ in terms], available)
        self.model.add(sum(k * used for k, (_, used) in zip(coefficients, terms, strict=True)) <= limit)

    # -- claim constraints -------------------------------------------------------------------

    def _constraint_members(self) -> Iterable[tuple[int, int, str, list[tuple[cp_model.IntVar, frozenset[Element]]]]]:
        """(claim, constraint index, kind, [(choice literal, attribute elements)])."""
        list_types = self.problem.request.gates.list_type_attributes
        for c, plan in enumerate(self.problem.plans):
            for k, spec in enumerate(plan.constraints):
                members: list[tuple[cp_model.IntVar, frozenset[Element]]] = []
                for key, opt in self._options():
                    if key[0] != c or not spec.applies_to(opt.view.base_name, opt.view.sub_name):
                        continue
                    for index, var in sorted(self.choices.of_option(key).items()):
                        device = self.problem.candidates[index].device
                        attr = lookup_attribute(device, spec.attribute)
                        elements = attribute_elements(attr, list_types=list_types) if attr else None
                        if elements is None:
                            # Only All options reach here (others were filtered); they were
                            # found impossible already, so this cannot be chosen.
                            self.model.add(var == 0)
                            continue
                        members.append((var, elements))
                yield c, k, spec.kind, members

    def _add_match_attribute(self) -> None:
        """matchAttribute: one value is chosen per constraint; every member device has it."""
        for c, k, kind, members in self._constraint_members():
            if kind != "match" or len(members) < 2:
                continue
            common = frozenset.intersection(*(e for _, e in members))
            if common:
                continue  # every combination shares a value
            values = sorted(frozenset.union(*(e for _, e in members)), key=_element_order)
            chosen = {v: self.model.new_bool_var(f"match[{c},{k},{v[0]}:{v[1]}]") for v in values}
            self.model.add_at_most_one(chosen.values())
            for var, elements in members:
                self.model.add_bool_or([chosen[v] for v in sorted(elements, key=_element_order)]).only_enforce_if(var)

    def _add_distinct_attribute(self) -> None:
        """distinctAttribute: no value is shared by two member devices (lists: disjoint)."""
        for _c, _k, kind, members in self._constraint_members():
            if kind != "distinct" or len(members) < 2:
                continue
            by_value: dict[Element, list[cp_model.IntVar]] = defaultdict(list)
            for n, (var, elements) in enumerate(members):
                if is_opaque(elements):
                    # Not comparable with anything: only allowed as the constraint's sole device.
                    others = [v for m, (v, _) in enumerate(members) if m != n and v is not var]
                    self.model.add(sum(others) == 0).only_enforce_if(var)
                    continue
                for value in elements:
                    by_value[value].append(var)
            for value in sorted(by_value, key=_element_order):
                if len(by_value[value]) > 1:
                    _at_most_one(self.model, by_value[value])

    # -- symmetry ----------------------------------------------------------------------------

    def _add_symmetry_breaking(self) -> None:
        """Identical devices are used in search order: the solver never permutes them."""
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        option_index = {id(opt): n for n, (_, opt) in enumerate(self._options())}
        constraint_attrs = sorted({spec.attribute for plan in self.problem.plans for spec in plan.constraints})
        list_types = self.problem.request.gates.list_type_attributes
        for index in self.choices.candidates():
            candidate = self.problem.candidates[index]
            groups[self._signature(candidate, option_index, constraint_attrs, list_types)].append(index)
        for members in groups.values():
            for a, b in pairwise(members):
                usage_a = [var for _, var in self.choices.of_candidate(a)]
                usage_b = [var for _, var in self.choices.of_candidate(b)]
                self.model.add(sum(usage_a) >= sum(usage_b))

    def _signature(
        self,
        candidate: Candidate,
        option_index: dict[int, int],
        constraint_attrs: Sequence[str],
        list_types: bool,
    ) -> tuple[Any, ...]:
        device = candidate.device
        serves = tuple(
            sorted(
                (
                    option_index[id(opt)],
                    tuple(sorted(opt.consumed.get(candidate.index, {}).items())),
                )
                for opt, _ in self.choices.of_candidate(candidate.index)
            )
        )
        counters = tuple((c.counter_set, tuple(sorted(c.counters.items()))) for c in device.counters)
        allocated = self.problem.allocated.capacity.get(candidate.id, {})
        attrs = []
        for name in constraint_attrs:
            attr = lookup_attribute(device, name)
            elements = attribute_elements(attr, list_types=list_types) if attr else None
            attrs.append(tuple(sorted(elements, key=_element_order)) if elements else None)
        return (
            serves,
            candidate.multi,
            id(candidate.pool) if counters else None,
            counters,
            self._in_use_before(candidate.id),
            tuple(sorted((n, s.value) for n, s in device.capacity.items())) if candidate.multi else (),
            tuple(sorted(allocated.items())),
            tuple(attrs),
        )

    # -- objective ---------------------------------------------------------------------------

    def _add_objective(self) -> None:
        """Maximise the FirstAvailable score, then the policy's levels, lexicographically."""
        score_terms: list[tuple[cp_model.IntVar, int]] = []
        for (c, r, i), var in self.selected.items():
            if self.problem.plans[c].requests[r].first_available:
                score_terms.append((var, subrequest_weight(i)))
        levels: list[list[Term]] = []
        if self.policy in ("pack", "spread"):
            levels.append(self._opened_terms(reward=self.policy == "spread"))
            levels.append(self._device_sizes())
        if self.policy in ("first-fit", "pack", "spread"):
            levels.append(self._search_order_terms(budget=_OBJECTIVE_BUDGET // _level_product(levels)))
        penalty = _stack(levels)
        self.max_penalty = sum(abs(w) for _, w in penalty)
        self.score_weight = self.max_penalty + 1
        if not score_terms and not penalty:
            return
        # A rewarded term (negative weight) is written as a penalty for not taking it, so the
        # penalty stays within [0, max_penalty] (solve.py recovers the score bound from it).
        objective = sum(self.score_weight * w * var for var, w in score_terms) - sum(
            w * var if w > 0 else -w * (1 - var) for var, w in penalty
        )
        self.model.maximize(objective)

    def _search_order_terms(self, *, budget: int) -> list[Term]:
        """Upstream's search order as a penalty: what its depth-first search finds first is the
        lexicographically smallest choice over (request, device position). Exact when the
        weights fit in ``budget``; else per request stacked sums of positions; else plain sums
        weighted by how early the request comes."""
        by_request: dict[tuple[int, int], list[tuple[int, Any]]] = defaultdict(list)
        for key, _opt in self._options():
            for index, var in sorted(self.choices.of_option(key).items()):
                by_request[(key[0], key[1])].append((index, var))
        order = sorted(by_request)
        tries = [[[(var, i) for i, var in by_request[cr] if i] for cr in order]]
        if all(len({i for i, _ in by_request[cr]}) <= 62 for cr in order):
            tries.insert(0, [_lexicographic(by_request[cr]) for cr in order])
        for levels in tries:
            if _level_product(levels) <= budget:
                return _stack(levels)
        later = {cr: len(order) - n for n, cr in enumerate(order)}
        return [(var, i * later[cr]) for cr in order for i, var in by_request[cr] if i]

    def _device_sizes(self) -> list[tuple[Any, int]]:
        """Per newly used device, how big it is (0..1000 per counter or capacity): its share of
        each counter set it draws on, else its capacity relative to the largest candidate's."""
        largest: dict[str, float] = {}
        for index in self.choices.candidates():
            for name, spec in self.problem.candidates[index].device.capacity.items():
                largest[name] = max(largest.get(name, 0.0), spec.value.as_approximate_float())
        out: list[tuple[Any, int]] = []
        for index in self.choices.candidates():
            candidate = self.problem.candidates[index]
            size = 0
            for consumption in candidate.device.counters:
                totals = candidate.pool.counter_sets.get(consumption.counter_set, {})
                for name, amount in consumption.counters.items():
                    total = totals.get(name)
                    if total is not None and total.as_approximate_float() > 0:
                        size += round(1000 * amount.as_approximate_float() / total.as_approximate_float())
            if not candidate.device.counters:
                for name, spec in candidate.device.capacity.items():
                    if largest.get(name, 0.0) > 0:
                        size += round(1000 * spec.value.as_approximate_float() / largest[name])
            used = self._used_literal(candidate)
            if size and not isinstance(used, int):
                out.append((used, size))
        return out

    def _opened_terms(self, *, reward: bool) -> list[Term]:
        """What a new device opens: an untouched counter set (a whole GPU whose partitions are
        all free) or a shareable device nobody shares yet. ``pack`` pays 1 per opening,
        ``spread`` gains 1 (then the literal must mean "opened", not only "may be opened")."""
        weight = -1 if reward else 1
        terms: list[Term] = [(var, weight) for var in self._opened_counter_sets(exact=reward)]
        for index in self.choices.candidates():
            candidate = self.problem.candidates[index]
            if not candidate.multi or self._in_use_before(candidate.id):
                continue
            used = self._used_literal(candidate)
            if isinstance(used, int):
                continue
            if reward:
                uses = [var for _, var in self.choices.of_candidate(index)]
                self.model.add(used <= sum(uses))
            terms.append((used, weight))
        return terms

    def _opened_counter_sets(self, *, exact: bool) -> list[cp_model.IntVar]:
        """One literal per untouched counter set that a newly used device draws on: at least
        "some device on it is used", and with ``exact`` also at most."""
        touched: set[tuple[int, str]] = set()
        pools = {}
        for candidate in self.problem.candidates:
            for consumption in candidate.device.counters:
                if self._in_use_before(candidate.id):
                    touched.add((id(candidate.pool), consumption.counter_set))
            pools[id(candidate.pool)] = candidate.pool
        for pool in pools.values():
            for device in pool.other_devices:
                if self._in_use_before(device.id):
                    for consumption in device.counters:
                        touched.add((id(pool), consumption.counter_set))
        opened: dict[tuple[int, str], cp_model.IntVar] = {}
        users: dict[tuple[int, str], list[Any]] = defaultdict(list)
        for index in self.choices.candidates():
            candidate = self.problem.candidates[index]
            for consumption in candidate.device.counters:
                slot = (id(candidate.pool), consumption.counter_set)
                if slot in touched:
                    continue
                if slot not in opened:
                    opened[slot] = self.model.new_bool_var(f"open[{candidate.pool.id},{consumption.counter_set}]")
                used = self._used_literal(candidate)
                if isinstance(used, int):
                    continue
                users[slot].append(used)
        for slot, var in opened.items():
            # One constraint per counter set: "any device on it used" forces it open.
            if users[slot]:
                self.model.add(sum(users[slot]) <= len(users[slot]) * var)
                if exact:
                    self.model.add(var <= sum(users[slot]))
        return [opened[s] for s in sorted(opened, key=lambda s: (pools[s[0]].id, s[1]))]

    # -- statistics --------------------------------------------------------------------------

    def size(self) -> tuple[int, int]:
        proto = self.model.proto
        return len(proto.variables), len(proto.constraints)


def _lexicographic(pairs: Sequence[tuple[int, Any]]) -> list[Term]:
    """Weights under which the smallest sum is the lexicographically first set of positions:
    an earlier device outweighs all later ones together (2**n per distinct position)."""
    positions = sorted({i for i, _ in pairs})
    top = len(positions) - 1
    rank = {i: n for n, i in enumerate(positions)}
    return [(var, (1 << top) - (1 << (top - rank[i]))) for i, var in pairs if rank[i]]


def _span(terms: Sequence[Term]) -> int:
    return sum(abs(w) for _, w in terms)


def _level_product(levels: Sequence[Sequence[Term]]) -> int:
    """How many distinct values the stacked levels can take, at most: the multiplier a level
    above them needs to dominate them."""
    product = 1
    for level in levels:
        product *= _span(level) + 1
    return product


def _stack(levels: Sequence[Sequence[Term]]) -> list[Term]:
    """One weighted sum that orders solutions by ``levels[0]``, then ``levels[1]``, ...: each
    level's weight exceeds everything the levels below it can add up to."""
    out: list[Term] = []
    weight = 1
    for level in reversed(levels):
        out.extend((var, w * weight) for var, w in level)
        weight *= _span(level) + 1
    return out


def _at_most_one(model: cp_model.CpModel, literals: list[cp_model.IntVar]) -> None:
    unique = list({id(v): v for v in literals}.values())
    if len(unique) != len(literals):
        # An All option's literal stands for several of its devices; twice on one device
        # means the option cannot be used.
        counts: dict[int, int] = defaultdict(int)
        for v in literals:
            counts[id(v)] += 1
        for v in unique:
            if counts[id(v)] > 1:
                model.add(v == 0)
    if len(unique) > 1:
        model.add_at_most_one(unique)


def _counters_left(pool: Any, in_use: Any) -> dict[tuple[str, str], Exact]:
    """Each counter of the pool minus what devices allocated before consume."""
    left: dict[tuple[str, str], Exact] = {
        (set_name, name): _exact(q)
        for set_name, counters in pool.counter_sets.items()
        for name, q in counters.items()
    }
    for device in (*pool.devices, *pool.other_devices):
        if not in_use(device.id):
            continue
        for consumption in device.counters:
            for name, amount in consumption.counters.items():
                slot = (consumption.counter_set, name)
                if slot in left:
                    left[slot] -= _exact(amount)
    return left


def _scaled(amounts: Sequence[Exact], limit: Exact) -> tuple[list[int], int]:
    """Integer coefficients and bound for ``sum(amounts[i] * x_i) <= limit``, exactly when the
    numbers allow, otherwise conservatively (amounts rounded up, the limit down)."""
    denominator = lcm(*(a.denominator for a in amounts), limit.denominator)
    ints = [int(a * denominator) for a in amounts]
    bound = limit * denominator
    biggest = max([abs(i) for i in ints] + [abs(int(bound))])
    if biggest <= _MAX_COEFFICIENT:
        return ints, floor(bound)
    shrink = Fraction(biggest, _MAX_COEFFICIENT)
    return [ceil(i / shrink) for i in ints], floor(bound / shrink)


def _element_order(element: Element) -> tuple[str, str]:
    return element[0], repr(element[1])


def _why_impossible(options: Sequence[OptionData]) -> str:
    """Why no option of a request can get its devices, in words."""
    view = options[0].view
    where = f"claim {_label(view)}, request {view.base_name}"
    if len(options) > 1:
        return f"{where}: none of its {len(options)} subrequests can get enough devices"
    if view.is_all:
        return f"{where}: not all of its {view.num_devices} matching devices can be allocated"
    usable = len(options[0].candidates)
    return f"{where}: {usable} usable devices for a count of {view.count}"


def _label(view: Any) -> str:
    claim = view.claim
    return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name
