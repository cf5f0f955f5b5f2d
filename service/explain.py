"""Explain: turn one node's allocation problem into ``model.explain``'s relaxed problem, and
the solver's answer into sentences.

The problem is built from the same pieces the allocators use (``model.pools`` for the devices a
node reaches, their taints, counters and capacity; ``model.cel`` for selectors;
``model.taints``; ``model.capacity``), so an explanation talks about exactly what the solver
saw. Every restriction carries its message; the solver picks which ones matter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest, DeviceID, SolveStats
from dra_solver.model.errors import AllocationError, SolveTimeout
from dra_solver.model.explain import (
    AttributeConstraint,
    CapacityLimit,
    CounterLimit,
    ExplainDevice,
    ExplainRequest,
    Problem,
    Restriction,
    explain,
)


@dataclass(frozen=True, slots=True)
class ExplainAnswer:
    node: str
    allocatable: bool
    reasons: tuple[Restriction, ...]
    fixes: tuple[Restriction, ...]
    summary: str
    minimal: bool
    stats: SolveStats


def explain_on_node(
    request: AllocationRequest,
    *,
    cel: Any,
    holders: Mapping[DeviceID, str],
    solve: Callable[[AllocationRequest], AllocationOutcome] | None = None,
) -> ExplainAnswer:
    """Why ``request`` cannot be allocated (or that it can).

    ``solve`` (the real allocator) decides first: when it allocates, there is nothing to
    explain. ``holders`` names who holds each device in use ("claim ns/name").
    """
    start = time.perf_counter()
    node = request.node.name
    if solve is not None:
        try:
            outcome = solve(request)
        except SolveTimeout:
            outcome = None
        if outcome is not None and outcome.allocated:
            stats = SolveStats("explain", "FEASIBLE", time.perf_counter() - start)
            return ExplainAnswer(node, True, (), (), "the claims fit on this node", True, stats)
    problem = build_problem(request, cel=cel, holders=holders)
    limit = max(0.05, min(request.time_limit or 5.0, 5.0))
    result = explain(problem, time_limit=limit)
    stats = SolveStats(
        allocator="explain",
        status=result.status,
        wall_seconds=time.perf_counter() - start,
        parameters={"num_workers": "1", "random_seed": "0", "solves": str(result.solves)},
    )
    if result.allocatable:
        # The relaxed model found room the allocator did not: say so rather than invent reasons.
        return ExplainAnswer(node, False, (), (), "no single restriction explains it: the allocator found no allocation "
                             "although each restriction on its own can be met (try a longer deadline)", False, stats)
    return ExplainAnswer(node, False, result.reasons, result.fixes, summarize(result.reasons, result.fixes), result.minimal, stats)


def summarize(reasons: Sequence[Restriction], fixes: Sequence[Restriction]) -> str:
    text = "cannot allocate: " + "; ".join(r.message for r in reasons) + "."
    if fixes:
        text += " It would fit if: " + "; ".join(_fix_text(r) for r in fixes) + "."
    return text


def _fix_text(r: Restriction) -> str:
    if r.kind == "in-use":
        return f"{r.devices[0] if r.devices else 'the device'} were free"
    if r.kind == "reserved":
        return f"the reservation of {r.devices[0] if r.devices else 'the device'} were released"
    if r.kind == "taint":
        return f"the taint were tolerated or removed ({r.message})"
    return f"this were relaxed: {r.message}"


def _short(dev: DeviceID) -> str:
    return f"{dev.pool}/{dev.device}"


def _list(devs: Sequence[str], limit: int = 6) -> str:
    if len(devs) <= limit:
        return ", ".join(devs)
    return ", ".join(devs[:limit]) + f" and {len(devs) - limit} more"


def build_problem(request: AllocationRequest, *, cel: Any, holders: Mapping[DeviceID, str]) -> Problem:
    """The relaxed problem of ``request`` (see ``model.explain``)."""
    from dra_solver.model.capacity import consumed_amount, integer_value
    from dra_solver.model.pools import gather_pools
    from dra_solver.model.quantity import parse_quantity
    from dra_solver.model.taints import BLOCKING_EFFECTS, tolerates

    inv = request.inventory
    gates = request.gates
    p = Problem()
    pools = gather_pools(inv.slices, request.node, gates=gates, taint_rules=inv.taint_rules)
    in_use = inv.allocated_state()
    devices: list[Any] = []
    unusable: dict[str, str] = {}
    for pool in pools:
        if pool.usable:
            devices.extend(d for d in pool.devices if d.node_match)
        else:
            why = "incomplete (not all of its slices are published)" if pool.incomplete else f"invalid: {pool.invalid_reason}"
            unusable[pool.id] = p.add(Restriction(f"pool|{pool.id}", "pool", f"pool {pool.id} is {why}", fixable=False))
    reserved_marker = "a reservation in flight"
    for d in devices:
        key = ""
        if d.id in in_use.devices and not d.allow_multiple_allocations:
            holder = holders.get(d.id, "another claim")
            kind = "reserved" if holder.startswith(reserved_marker) else "in-use"
            verb = "is held by" if kind == "reserved" else "is in use by"
            key = p.add(Restriction(f"{kind}|{d.id}", kind, f"device {d.id} {verb} {holder}", devices=(str(d.id),)))
        p.devices.append(ExplainDevice(str(d.id), multiple=d.allow_multiple_allocations, in_use=key))

    compiled: dict[str, Any] = {}

    def matches(expr: str, device: Any) -> bool | str:
        if device.cel is None:
            return f"device cannot be evaluated: {device.cel_error}"
        try:
            sel = compiled.get(expr)
            if sel is None:
                sel = compiled[expr] = cel.compile(expr)
            return bool(cel.matches(sel, device.cel))
        except Exception as err:  # runtime errors make the device unusable for this request
            return str(err)

    for claim in request.claims:
        ref = claim.ref
        for req in claim.spec.devices.requests or []:
            subs: list[tuple[str, Any, bool]] = []
            if req.exactly is not None:
                subs.append((req.name, req.exactly, bool(req.exactly.admin_access)))
            for sub in req.first_available or []:
                subs.append((f"{req.name}/{sub.name}", sub, False))
            group = f"{ref}|{req.name}" if req.first_available else ""
            for name, spec, admin in subs:
                _add_request(p, ref, name, spec, admin, group, request, devices, matches, unusable, pools)
        _add_constraints(p, claim, devices)
    _add_taints(p, request, devices, BLOCKING_EFFECTS, tolerates)
    _add_counters(p, pools, in_use, parse_quantity, integer_value)
    _add_capacity(p, request, devices, in_use, consumed_amount, integer_value, parse_quantity)
    return p


def _add_request(
    p: Problem,
    ref: str,
    name: str,
    spec: Any,
    admin: bool,
    group: str,
    request: AllocationRequest,
    devices: Sequence[Any],
    matches: Callable[[str, Any], bool | str],
    unusable: Mapping[str, str],
    pools: Sequence[Any],
) -> None:
    key = f"{ref}|{name}"
    cls = request.inventory.device_class(spec.device_class_name)
    if cls is None:
        raise AllocationError(f"claim {ref}, request {name}: could not retrieve device class {spec.device_class_name}")
    mode = spec.allocation_mode or "ExactCount"
    count = spec.count or 1
    what = "every matching device" if mode == "All" else f"{count} device{'s' if count != 1 else ''}"
    req_key = p.add(Restriction(f"request|{key}", "request", f"claim {ref}, request {name} needs {what} of class {cls.name}",
                                claim=ref, request=name, fixable=False))
    p.requests.append(ExplainRequest(key, ref, name, count, all_devices=mode == "All", group=group, admin_access=admin,
                                     count_restriction=req_key))
    candidates: list[str] = []
    members: list[str] = []
    selectors: list[tuple[str, str, str]] = []  # (restriction key prefix, expression, label)
    for i, sel in enumerate(cls.spec.selectors or []):
        if sel.cel is not None:
            selectors.append((f"class-selector|{cls.name}|{i}", sel.cel.expression, f"device class {cls.name}, selector #{i}"))
    for i, sel in enumerate(spec.selectors or []):
        if sel.cel is not None:
            selectors.append((f"selector|{key}|{i}", sel.cel.expression, f"claim {ref}, request {name}, selector #{i}"))
    rejected: dict[str, list[str]] = {}
    for d in devices:
        dev = str(d.id)
        blocks: list[str] = []
        for skey, expr, _label in selectors:
            ok = matches(expr, d)
            if ok is not True:
                blocks.append(skey)
                rejected.setdefault(skey, []).append(_short(d.id) + ("" if ok is False else f" ({ok})"))
        candidates.append(dev)
        if not blocks:
            members.append(dev)
        if blocks:
            p.blocks[key, dev] = tuple(blocks)
    for pool in pools:
        if pool.id in unusable:
            for d in pool.devices:
                candidates.append(str(d.id))
                p.blocks[key, str(d.id)] = (unusable[pool.id],)
    for skey, expr, label in selectors:
        bad = rejected.get(skey)
        if bad:
            kind = "class-selector" if skey.startswith("class-selector") else "selector"
            p.add(Restriction(skey, kind, f"{label} ({expr}) rejects {len(bad)} device{'s' if len(bad) != 1 else ''}: {_list(bad)}",
                              claim="" if kind == "class-selector" else ref, request="" if kind == "class-selector" else name))
    p.candidates[key] = tuple(candidates)
    if mode == "All":
        p.all_members[key] = tuple(members)


def _attribute(device: Any, qualified: str) -> str | None:
    from dra_solver.model.pools import attribute_value

    domain, _, short = qualified.rpartition("/")
    attrs = device.device.attributes or {}
    attr = attrs.get(qualified)
    if attr is None and domain == device.id.driver:
        attr = attrs.get(short)
    if attr is None:
        return None
    value, error = attribute_value(attr)
    return None if error else str(value)


def _add_constraints(p: Problem, claim: o.ResourceClaim, devices: Sequence[Any]) -> None:
    ref = claim.ref
    names = [r.name for r in claim.spec.devices.requests or []]
    for i, c in enumerate(claim.spec.devices.constraints or []):
        attr = c.match_attribute or c.distinct_attribute
        if not attr:
            continue
        reqs = tuple(f"{ref}|{r}" for r in (c.requests or names))
        values = tuple((str(d.id), v) for d in devices if (v := _attribute(d, attr)) is not None)
        histogram: dict[str, int] = {}
        for _, v in values:
            histogram[v] = histogram.get(v, 0) + 1
        seen = ", ".join(f"{v}: {n}" for v, n in sorted(histogram.items())) or "no device has it"
        verb = "matchAttribute" if c.match_attribute else "distinctAttribute"
        over = ", ".join(c.requests or names)
        key = p.add(Restriction(f"constraint|{ref}|{i}", "constraint",
                                f"claim {ref}, constraint #{i}: {verb} {attr} over requests {over} (devices per value on this node: {seen})",
                                claim=ref))
        p.constraints.append(AttributeConstraint(key, bool(c.match_attribute), reqs, values))


def _add_taints(p: Problem, request: AllocationRequest, devices: Sequence[Any], blocking: frozenset[str], tolerates: Callable[..., bool]) -> None:
    tolerations: dict[str, Sequence[o.DeviceToleration]] = {}
    for claim in request.claims:
        for req in claim.spec.devices.requests or []:
            if req.exactly is not None:
                tolerations[f"{claim.ref}|{req.name}"] = req.exactly.tolerations or ()
            for sub in req.first_available or []:
                tolerations[f"{claim.ref}|{req.name}/{sub.name}"] = sub.tolerations or ()
    for d in devices:
        dev = str(d.id)
        for taint in d.taints:
            if taint.effect not in blocking:
                continue
            text = f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
            key = f"taint|{dev}|{text}"
            blocked = [rk for rk, tols in tolerations.items() if not any(tolerates(t, taint) for t in tols)]
            if not blocked:
                continue
            p.add(Restriction(key, "taint", f"device {dev} has taint {text}, which the requests do not tolerate", devices=(dev,)))
            for rk in blocked:
                p.blocks[rk, dev] = (*p.blocks.get((rk, dev), ()), key)


def _add_counters(p: Problem, pools: Sequence[Any], in_use: Any, parse_quantity: Callable[[str], Any], integer_value: Callable[[Any], int]) -> None:
    for pool in pools:
        if not pool.usable or not pool.counter_sets:
            continue
        everyone = list(pool.devices) + list(pool.other_devices)
        for set_name, counters in sorted(pool.counter_sets.items()):
            for counter, total in sorted(counters.items()):
                used = 0
                consumption: list[tuple[str, int]] = []
                for d in everyone:
                    amount = 0
                    for c in d.counters:
                        if c.counter_set == set_name and counter in c.counters:
                            amount += integer_value(c.counters[counter])
                    if not amount:
                        continue
                    if d.id in in_use.devices:
                        used += amount
                    else:
                        consumption.append((str(d.id), amount))
                if not consumption:
                    continue
                cap = integer_value(total)
                note = f", {used} of it consumed by devices in use" if used else ""
                key = p.add(Restriction(f"counter|{pool.id}|{set_name}|{counter}", "counter",
                                        f"pool {pool.id}, counter set {set_name}: counter {counter} is {total}{note}"))
                p.counters.append(CounterLimit(key, cap - used, tuple(consumption)))


def _add_capacity(
    p: Problem,
    request: AllocationRequest,
    devices: Sequence[Any],
    in_use: Any,
    consumed_amount: Callable[..., Any],
    integer_value: Callable[[Any], int],
    parse_quantity: Callable[[str], Any],
) -> None:
    wants: dict[str, dict[str, Any]] = {}
    for claim in request.claims:
        for req in claim.spec.devices.requests or []:
            specs: list[tuple[str, Any]] = [(req.name, req.exactly)] if req.exactly is not None else []
            specs += [(f"{req.name}/{s.name}", s) for s in req.first_available or []]
            for name, spec in specs:
                caps = spec.capacity.requests if spec and spec.capacity and spec.capacity.requests else None
                wants[f"{claim.ref}|{name}"] = {k: parse_quantity(v) for k, v in (caps or {}).items()}
    for d in devices:
        if not d.allow_multiple_allocations or not d.capacity:
            continue
        already = in_use.capacity.get(d.id, {})
        for cap_name, spec in sorted(d.capacity.items()):
            demand = []
            for rk, asked in wants.items():
                amount = consumed_amount(asked.get(cap_name), spec)
                demand.append((rk, integer_value(amount)))
            used = integer_value(already[cap_name]) if cap_name in already else 0
            key = p.add(Restriction(f"capacity|{d.id}|{cap_name}", "capacity",
                                    f"device {d.id}: capacity {cap_name} is {spec.value}" + (f", {already[cap_name]} already consumed" if used else ""),
                                    devices=(str(d.id),)))
            p.capacities.append(CapacityLimit(key, str(d.id), integer_value(spec.value) - used, tuple(demand)))
