"""The single-device path: when the claims ask for exactly one device, the model's optimum is
found by looking at each candidate once, with no model and no solver call.

API:
- ``single_device(problem, policy) -> Choices | NothingFits | None``: the allocation the CP-SAT
  model (``model.cpsat.model``) would return, ``NOTHING_FITS`` when the model would be
  infeasible (candidates exist, none passes its rules), or None when the problem is not of this
  kind or no option has candidates (then the model decides, and says why nothing fits).

Which problems: one claim with one request that takes exactly one device (``exactly`` with
ExactCount 1, or ``firstAvailable`` whose subrequests each take one), no claim constraints, no
adminAccess, no shareable devices (consumable capacity), nothing deferred to upstream's search;
policies ``pack``, ``spread`` and ``first-fit`` (``score`` alone leaves ties to the solver).

Why it is exact: with one device chosen, every rule of the model is a test of that device (its
counters against what is left, as the model scales them) and every objective level is a
number of that device, so the model's lexicographic objective (``model.cpsat.objective``) is
a sort key: the FirstAvailable weight of its subrequest, then for ``pack`` the counter sets it
would open (``spread``: the more the better) and its size, then its position in upstream's
search order, which is unique, so the optimum is too. tests/model/test_cpsat_single.py checks
it against the model.

Why: partitioned GPUs (one MIG slice per pod) otherwise build a model with every partition of
the node and its counters for each pod; this is most of the time of a Schedule on such nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TypeVar

from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat.amounts import (
    MAX_COEFFICIENT,
    Exact,
    counters_left,
    device_sizes,
    exact,
    scaled,
)
from dra_solver.model.cpsat.problem import Candidate, Choices, OptionData, Problem, request_of
from dra_solver.model.policy import Policy
from dra_solver.model.pools import Pool, PoolDevice
from dra_solver.model.score import subrequest_weight

K = TypeVar("K")
V = TypeVar("V")

_POLICIES = frozenset({Policy.PACK, Policy.SPREAD, Policy.FIRST_FIT})


def _applies(problem: Problem, policy: Policy) -> list[OptionData] | None:
    """The request's options when the problem is of this kind (module docstring)."""
    if policy not in _POLICIES or problem.relaxed or problem.deferred_errors or problem.search_dependent:
        return None
    if len(problem.options) != 1 or len(problem.options[0]) != 1 or problem.plans[0].constraints:
        return None
    options = problem.options[0][0]
    for option in options:
        view = option.view
        if view.is_all or view.count != 1 or view.admin_access or view.has_admin_access:
            return None
        if any(c.multi for c in option.candidates):
            return None
    return [o for o in options if o.possible]


class NothingFits:
    """``single_device``'s answer when the problem is of its kind and no candidate passes the
    model's rules: the model is infeasible (and would say nothing more than that)."""


NOTHING_FITS = NothingFits()


def single_device(problem: Problem, policy: Policy) -> Choices | NothingFits | None:
    options = _applies(problem, policy)
    if not options:
        return None
    candidates: list[Candidate]
    if len(options) == 1:
        # One option's candidates are distinct and in search order already (``_option``
        # visits the problem's candidates in order).
        candidates = options[0].candidates
    else:
        by_id: dict[DeviceID, Candidate] = {}
        for option in options:
            for candidate in option.candidates:
                by_id.setdefault(candidate.id, candidate)
        candidates = sorted(by_id.values(), key=lambda c: c.index)  # the model's device variables
    in_use = problem.in_use_before
    parsed = problem.request.device_cache
    fits = (
        _counter_fit(candidates, in_use, parsed.counter_terms if parsed is not None else None, parsed.pool_counters if parsed is not None else None)
        if problem.request.gates.partitionable_devices
        else None
    )
    sizes = device_sizes(candidates, parsed.counter_sizes if parsed is not None else None) if policy != Policy.FIRST_FIT else {}
    opened = _opened(problem, candidates, parsed.pool_counters if parsed is not None else None) if policy != Policy.FIRST_FIT else {}
    sign = -1 if policy == Policy.SPREAD else 1
    best: tuple[tuple[int, int, int, int], OptionData, Candidate] | None = None
    for option in options:
        weight = subrequest_weight(option.key.subrequest) if option.key.subrequest is not None else 0
        for candidate in option.candidates:
            if fits is not None and not fits.get(candidate.id, True):
                continue
            key = (-weight, sign * opened.get(candidate.id, 0), sizes.get(candidate.id, 0), candidate.index)
            if best is None or key < best[0]:
                best = (key, option, candidate)
    if best is None:
        # Every candidate of every possible option was tested against every rule of the model:
        # the model has no solution (the infeasibility a solve would prove, without the model).
        return NOTHING_FITS
    _, option, candidate = best
    return Choices({request_of(option.key): option.key}, {option.key: (candidate,)})


def _counter_fit(
    candidates: list[Candidate],
    in_use: frozenset[DeviceID],
    memo: dict[PoolDevice, tuple[tuple[tuple[str, str], Exact], ...]] | None = None,
    pools: dict[Pool, tuple[dict[tuple[str, str], Exact], dict[DeviceID, list[PoolDevice]]]] | None = None,
) -> dict[DeviceID, bool]:
    """Per candidate, whether using it alone keeps every counter it draws on within what is
    left, as the model's constraint for that counter says (same scaling, same terms).
    ``memo`` keeps each device's exact counter amounts by device object across calls, ``pools``
    each pool's counters and its devices by ID (``counters_left`` from the devices in use)."""
    fit: dict[DeviceID, bool] = {}
    by_pool: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        if candidate.device.counters and candidate.id not in in_use:
            by_pool[candidate.pool.id].append(candidate)
    for members in by_pool.values():
        pool = members[0].pool
        left = counters_left(pool, in_use.__contains__) if pools is None else _left(pool, in_use, pools, memo)
        known = memo.get if memo is not None else None
        terms = [
            (candidate.id, (known(candidate.device) if known is not None else None) or _drawn(candidate.device, memo))
            for candidate in members
        ]
        unfit = _integral_unfit(terms, left)
        if unfit is not None:
            fit.update(dict.fromkeys(unfit, False))
            continue
        demand: dict[tuple[str, str], list[tuple[Exact, DeviceID]]] = defaultdict(list)
        for candidate, (_, drawn) in zip(members, terms, strict=True):
            for slot, amount in drawn:
                demand[slot].append((amount, candidate.id))
        for slot, slot_terms in demand.items():
            available = left.get(slot)
            if available is None or sum(a for a, _ in slot_terms) <= available:
                continue  # never binding
            if available < 0:
                for need, device in slot_terms:
                    if need > 0:
                        fit[device] = False
                continue
            coefficients, limit = scaled([a for a, _ in slot_terms], available)
            for k, (_, device) in zip(coefficients, slot_terms, strict=True):
                if k > limit:
                    fit[device] = False
    return fit


def _drawn(
    device: PoolDevice, memo: dict[PoolDevice, tuple[tuple[tuple[str, str], Exact], ...]] | None
) -> tuple[tuple[tuple[str, str], Exact], ...]:
    """The device's exact amount per (counter set, counter), kept in ``memo`` by device object."""
    return _kept(memo, device, 100_000, lambda: tuple(
        ((consumption.counter_set, name), exact(amount))
        for consumption in device.counters
        for name, amount in consumption.counters.items()
    ))


def _integral_unfit(
    terms: list[tuple[DeviceID, tuple[tuple[tuple[str, str], Exact], ...]]], left: dict[tuple[str, str], Exact]
) -> list[DeviceID] | None:
    """The devices that do not fit, when every amount and everything left is an integer the
    model keeps unscaled (``amounts.scaled`` is then exact: a device fits a counter when its
    amount is at most what is left, or, when more than all is taken, when it needs none of it);
    None when some number is not of that kind (then the model's scaling is followed term by
    term)."""
    for available in left.values():
        if type(available) is not int or not -MAX_COEFFICIENT <= available <= MAX_COEFFICIENT:
            return None
    unfit: list[DeviceID] = []
    for device, drawn in terms:
        for slot, amount in drawn:
            if type(amount) is not int or not 0 <= amount <= MAX_COEFFICIENT:
                return None
            have = left.get(slot)
            if have is not None and amount > (have if have >= 0 else 0):
                unfit.append(device)
    return unfit


def _pool_entry(
    pool: Pool, pools: dict[Pool, tuple[dict[tuple[str, str], Exact], dict[DeviceID, list[PoolDevice]]]] | None
) -> tuple[dict[tuple[str, str], Exact], dict[DeviceID, list[PoolDevice]]]:
    """The pool's exact counters and its devices (``devices`` and ``other_devices``) by ID,
    kept in ``pools`` by pool object."""
    def entry() -> tuple[dict[tuple[str, str], Exact], dict[DeviceID, list[PoolDevice]]]:
        totals = {(set_name, name): exact(q) for set_name, counters in pool.counter_sets.items() for name, q in counters.items()}
        by_id: dict[DeviceID, list[PoolDevice]] = {}
        for device in (*pool.devices, *pool.other_devices):
            by_id.setdefault(device.id, []).append(device)
        return totals, by_id

    return _kept(pools, pool, 10_000, entry)


def _kept(memo: dict[K, V] | None, key: K, limit: int, compute: Callable[[], V]) -> V:
    """``memo[key]``, computed once; a memo grown past ``limit`` starts over (bounded memory)."""
    known = memo.get(key) if memo is not None else None
    if known is None:
        known = compute()
        if memo is not None:
            if len(memo) > limit:
                memo.clear()
            memo[key] = known
    return known


def _left(
    pool: Pool,
    in_use: frozenset[DeviceID],
    pools: dict[Pool, tuple[dict[tuple[str, str], Exact], dict[DeviceID, list[PoolDevice]]]],
    memo: dict[PoolDevice, tuple[tuple[tuple[str, str], Exact], ...]] | None,
) -> dict[tuple[str, str], Exact]:
    """``counters_left(pool, in_use)``, from the few devices in use rather than every device of
    the pool (exact amounts: the order of the subtractions does not matter)."""
    totals, by_id = _pool_entry(pool, pools)
    left = dict(totals)
    for dev_id in in_use:
        for device in by_id.get(dev_id, ()):
            for slot, amount in _drawn(device, memo):
                if slot in left:
                    left[slot] -= amount
    return left


def _opened(
    problem: Problem,
    candidates: list[Candidate],
    pools: dict[Pool, tuple[dict[tuple[str, str], Exact], dict[DeviceID, list[PoolDevice]]]] | None = None,
) -> dict[DeviceID, int]:
    """Per candidate, the untouched counter sets it would open (``objective._Levels.opened``;
    shareable devices, the level's other term, never reach this path). A counter set is
    touched when a device of a usable pool, or one of its other devices, is in use; the devices
    in use are looked up in each pool (``pools`` keeps its devices by ID)."""
    in_use = problem.in_use_before
    touched: dict[str, set[str]] = {}  # per pool ID, the counter sets devices in use draw on
    if in_use:
        for pool in problem.pools:
            if not pool.usable or not pool.devices:
                continue  # none of its devices is a candidate
            _, by_id = _pool_entry(pool, pools)
            for dev_id in in_use:
                for device in by_id.get(dev_id, ()):
                    for consumption in device.counters:
                        touched.setdefault(pool.id, set()).add(consumption.counter_set)
    out: dict[DeviceID, int] = {}
    nothing: set[str] = set()
    for candidate in candidates:
        counters = candidate.device.counters
        if not counters:
            out[candidate.id] = 0
            continue
        sets = touched.get(candidate.pool.id, nothing)
        if len(counters) == 1:
            out[candidate.id] = 0 if counters[0].counter_set in sets else 1
        else:
            out[candidate.id] = len({c.counter_set for c in counters} - sets)
    return out
