"""The CP-SAT model of one node's allocation problem: one encoding of the DRA rules.

API:
- ``AllocationModel(problem, *, policy=Policy.PACK)``: built in one pass from a prepared
  :class:`~model.cpsat.problem.Problem`. ``model`` is the ``CpModel``; ``choices`` the device
  choice variables (``model.cpsat.variables``); ``selected`` one literal per option, by
  ``RequestKey``; ``infeasible`` names a reason when the problem was found impossible while
  building (no solve needed); ``score_weight``/``max_penalty`` scale the objective
  (``model.cpsat.objective``).
- Shared builds (``SharedBuild``; the group model, ``model.cpsat.group_model``):
  ``AllocationModel(problem, shared=build, scope=name, active=literal)`` adds one instance's
  variables and claim-scoped rules (requests, FirstAvailable as "one option when ``active``",
  the claim limit, claim constraints) to ``build.model``, without device rules or objective;
  ``AllocationModel.device_rules(build, context)`` adds the device-scoped rules once over all
  instances. Without ``shared`` nothing changes.
- Relaxed problems (``Problem.relaxed``, what explain builds): every instance of a rule that can
  keep the claims off the node (``model.cpsat.problem.Rule``) is guarded by one switch literal,
  ``switches[rule]`` ("this rule instance holds"); with every switch on the model is the
  allocation model minus symmetry breaking and objective. A rule added here is explained with
  no further code: explain (``model.cpsat.explain``) only reads the switches.

The translation, rule by rule (each ``_add_*`` method below; the rule instance that guards it
in a relaxed model in brackets):
- one boolean per (option, eligible device), none for ineligible pairs; an ``All`` option's
  devices all share the option's own literal (relaxed: one literal each, and a pair a rule
  forbids [selector, class-selector, in-use, taint, capacity, constraint] is off while that
  rule holds);
- ExactCount: the option's devices sum to ``count`` times its literal; ``All``: every matching
  device and at least one [request];
- FirstAvailable: exactly one option of each request is selected;
- exclusive use: a device serves at most one option of a claim, and at most one option without
  adminAccess over all claims, unless it allows multiple allocations;
- the 32-device limit per claim;
- shared counters: per counter, the consumption of the devices newly used (once per device,
  also for shareable devices; adminAccess uses count, as in upstream's attempt) stays within
  what devices allocated before left; nothing left means no consumer may be used [counter];
- consumable capacity: per shareable device and capacity, the policy-rounded amounts of its
  shares stay within what allocated shares left [capacity];
- matchAttribute: one chosen value per constraint; every device of the constraint has it
  (list-type attributes: the chosen value is in each list, i.e. the intersection is not empty)
  [constraint];
- distinctAttribute: at most one device of the constraint per value (lists: disjoint)
  [constraint];
- identical devices (same eligibility and coefficients everywhere) are used in search order,
  so the solver never explores their permutations (not in relaxed models);
- objective (``model.cpsat.objective``; not in relaxed models).

Quantities become integers per constraint (common denominator), so fractional capacities and
counters stay exact.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ortools.sat.python import cp_model

from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat.amounts import Exact
from dra_solver.model.cpsat.amounts import counters_left as _counters_left
from dra_solver.model.cpsat.amounts import exact as _exact
from dra_solver.model.cpsat.amounts import scaled as _scaled
from dra_solver.model.cpsat.objective import add_objective
from dra_solver.model.cpsat.problem import (
    Candidate,
    Element,
    OptionData,
    Problem,
    Rule,
    attribute_elements,
    is_opaque,
    request_of,
)
from dra_solver.model.cpsat.variables import DeviceChoiceVars
from dra_solver.model.matching import ALLOCATION_RESULTS_MAX_SIZE, RequestKey, lookup_attribute
from dra_solver.model.policy import DEFAULT_POLICY, Policy
from dra_solver.model.quantity import Quantity

__all__ = ["AllocationModel", "DeviceChoiceVars", "SharedBuild"]

class _CpModel(cp_model.CpModel):
    """``CpModel`` without its deprecated camelCase aliases, whose creation costs about half a
    millisecond per model (we build one per allocation attempt and use snake_case only)."""

    def _add_pre_pep8_methods(self) -> None:
        return None


@dataclass(eq=False)
class SharedBuild:
    """Several allocation problems (instances) built into one CP-SAT model: the group model
    builds a pod's claims once per candidate node, each copy switched on by "the pod goes
    there". Every instance adds its claims' own rules; ``AllocationModel.device_rules`` then
    adds the device-scoped rules once, over every instance's literals (``uses``, by device)."""

    model: cp_model.CpModel = field(default_factory=lambda: _CpModel())
    uses: DeviceChoiceVars = field(default_factory=DeviceChoiceVars)
    options: list[tuple[RequestKey, OptionData]] = field(default_factory=list)
    """Every instance's options, in build order (device symmetry numbers them)."""


class AllocationModel:
    """CP-SAT model of ``problem``; see the module docstring for the rules."""

    def __init__(
        self,
        problem: Problem,
        *,
        policy: str = DEFAULT_POLICY,
        shared: SharedBuild | None = None,
        scope: str = "",
        active: Any = None,
    ) -> None:
        self.problem = problem
        self.policy = Policy(policy or DEFAULT_POLICY)
        self.shared = shared
        self.model: cp_model.CpModel = shared.model if shared is not None else _CpModel()
        self.choices = DeviceChoiceVars()
        self.selected: dict[RequestKey, cp_model.IntVar] = {}
        self.switches: dict[Rule, cp_model.IntVar] = {}
        """Relaxed problems: the literal "this rule instance holds", one per instance."""
        self.infeasible = ""
        self.scope = scope
        """Shared builds: this instance's name (in variable names and the device store)."""
        self.active = active
        """Shared builds: the literal "these claims are allocated" (None: always)."""
        self._used: dict[DeviceID, Any] = {}
        self._option_list: list[tuple[RequestKey, OptionData]] | None = None
        self.max_penalty = 0
        self.score_weight = 1
        self._add_variables()
        if self.infeasible:
            return
        self._add_blocked_pairs()
        self._add_counts()
        self._add_first_available()
        if shared is None:
            self._add_exclusive_use()
        self._add_claim_limit()
        if shared is None:
            self._add_shared_counters()
            self._add_consumable_capacity()
        self._add_match_attribute()
        self._add_distinct_attribute()
        if problem.relaxed or shared is not None:
            return
        self._add_symmetry_breaking()
        scale = add_objective(
            self.model, problem, self.choices, self.selected, policy=self.policy, used=self._used_literal
        )
        self.score_weight, self.max_penalty = scale.score_weight, scale.max_penalty

    @classmethod
    def device_rules(cls, shared: SharedBuild, context: Problem) -> AllocationModel:
        """The device-scoped rules (exclusive use, shared counters, consumable capacity, device
        symmetry) over every instance built into ``shared``: each instance only builds its
        claims' own rules, so a device that several instances may use is constrained once, over
        all of their literals. ``context`` supplies the gates and what was in use before (every
        instance's problem must agree with it); ``used_literal`` then gives the literal "the
        device is newly in use" for objectives over devices."""
        rules = cls.__new__(cls)
        rules.problem = context
        rules.policy = DEFAULT_POLICY
        rules.shared = shared
        rules.model = shared.model
        rules.choices = shared.uses
        rules.selected = {}
        rules.switches = {}
        rules.infeasible = ""
        rules.scope = ""
        rules.active = None
        rules._used = {}
        rules._option_list = shared.options
        rules.max_penalty = 0
        rules.score_weight = 1
        rules._add_exclusive_use()
        rules._add_shared_counters()
        rules._add_consumable_capacity()
        rules._add_symmetry_breaking()
        return rules

    def used_literal(self, candidate: Candidate) -> Any:
        """The literal (or 0, or a sum of literals) "``candidate`` is newly in use"."""
        return self._used_literal(candidate)

    # -- switches (relaxed problems) -----------------------------------------------------------

    def _guard(self, rule: Rule) -> list[cp_model.IntVar]:
        """The enforcement literals of a constraint for ``rule``: none in an allocation model,
        the rule instance's switch in a relaxed one."""
        if not self.problem.relaxed:
            return []
        switch = self.switches.get(rule)
        if switch is None:
            switch = self.switches[rule] = self.model.new_bool_var(f"on[{rule.kind}{list(rule.subject)}]")
        return [switch]

    # -- variables ---------------------------------------------------------------------------

    def _add_variables(self) -> None:
        """One literal per option and one per (option, eligible device); none otherwise."""
        relaxed = self.problem.relaxed
        for claim in self.problem.options:
            for options in claim:
                if not any(opt.possible for opt in options):
                    self.infeasible = _why_impossible(options)
                    return
        shared = self.shared
        prefix = f"{self.scope}:" if shared is not None else ""
        for c, claim in enumerate(self.problem.options):
            for r, options in enumerate(claim):
                for i, opt in enumerate(options):
                    if not opt.possible:
                        continue
                    selected = self.model.new_bool_var(f"{prefix}sel[{c},{r},{i}]")
                    self.selected[opt.key] = selected
                    if shared is not None:
                        shared.options.append((opt.key, opt))
                    for cand in opt.candidates:
                        if opt.view.is_all and not relaxed:
                            var = selected  # every device of an All option comes with it
                        else:
                            var = self.model.new_bool_var(f"{prefix}x[{c},{r},{i},{cand.id}]")
                        self.choices.add(opt, cand, var)
                        if shared is not None:
                            shared.uses.add_use(opt, cand, var, scope=self.scope)

    def _options(self) -> Iterable[tuple[RequestKey, OptionData]]:
        if self._option_list is not None:
            yield from self._option_list  # device rules over a shared build: every instance's
            return
        for claim in self.problem.options:
            for options in claim:
                for opt in options:
                    if opt.key in self.selected:
                        yield opt.key, opt

    def _add_blocked_pairs(self) -> None:
        """Relaxed problems: while a rule that forbids a pair holds, the pair is not chosen; a
        device serves only the option that is selected (the count rule implies it otherwise)."""
        if not self.problem.relaxed:
            return
        for key, opt in self._options():
            for candidate, var in self.choices.of_option(key):
                self.model.add_implication(var, self.selected[key])
                for rule in opt.blocked.get(candidate.id, ()):
                    self.model.add_implication(self._guard(rule)[0], var.Not())

    # -- requests ----------------------------------------------------------------------------

    def _add_counts(self) -> None:
        """An ExactCount option gets exactly ``count`` devices when selected, none otherwise;
        a relaxed ``All`` option gets every matching device and at least one."""
        for key, opt in self._options():
            guard = self._guard(Rule("request", (key,)))
            xs = self.choices.literals(key)
            if not opt.view.is_all:
                self.model.add(sum(xs) == opt.view.count * self.selected[key]).only_enforce_if(guard)
            elif self.problem.relaxed:
                when = [self.selected[key], *guard]
                for member in opt.members:
                    var = self.choices.chosen(key, member)
                    if var is not None:
                        self.model.add_bool_and([var]).only_enforce_if(when)
                self.model.add(sum(xs) >= 1).only_enforce_if(when)

    def _add_first_available(self) -> None:
        """Each request is satisfied by exactly one of its options (``exactly``: the only one)."""
        by_request: dict[RequestKey, list[cp_model.IntVar]] = defaultdict(list)
        for key, var in self.selected.items():
            by_request[request_of(key)].append(var)
        for literals in by_request.values():
            if self.active is None:
                self.model.add_exactly_one(literals)
            else:
                self.model.add(sum(literals) == self.active)

    def _add_exclusive_use(self) -> None:
        """A device serves at most one option of a claim, and at most one option without
        adminAccess across claims, unless it allows multiple allocations."""
        for candidate in self.choices.candidates():
            if candidate.multi:
                continue
            uses = self.choices.of_device(candidate.id)
            if len(uses) < 2:
                continue
            per_claim: dict[tuple[str, int], list[cp_model.IntVar]] = defaultdict(list)
            exclusive: list[cp_model.IntVar] = []
            for opt, var in uses:
                per_claim[self.choices.claim_of(opt)].append(var)
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
            per_claim[key.claim].extend(self.choices.literals(key))
        for literals in per_claim.values():
            if len(literals) > ALLOCATION_RESULTS_MAX_SIZE:
                self.model.add(sum(literals) <= ALLOCATION_RESULTS_MAX_SIZE)

    # -- shared resources --------------------------------------------------------------------

    def _used_literal(self, candidate: Candidate) -> Any:
        """"The device is newly in use": counters are consumed once per device. Like upstream,
        an adminAccess use draws on counters too. For an exclusive device without adminAccess
        uses this is the sum of its uses (at most one); otherwise a literal each use implies."""
        cached = self._used.get(candidate.id)
        if cached is not None:
            return cached
        uses = [var for _, var in self.choices.of_device(candidate.id)]
        shared = candidate.multi or any(opt.view.admin_access for opt, _ in self.choices.of_device(candidate.id))
        used: Any
        if not uses:
            used = 0
        elif shared and len(uses) > 1:
            used = self.model.new_bool_var(f"used[{candidate.index}]")
            for var in uses:
                self.model.add_implication(var, used)
        else:
            used = sum(uses) if len(uses) > 1 else uses[0]
        self._used[candidate.id] = used
        return used

    def _in_use_before(self, device_id: DeviceID) -> bool:
        return device_id in self.problem.in_use_before

    def _add_shared_counters(self) -> None:
        """Per counter of a pool: what newly used devices consume fits in what is left."""
        if not self.problem.request.gates.partitionable_devices:
            return
        by_pool: dict[str, list[Candidate]] = defaultdict(list)
        for candidate in self.choices.candidates():
            if candidate.device.counters and not self._in_use_before(candidate.id):
                by_pool[candidate.pool.id].append(candidate)
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
                self._add_within(terms, available, Rule("counter", (pool.id, *slot)))

    def _add_consumable_capacity(self) -> None:
        """Per shareable device and capacity: its shares' rounded amounts fit what is left."""
        if not self.problem.request.gates.consumable_capacity:
            return
        allocated = self.problem.allocated.capacity
        # One share alone was checked when the device was found eligible (not so in relaxed
        # problems, where even one share is up to the capacity rule).
        fewest = 1 if self.problem.relaxed else 2
        for candidate in self.choices.candidates():
            if not candidate.multi or not candidate.device.capacity:
                continue
            uses = self.choices.of_device(candidate.id)
            if len(uses) < fewest:
                continue
            already = allocated.get(candidate.id, {})
            for name, spec in sorted(candidate.device.capacity.items()):
                available = _exact(spec.value)
                if name in already:
                    available -= _exact(already[name])
                terms = [(_exact(opt.consumed[candidate.id][name]), var) for opt, var in uses]
                self._add_within(terms, available, Rule("capacity", (candidate.id, name)))

    def _add_within(self, terms: Sequence[tuple[Exact, Any]], available: Exact, rule: Rule) -> None:
        """``sum(amount * used) <= available``; with nothing left (over-committed before this
        attempt), no term that consumes anything may be used."""
        if sum(amount for amount, _ in terms) <= available:
            return  # never binding
        guard = self._guard(rule)
        if available < 0:
            for amount, used in terms:
                if amount > 0 and not isinstance(used, int):
                    self.model.add(used == 0).only_enforce_if(guard)
            return
        coefficients, limit = _scaled([amount for amount, _ in terms], available)
        self.model.add(
            sum(k * used for k, (_, used) in zip(coefficients, terms, strict=True)) <= limit
        ).only_enforce_if(guard)

    # -- claim constraints -------------------------------------------------------------------

    def _constraint_members(self) -> Iterable[tuple[int, int, str, list[tuple[cp_model.IntVar, frozenset[Element]]]]]:
        """(claim, constraint index, kind, [(choice literal, attribute elements)])."""
        list_types = self.problem.request.gates.list_type_attributes
        for c, plan in enumerate(self.problem.plans):
            for k, spec in enumerate(plan.constraints):
                members: list[tuple[cp_model.IntVar, frozenset[Element]]] = []
                for key, opt in self._options():
                    if key.claim != c or not spec.applies_to(opt.view.base_name, opt.view.sub_name):
                        continue
                    for candidate, var in self.choices.of_option(key):
                        attr = lookup_attribute(candidate.device, spec.attribute)
                        elements = attribute_elements(attr, list_types=list_types) if attr else None
                        if elements is None:
                            # Only All options reach here (others were filtered); they were
                            # found impossible already, so this cannot be chosen. (Relaxed:
                            # the constraint rule blocks the pair, see _add_blocked_pairs.)
                            if not self.problem.relaxed:
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
            guard = self._guard(Rule("constraint", (c, k)))
            values = sorted(frozenset.union(*(e for _, e in members)), key=_element_order)
            chosen = {v: self.model.new_bool_var(f"match[{c},{k},{v[0]}:{v[1]}]") for v in values}
            self.model.add_at_most_one(chosen.values())
            for var, elements in members:
                self.model.add_bool_or([chosen[v] for v in sorted(elements, key=_element_order)]).only_enforce_if(
                    [var, *guard]
                )

    def _add_distinct_attribute(self) -> None:
        """distinctAttribute: no value is shared by two member devices (lists: disjoint)."""
        for c, k, kind, members in self._constraint_members():
            if kind != "distinct" or len(members) < 2:
                continue
            guard = self._guard(Rule("constraint", (c, k)))
            by_value: dict[Element, list[cp_model.IntVar]] = defaultdict(list)
            for n, (var, elements) in enumerate(members):
                if is_opaque(elements):
                    # Not comparable with anything: only allowed as the constraint's sole device.
                    others = [v for m, (v, _) in enumerate(members) if m != n and v is not var]
                    self.model.add(sum(others) == 0).only_enforce_if([var, *guard])
                    continue
                for value in elements:
                    by_value[value].append(var)
            for value in sorted(by_value, key=_element_order):
                if len(by_value[value]) > 1:
                    _at_most_one(self.model, by_value[value], guard)

    # -- symmetry ----------------------------------------------------------------------------

    def _add_symmetry_breaking(self) -> None:
        """Identical devices are used in search order: the solver never permutes them."""
        groups: dict[tuple[Any, ...], list[Candidate]] = defaultdict(list)
        option_index = {id(opt): n for n, (_, opt) in enumerate(self._options())}
        constraint_attrs = sorted({spec.attribute for plan in self.problem.plans for spec in plan.constraints})
        list_types = self.problem.request.gates.list_type_attributes
        for candidate in self.choices.candidates():
            groups[self._signature(candidate, option_index, constraint_attrs, list_types)].append(candidate)
        for members in groups.values():
            for a, b in pairwise(members):
                usage_a = [var for _, var in self.choices.of_device(a.id)]
                usage_b = [var for _, var in self.choices.of_device(b.id)]
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
                    tuple(sorted(opt.consumed.get(candidate.id, {}).items())),
                )
                for opt, _ in self.choices.of_device(candidate.id)
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
            candidate.pool.id if counters else None,
            counters,
            self._in_use_before(candidate.id),
            tuple(sorted((n, s.value) for n, s in device.capacity.items())) if candidate.multi else (),
            tuple(sorted(allocated.items())),
            tuple(attrs),
        )

    # -- statistics --------------------------------------------------------------------------

    def size(self) -> tuple[int, int]:
        proto = self.model.proto
        return len(proto.variables), len(proto.constraints)


def _at_most_one(model: cp_model.CpModel, literals: list[cp_model.IntVar], guard: Sequence[Any] = ()) -> None:
    """At most one of ``literals`` (while ``guard`` holds, in a relaxed model)."""
    unique = list({id(v): v for v in literals}.values())
    if guard:
        model.add(sum(unique) <= 1).only_enforce_if(guard)
        return
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
