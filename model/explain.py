"""Explain: why claims cannot be allocated on a node, in words, from the allocator's own model.

API:
- ``explain_node(request, *, cel, holders, solve=None, clock=time.perf_counter) ->
  ExplainAnswer``: ``solve`` (the real allocator) decides first: when it allocates there is
  nothing to explain. Otherwise the node's problem is prepared *relaxed* (``model.cpsat``:
  pairs that a rule forbids stay in, and the CP-SAT model guards every rule instance with a
  switch); the solver finds an irreducible set of rule instances that block the claims
  (``reasons``) and the fewest fixable ones whose removal lets them fit (``fixes``).
  ``holders`` names who holds each device in use ("claim ns/name", or "a reservation in flight
  for claim ns/name").
- ``ExplainAnswer``: node, ``allocatable``, ``reasons``, ``fixes`` (``Restriction``), a
  one-paragraph ``summary``, ``minimal`` (proven irreducible and minimum), ``stats``,
  ``no_fix`` (proven: no change a user can make lets the claims fit on this node, e.g. a
  count above the devices the node has) and ``limit`` (why the answer may not be minimal:
  ``deadline`` when the request's time limit ran out, ``budget`` when the number of solves
  did; "" when minimal). ``request.time_limit`` bounds the whole explanation.
- ``Restriction``: one rule instance in words: ``kind`` (request, selector, class-selector,
  taint, in-use, reserved, constraint, counter, capacity), ``message``, the claim, request and
  devices concerned, and whether a user could lift it (``fixable``).
- ``summarize(reasons, fixes, *, no_fix=False) -> str``; ``headline(reasons) -> str``: the first
  blocking reason in one line (what ``dra-solver allocate`` says when claims do not fit), for
  ``Restriction``s or the gRPC API's reasons alike (``Worded``).

One encoding: the rules are the allocation model's (``model.cpsat.model``); this module only
words the rule instances the model switched (a rule instance without wording fails loudly
here, so a rule added to the model is explained as soon as it is named).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest
from dra_solver.model.capacity import integer_value
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat.problem import Problem, Rule, prepare_problem
from dra_solver.model.errors import SolveTimeout
from dra_solver.model.matching import RequestKey, RequestView, lookup_attribute
from dra_solver.model.pools import PoolDevice, attribute_value
from dra_solver.model.stats import SolveStats

DEFAULT_SECONDS = 10.0
"""The whole explanation's time when the request sets no ``time_limit``."""
PER_SOLVE_SECONDS = 5.0
"""One solve of the search for reasons at most (there are a few dozen, mostly milliseconds)."""
MIN_SECONDS = 0.05
"""The search for reasons gets at least this much, even past the deadline."""

RESERVED_HOLDER = "a reservation in flight"
"""How ``holders`` names a device held by a reservation (kind ``reserved``, not ``in-use``)."""


@dataclass(frozen=True, slots=True)
class Restriction:
    """One thing that can block the claims, in words."""

    key: str
    """Unique id, e.g. ``selector|claim|request|0``."""
    kind: str
    """request, selector, class-selector, taint, in-use, reserved, counter, constraint, capacity."""
    message: str
    claim: str = ""
    request: str = ""
    devices: tuple[str, ...] = ()
    fixable: bool = True
    """False for restrictions a user cannot lift (a request's count is what the claim wants)."""


@dataclass(frozen=True, slots=True)
class ExplainAnswer:
    node: str
    allocatable: bool
    reasons: tuple[Restriction, ...]
    fixes: tuple[Restriction, ...]
    summary: str
    minimal: bool
    stats: SolveStats
    no_fix: bool = False
    """Proven: no change a user can make (selectors, taints, devices in use, counters,
    capacity, constraints) lets the claims fit on this node; ``fixes`` is empty."""
    limit: str = ""
    """Why the answer may not be minimal: ``deadline`` or ``budget``; "" when ``minimal``."""


def explain_node(
    request: AllocationRequest,
    *,
    cel: CelEnvironment,
    holders: Mapping[DeviceID, str],
    solve: Callable[[AllocationRequest], AllocationOutcome] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> ExplainAnswer:
    """Why ``request`` cannot be allocated (or that it can); see the module docstring."""
    # lazy import: OR-Tools (~0.4 s), only when something needs explaining (model.cpsat)
    from dra_solver.model.cpsat.explain import find_reasons

    start = clock()
    deadline = start + (request.time_limit or DEFAULT_SECONDS)
    node = request.node.name
    timed_out = False
    if solve is not None:
        try:
            outcome = solve(request)
        except SolveTimeout:
            outcome, timed_out = None, True
        if outcome is not None and outcome.allocated:
            stats = SolveStats("explain", "FEASIBLE", clock() - start)
            return ExplainAnswer(node, True, (), (), "the claims fit on this node", True, stats)
    # A moment for the search even when solving the claims used up the time: an explanation
    # that may not be minimal (and says so) beats none.
    deadline = max(deadline, clock() + MIN_SECONDS)
    problem = prepare_problem(request, cel=cel, relaxed=True)
    words = _Wording(problem, holders)
    result = find_reasons(
        problem,
        key_of=lambda rule: words.of(rule).key,
        fixable=lambda rule: words.of(rule).fixable,
        tiers=[words.in_tier(tier) for tier in _TIERS],
        priority=lambda rule: _PRIORITY.get(rule.kind, 9),
        time_limit=PER_SOLVE_SECONDS,
        remaining=lambda: deadline - clock(),
    )
    stats = SolveStats(
        allocator="explain",
        status=result.status,
        wall_seconds=clock() - start,
        parameters={"num_workers": "1", "random_seed": "0", "solves": str(result.solves)},
    )
    if result.allocatable:
        # The relaxed model found room the allocator did not: say so rather than invent reasons.
        return ExplainAnswer(node, False, (), (), "no single restriction explains it: the allocator found no allocation "
                             "although each restriction on its own can be met (try a longer deadline)", False, stats,
                             limit="deadline" if timed_out else "")
    reasons = _ordered([words.of(r) for r in result.reasons])
    fixes = _ordered([words.of(r) for r in result.fixes])
    return ExplainAnswer(node, False, reasons, fixes, summarize(reasons, fixes, no_fix=result.no_fix), result.minimal,
                         stats, no_fix=result.no_fix, limit=result.limit)


NO_FIX = "no change makes them fit on this node"
"""How an answer with ``no_fix`` says so."""


def summarize(reasons: Sequence[Restriction], fixes: Sequence[Restriction], *, no_fix: bool = False) -> str:
    text = "cannot allocate: " + "; ".join(r.message for r in reasons) + "."
    if fixes:
        text += " It would fit if: " + "; ".join(_fix_text(r) for r in fixes) + "."
    elif no_fix:
        text += f" {NO_FIX[0].upper()}{NO_FIX[1:]}."
    return text


class Worded(Protocol):
    """A reason in words: a ``Restriction``, or the ``Reason`` message of the gRPC API."""

    @property
    def kind(self) -> str: ...

    @property
    def message(self) -> str: ...


UNLIFTABLE_KINDS = frozenset({"request"})
"""The kinds of the reasons no user can lift (what a claim asks is the question): their
``Restriction.fixable`` is False."""


def headline(reasons: Sequence[Worded]) -> str:
    """The first blocking reason in one line: the first reason a user could lift (what the
    claims ask comes first in ``reasons`` but is not what blocks them), or the first reason
    when none can be lifted; with how many more reasons there are. "" without reasons."""
    if not reasons:
        return ""
    first = next((r for r in reasons if r.kind not in UNLIFTABLE_KINDS), reasons[0])
    more = len(reasons) - 1
    return first.message + (f" (and {_plural(more, 'more reason')})" if more else "")


def _fix_text(r: Restriction) -> str:
    if r.kind == "in-use":
        return f"{r.devices[0] if r.devices else 'the device'} were free"
    if r.kind == "reserved":
        return f"the reservation of {r.devices[0] if r.devices else 'the device'} were released"
    if r.kind == "taint":
        return f"the taint were tolerated or removed ({r.message})"
    return f"this were relaxed: {r.message}"


_STRUCTURAL = frozenset({"request", "pool", "class-selector", "selector", "constraint", "counter", "capacity"})
_TIERS = (_STRUCTURAL, _STRUCTURAL | {"taint"})
"""Restriction kinds tried on their own when looking for reasons: the claims and the hardware,
then taints; then devices in use or reserved (everything: the full model)."""

_PRIORITY = {"request": 0, "class-selector": 1, "selector": 2, "taint": 3, "constraint": 4, "counter": 5, "capacity": 6, "in-use": 7}

_KIND_ORDER = {k: i for i, k in enumerate(("request", "pool", "class-selector", "selector", "taint", "constraint", "counter", "capacity", "in-use", "reserved"))}


def _ordered(restrictions: Sequence[Restriction]) -> tuple[Restriction, ...]:
    return tuple(sorted(restrictions, key=lambda r: (_KIND_ORDER.get(r.kind, 99), r.key)))


def _short(dev: DeviceID) -> str:
    return f"{dev.pool}/{dev.device}"


def _list(devs: Sequence[str], limit: int = 6) -> str:
    if len(devs) <= limit:
        return ", ".join(devs)
    return ", ".join(devs[:limit]) + f" and {len(devs) - limit} more"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


class _Wording:
    """Each rule instance of a relaxed problem as a ``Restriction`` (worded once, on demand)."""

    def __init__(self, problem: Problem, holders: Mapping[DeviceID, str]) -> None:
        self.problem = problem
        self.holders = holders
        self._done: dict[Rule, Restriction] = {}
        self._devices: dict[DeviceID, PoolDevice] = {c.id: c.device for c in problem.candidates}

    def of(self, rule: Rule) -> Restriction:
        done = self._done.get(rule)
        if done is None:
            done = self._done[rule] = self._word(rule)
        return done

    def _word(self, rule: Rule) -> Restriction:
        subject = rule.subject
        match rule.kind:
            case "request":
                return self._request(subject[0])
            case "selector":
                return self._selector(subject[0], subject[1])
            case "class-selector":
                return self._class_selector(subject[0], subject[1])
            case "in-use":
                return self._in_use(subject[0])
            case "taint":
                return self._taint(subject[0], subject[1])
            case "constraint":
                return self._constraint(subject[0], subject[1])
            case "counter":
                return self._counter(subject[0], subject[1], subject[2])
            case "capacity":
                return self._capacity(subject[0], subject[1])
        raise AssertionError(f"no wording for rule {rule.kind}")

    def in_tier(self, kinds: frozenset[str]) -> Callable[[Rule], bool]:
        return lambda rule: self.of(rule).kind in kinds

    def _view(self, key: RequestKey) -> tuple[RequestView, str, str]:
        view = self.problem.option(key).view
        return view, view.claim.ref, view.ref

    def _request(self, key: RequestKey) -> Restriction:
        view, ref, name = self._view(key)
        what = "every matching device" if view.is_all else _plural(view.count or 1, "device")
        cls = view.device_class.name if view.device_class else view.device_class_name
        # How many devices the node could offer the request at all, whatever rule forbids them:
        # "needs 16, the node has 8" is a reason no change on the node lifts.
        option = self.problem.option(key)
        reachable = len(option.candidates)
        in_class = sum(
            1 for c in option.candidates if not any(r.kind == "class-selector" for r in option.blocked.get(c.id, ()))
        )
        has = _plural(reachable, "device") + (f", {in_class} of this class" if in_class != reachable else "")
        return Restriction(f"request|{ref}|{name}", "request",
                           f"claim {ref}, request {name} needs {what} of class {cls} (the node has {has})",
                           claim=ref, request=name, fixable=False)

    def _rejected(self, rule: Rule, key: RequestKey) -> list[str]:
        option = self.problem.option(key)
        out = []
        for candidate in option.candidates:
            if rule in option.blocked.get(candidate.id, ()):
                error = self.problem.selector_errors.get((rule, candidate.id), "")
                out.append(_short(candidate.id) + (f" ({error})" if error else ""))
        return out

    def _selector(self, key: RequestKey, index: int) -> Restriction:
        view, ref, name = self._view(key)
        selector = view.selectors[index]
        expression = selector.cel.expression if selector.cel else ""
        bad = self._rejected(Rule("selector", (key, index)), key)
        return Restriction(f"selector|{ref}|{name}|{index}", "selector",
                           f"claim {ref}, request {name}, selector #{index} ({expression}) rejects {_plural(len(bad), 'device')}: {_list(bad)}",
                           claim=ref, request=name)

    def _class_selector(self, class_name: str, index: int) -> Restriction:
        rule = Rule("class-selector", (class_name, index))
        # Worded from the first request (in claim order) the class selector rejects devices for.
        for option in self.problem.all_options():
            view = option.view
            if view.device_class is None or view.device_class.name != class_name:
                continue
            bad = self._rejected(rule, option.key)
            if not bad:
                continue
            selector = (view.device_class.spec.selectors or [])[index]
            expression = selector.cel.expression if selector.cel else ""
            return Restriction(f"class-selector|{class_name}|{index}", "class-selector",
                               f"device class {class_name}, selector #{index} ({expression}) rejects {_plural(len(bad), 'device')}: {_list(bad)}")
        raise AssertionError(f"class selector {class_name} #{index} rejects nothing")

    def _in_use(self, device: DeviceID) -> Restriction:
        holder = self.holders.get(device, "another claim")
        kind = "reserved" if holder.startswith(RESERVED_HOLDER) else "in-use"
        verb = "is held by" if kind == "reserved" else "is in use by"
        return Restriction(f"{kind}|{device}", kind, f"device {device} {verb} {holder}", devices=(str(device),))

    def _taint(self, device: DeviceID, index: int) -> Restriction:
        taint = self._devices[device].taints[index]
        text = f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
        return Restriction(f"taint|{device}|{text}", "taint",
                           f"device {device} has taint {text}, which the requests do not tolerate", devices=(str(device),))

    def _constraint(self, claim_index: int, index: int) -> Restriction:
        plan = self.problem.plans[claim_index]
        claim = plan.claim
        ref = claim.ref
        spec = (claim.spec.devices.constraints or [])[index]
        attribute = spec.match_attribute or spec.distinct_attribute or ""
        names = [r.name for r in claim.spec.devices.requests or []]
        histogram: dict[str, int] = {}
        for candidate in self.problem.candidates:
            if not candidate.device.node_match:
                continue
            value = _attribute_text(candidate.device, attribute)
            if value is not None:
                histogram[value] = histogram.get(value, 0) + 1
        seen = ", ".join(f"{v}: {n}" for v, n in sorted(histogram.items())) or "no device has it"
        verb = "matchAttribute" if spec.match_attribute else "distinctAttribute"
        over = ", ".join(spec.requests or names)
        return Restriction(f"constraint|{ref}|{index}", "constraint",
                           f"claim {ref}, constraint #{index}: {verb} {attribute} over requests {over} (devices per value on this node: {seen})",
                           claim=ref)

    def _counter(self, pool_id: str, counter_set: str, counter: str) -> Restriction:
        pool = next(p for p in self.problem.pools if p.id == pool_id)
        total = pool.counter_sets[counter_set][counter]
        in_use = self.problem.allocated.devices
        used = 0
        for device in (*pool.devices, *pool.other_devices):
            if device.id not in in_use:
                continue
            for consumption in device.counters:
                if consumption.counter_set == counter_set and counter in consumption.counters:
                    used += integer_value(consumption.counters[counter])
        note = f", {used} of it consumed by devices in use" if used else ""
        return Restriction(f"counter|{pool_id}|{counter_set}|{counter}", "counter",
                           f"pool {pool_id}, counter set {counter_set}: counter {counter} is {total}{note}")

    def _capacity(self, device: DeviceID, name: str) -> Restriction:
        spec = self._devices[device].capacity.get(name)
        if spec is None:
            return Restriction(f"capacity|{device}|{name}", "capacity", f"device {device} has no capacity {name}",
                               devices=(str(device),))
        already = self.problem.allocated.capacity.get(device, {})
        used = integer_value(already[name]) if name in already else 0
        return Restriction(f"capacity|{device}|{name}", "capacity",
                           f"device {device}: capacity {name} is {spec.value}" + (f", {already[name]} already consumed" if used else ""),
                           devices=(str(device),))


def _attribute_text(device: PoolDevice, qualified: str) -> str | None:
    """The attribute's value as text (for the per-value histogram), None without it."""
    attr: o.DeviceAttribute | None = lookup_attribute(device, qualified)
    if attr is None:
        return None
    value, error = attribute_value(attr)
    return None if error else str(value)
