"""Replay a stream of claims against a cluster, once per allocator, and measure the cluster.

Claims arrive in order; each is placed on the first node (in name order) where its allocator
finds an allocation, or on the best-scoring node with ``node_choice="score"``: the best
FirstAvailable score, then the node its policy prefers (``model.node_load``: ``pack`` the
fullest node that fits, ``spread`` the emptiest; the backtracking row, like upstream's plugin,
has no node preference and takes name order among equal scores). A placed claim's
devices stay in use for the rest of the stream. Each allocator works on its own copy of the
cluster, so the difference in claims placed is the difference its choices make over time.

The smallest-first row is computed independently of CP-SAT: the backtracking allocator run on
the same cluster with every slice's devices reordered smallest first, which is what a best-fit
policy does on partitioned GPUs. It is a reference point, not a bound: a policy can place more
(``spread`` does on two bundled replays). Its JSON key stays ``bestFit`` (scripts read it),
with ``smallestFirstBacktracking`` beside it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dra_solver.model import (
    AllocatedState,
    AllocationError,
    AllocationOutcome,
    AllocationRequest,
    AllocatorName,
    CelEnvironment,
    DeviceID,
    DeviceParseCache,
    FeatureGates,
    Inventory,
    NodeUnits,
    Quantity,
    SolveTimeout,
    allocate,
    node_key,
    parse_quantity,
    warm_up,
)
from dra_solver.model import objects as o

Progress = Callable[[str, int, int], None]
Allocate = Callable[[AllocationRequest], AllocationOutcome]
"""An allocator from outside the model (upstream's Go allocator): ``model.allocate``'s contract."""


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    name: str
    allocator: AllocatorName
    policy: str = ""
    reorder_best_fit: bool = False


DEFAULT_CONFIGS = (
    ReplayConfig("backtracking", "backtracking"),
    ReplayConfig("cpsat-first-fit", "cpsat", "first-fit"),
    ReplayConfig("cpsat-pack", "cpsat", "pack"),
    ReplayConfig("cpsat-spread", "cpsat", "spread"),
)
SMALLEST_FIRST = ReplayConfig("smallest-first backtracking", "backtracking", reorder_best_fit=True)
BEST_FIT = SMALLEST_FIRST
"""The name this row had (``bestFit``), for scripts that import it."""


@dataclass(slots=True)
class ReplayResult:
    name: str
    policy: str = ""
    node_policy: str = ""
    claims: int = 0
    placed: int = 0
    first_failure: int | None = None
    seconds: list[float] = field(default_factory=list)
    placed_curve: list[int] = field(default_factory=list)
    sizes: list[str] = field(default_factory=list)
    nodes: list[str | None] = field(default_factory=list)
    free_whole_devices: int = 0
    stranded_counters: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def seconds_per_claim(self) -> float:
        return sum(self.seconds) / len(self.seconds) if self.seconds else 0.0

    def placed_by_size(self) -> dict[str, dict[str, int]]:
        """Per size class (see ``size_class``): how many such claims came, how many were placed."""
        out: dict[str, dict[str, int]] = {}
        for size, node in zip(self.sizes, self.nodes, strict=False):
            row = out.setdefault(size, {"claims": 0, "placed": 0})
            row["claims"] += 1
            row["placed"] += node is not None
        return {k: out[k] for k in sorted(out, key=_natural)}

    def to_json(self) -> dict[str, Any]:
        return {
            "claims": self.claims,
            "placed": self.placed,
            "policy": self.policy,
            "nodePolicy": self.node_policy,
            "firstFailure": self.first_failure,
            "secondsPerClaim": self.seconds_per_claim,
            "freeWholeDevices": self.free_whole_devices,
            "strandedCounters": self.stranded_counters,
            "placedBySize": self.placed_by_size(),
            "placedCurve": self.placed_curve,
            "errors": self.errors[:10],
        }


def replay(
    cluster: Sequence[o.TypedObject],
    workload: Sequence[o.ResourceClaim],
    config: ReplayConfig,
    *,
    cel: CelEnvironment,
    gates: FeatureGates | None = None,
    node_choice: str = "first",
    time_limit: float = 10.0,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
    validate: bool = True,
    allocate_with: Allocate | None = None,
) -> ReplayResult:
    """Replay ``workload`` with ``config``'s allocator, or with ``allocate_with`` when given
    (upstream's Go allocator: its row takes nodes like the backtracking row, and each request
    carries only the node's own slices)."""
    warm_up()  # imports and one-time set-up are not any claim's latency
    inventory = Inventory.from_objects(cluster)
    if config.reorder_best_fit:
        inventory = _best_fit_order(inventory)
    nodes = inventory.node_names()
    units = {n: NodeUnits.of(s for s in inventory.slices if s.spec.node_name == n) for n in nodes}
    parsed = DeviceParseCache()  # the same slices for every claim of the stream
    allocated: list[o.ResourceClaim] = [c for c in inventory.claims if c.allocated]
    result = ReplayResult(
        config.name,
        policy=config.policy,
        node_policy=(_node_policy(config) or "name-order") if node_choice == "score" else "first-in-name-order",
        claims=len(workload),
    )
    for index, claim in enumerate(workload):
        claim = _unique(claim, index)
        result.sizes.append(size_class(claim))
        current = Inventory(
            classes=inventory.classes,
            slices=inventory.slices,
            taint_rules=inventory.taint_rules,
            nodes=inventory.nodes,
            claims=tuple(allocated),
            extra_allocated=inventory.extra_allocated,
        )
        start = clock()
        placed = _place(claim, current, units, config, cel=cel, gates=gates or FeatureGates(), parsed=parsed,
                        node_choice=node_choice, time_limit=time_limit, errors=result.errors, validate=validate,
                        allocate_with=allocate_with)
        result.seconds.append(clock() - start)
        if placed is None:
            if result.first_failure is None:
                result.first_failure = index
            result.nodes.append(None)
        else:
            node_name, allocation = placed
            done = claim.model_copy(deep=True)
            done.status = o.ResourceClaimStatus(allocation=allocation)
            allocated.append(done)
            result.placed += 1
            result.nodes.append(node_name)
        result.placed_curve.append(result.placed)
        if progress is not None:
            progress(config.name, index + 1, len(workload))
    final = Inventory(inventory.classes, inventory.slices, inventory.taint_rules, inventory.nodes, tuple(allocated))
    result.free_whole_devices, result.stranded_counters = measure_free(final)
    return result


def _place(
    claim: o.ResourceClaim,
    inventory: Inventory,
    units: Mapping[str, NodeUnits],
    config: ReplayConfig,
    *,
    cel: CelEnvironment,
    gates: FeatureGates,
    parsed: DeviceParseCache,
    node_choice: str,
    time_limit: float,
    errors: list[str],
    validate: bool = True,
    allocate_with: Allocate | None = None,
) -> tuple[str, o.AllocationResult] | None:
    """The first node in name order where the claim fits, or with ``node_choice="score"`` the
    one with the best FirstAvailable score, then the most preferred by the row's policy."""
    best: tuple[tuple[Any, ...], str, o.AllocationResult] | None = None
    in_use: AllocatedState | None = None
    for node_name in units:
        request = AllocationRequest(
            claims=(claim,),
            node=inventory.node(node_name),
            inventory=inventory,
            gates=gates,
            allocator=config.allocator,
            time_limit=time_limit,
            policy=config.policy,
            device_cache=parsed,
        )
        try:
            if allocate_with is not None:
                outcome = allocate_with(replace(request, inventory=_node_only(inventory, node_name)))
            else:
                outcome = allocate(request, cel=cel, validate=validate)
        except (AllocationError, SolveTimeout) as err:
            errors.append(f"{claim.ref} on {node_name}: {err}")
            continue
        if not outcome.allocated:
            continue
        if node_choice != "score":
            return node_name, outcome.results[0]
        if in_use is None:
            in_use = inventory.allocated_state()
        key = (-outcome.score, *node_key(_node_policy(config), units[node_name].free(in_use), node_name))
        if best is None or key < best[0]:
            best = (key, node_name, outcome.results[0])
    return (best[1], best[2]) if best else None


def _node_only(inventory: Inventory, node: str) -> Inventory:
    """The pools an allocation on ``node`` can use (with a slice on it or not tied to one node),
    every slice of each so that pools stay complete: what goes over the wire to an outside
    allocator need not hold the whole cluster."""
    pools = {(s.spec.driver, s.spec.pool.name) for s in inventory.slices
             if s.spec.node_name == node or not s.spec.node_name}
    return replace(inventory, slices=tuple(s for s in inventory.slices if (s.spec.driver, s.spec.pool.name) in pools))


def _node_policy(config: ReplayConfig) -> str:
    return config.policy if config.allocator == "cpsat" else ""


SIZE_LABEL = "replay.dra-solver.io/size"
"""Workload claims may name their size class with this label (``80Gi``, ``8gpu``); otherwise
the class is the number of devices the claim asks for."""


def size_class(claim: o.ResourceClaim) -> str:
    label = (claim.metadata.labels or {}).get(SIZE_LABEL)
    if label:
        return label
    total = 0
    for request in claim.spec.devices.requests or []:
        wanted = request.exactly or (request.first_available[0] if request.first_available else None)
        if wanted is not None and (wanted.allocation_mode or "ExactCount") == "ExactCount":
            total += wanted.count or 1
    return f"{total}dev"


def _natural(text: str) -> tuple[int, str]:
    digits = re.match(r"\d+", text)
    return (int(digits.group()) if digits else 1 << 62, text)


def _unique(claim: o.ResourceClaim, index: int) -> o.ResourceClaim:
    """Workload files may repeat one claim many times; give each arrival its own identity."""
    copy = claim.model_copy(deep=True)
    base = claim.metadata.name or claim.metadata.generate_name or "claim"
    copy.metadata.name = f"{base}-{index}"
    copy.metadata.uid = copy.metadata.uid or f"replay-{index}"
    copy.status = None
    return copy


# --- measuring what is left -----------------------------------------------------------------


def _device_size(device: o.Device, totals: dict[str, dict[str, Quantity]]) -> tuple[float, float]:
    share = 0.0
    for consumption in device.consumes_counters or []:
        total = totals.get(consumption.counter_set, {})
        for name, counter in consumption.counters.items():
            whole = total.get(name)
            if whole is not None and whole.as_approximate_float() > 0:
                share += parse_quantity(counter.value).as_approximate_float() / whole.as_approximate_float()
    capacity = sum(parse_quantity(c.value).as_approximate_float() for c in (device.capacity or {}).values())
    return share, capacity


def _counter_totals(inventory: Inventory) -> dict[tuple[str, str], dict[str, dict[str, Quantity]]]:
    totals: dict[tuple[str, str], dict[str, dict[str, Quantity]]] = {}
    for s in inventory.slices:
        for cs in s.spec.shared_counters or []:
            pool = totals.setdefault((s.spec.driver, s.spec.pool.name), {})
            pool[cs.name] = {n: parse_quantity(c.value) for n, c in cs.counters.items()}
    return totals


def _best_fit_order(inventory: Inventory) -> Inventory:
    totals = _counter_totals(inventory)
    slices: list[o.ResourceSlice] = []
    for s in inventory.slices:
        pool_totals = totals.get((s.spec.driver, s.spec.pool.name), {})
        devices = s.spec.devices or []
        ordered = sorted(devices, key=lambda d: _device_size(d, pool_totals))
        copy = s.model_copy(deep=True)
        copy.spec.devices = [d.model_copy(deep=True) for d in ordered] if s.spec.devices is not None else None
        slices.append(copy)
    return Inventory(inventory.classes, tuple(slices), inventory.taint_rules, inventory.nodes, inventory.claims,
                     inventory.extra_allocated)


def measure_free(inventory: Inventory) -> tuple[int, dict[str, str]]:
    """Whole devices still free, and counter capacity no free device can use (stranded).

    A whole device is one that consumes all of every counter it draws on (or none at all).
    """
    state = inventory.allocated_state()
    used: set[DeviceID] = set(state.devices) | {d for d, _ in state.shared}
    totals = _counter_totals(inventory)
    remaining: dict[tuple[str, str, str], dict[str, Quantity]] = {}
    for (driver, pool), sets in totals.items():
        for set_name, counters in sets.items():
            remaining[(driver, pool, set_name)] = dict(counters)
    devices: list[tuple[DeviceID, o.Device]] = []
    for s in inventory.slices:
        for d in s.spec.devices or []:
            devices.append((DeviceID(s.spec.driver, s.spec.pool.name, d.name), d))
    for dev_id, d in devices:
        if dev_id not in used:
            continue
        for consumption in d.consumes_counters or []:
            left = remaining.get((dev_id.driver, dev_id.pool, consumption.counter_set))
            if left is None:
                continue
            for name, counter in consumption.counters.items():
                if name in left:
                    left[name] = left[name].sub(parse_quantity(counter.value))

    def fits(dev_id: DeviceID, d: o.Device) -> bool:
        for consumption in d.consumes_counters or []:
            left = remaining.get((dev_id.driver, dev_id.pool, consumption.counter_set), {})
            for name, counter in consumption.counters.items():
                if name not in left or parse_quantity(counter.value) > left[name]:
                    return False
        return True

    free_whole = 0
    usable_sets: set[tuple[str, str, str]] = set()
    for dev_id, d in devices:
        if dev_id in used or not fits(dev_id, d):
            continue
        for consumption in d.consumes_counters or []:
            usable_sets.add((dev_id.driver, dev_id.pool, consumption.counter_set))
        whole = all(
            parse_quantity(counter.value) == totals.get((dev_id.driver, dev_id.pool), {})
            .get(consumption.counter_set, {})
            .get(name)
            for consumption in d.consumes_counters or []
            for name, counter in consumption.counters.items()
        )
        if whole:
            free_whole += 1
    stranded: dict[str, Quantity] = {}
    for key, left in sorted(remaining.items()):
        if key in usable_sets:
            continue
        for name, amount in left.items():
            if amount.sign() > 0:
                stranded[name] = stranded[name].add(amount) if name in stranded else amount
    return free_whole, {k: str(v) for k, v in sorted(stranded.items())}
