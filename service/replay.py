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
    ALL,
    AllocatedState,
    AllocationError,
    AllocationOutcome,
    AllocationRequest,
    AllocatorName,
    AttributeReads,
    CelEnvironment,
    DeviceID,
    DeviceParseCache,
    FeatureGates,
    Inventory,
    NodeShape,
    NodeUnits,
    Quantity,
    SolveTimeout,
    allocate,
    claim_reads,
    default_selector_check,
    node_key,
    parse_quantity,
    state_signature,
    validate_objects,
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
    check = default_selector_check() if validate else None
    if check is not None:
        # Once, outside any claim's time: the cluster does not change during the replay.
        validate_objects([*inventory.classes, *inventory.slices, *inventory.taint_rules, *inventory.nodes], selector_check=check)
    cluster_state = _ClusterState.of(inventory, allocated)
    result = ReplayResult(
        config.name,
        policy=config.policy,
        node_policy=(_node_policy(config) or "name-order") if node_choice == "score" else "first-in-name-order",
        claims=len(workload),
    )
    for index, claim in enumerate(workload):
        claim = _unique(claim, index)
        result.sizes.append(size_class(claim))
        start = clock()
        if check is not None:
            validate_objects([claim], selector_check=check)
        placed = _place(claim, inventory, cluster_state, units, config, cel=cel, gates=gates or FeatureGates(),
                        parsed=parsed, node_choice=node_choice, time_limit=time_limit, errors=result.errors,
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
            cluster_state.place(node_name, done)
            result.placed += 1
            result.nodes.append(node_name)
        result.placed_curve.append(result.placed)
        if progress is not None:
            progress(config.name, index + 1, len(workload))
    final = Inventory(inventory.classes, inventory.slices, inventory.taint_rules, inventory.nodes, tuple(allocated))
    result.free_whole_devices, result.stranded_counters = measure_free(final)
    return result


def _pools_of(claim: o.ResourceClaim) -> set[tuple[str, str]]:
    allocation = claim.status.allocation if claim.status else None
    results = allocation.devices.results if allocation and allocation.devices else None
    return {(r.driver, r.pool) for r in results or ()}


@dataclass(slots=True)
class _ClusterState:
    """What attempts read, kept per node as claims are placed: each node's reduced slices (its
    pools and pools of no single node), the devices in use, and, where nodes can be compared
    (every pool on one node, nothing selecting nodes or devices by name), each node's state up
    to names (``model.node_state``): nodes in equal states answer a claim alike, so a claim
    that does not fit one of them is not tried on the others."""

    slices: dict[str, tuple[o.ResourceSlice, ...]]
    in_use: AllocatedState
    shapes: dict[str, NodeShape] | None
    node_use: dict[str, AllocatedState] = field(default_factory=dict)
    signatures: dict[str, bytes] = field(default_factory=dict)
    claims_by_pool: dict[tuple[str, str], list[o.ResourceClaim]] = field(default_factory=dict)
    """Allocated claims by the pools of their devices, in the order they were allocated."""

    @staticmethod
    def of(inventory: Inventory, allocated: Sequence[o.ResourceClaim]) -> _ClusterState:
        local: dict[str, list[o.ResourceSlice]] = {}
        pool_nodes: dict[tuple[str, str], set[str]] = {}
        shared_pools: set[tuple[str, str]] = set()
        selects_nodes = False
        for s in inventory.slices:
            pool = (s.spec.driver, s.spec.pool.name)
            if s.spec.node_name:
                local.setdefault(s.spec.node_name, []).append(s)
                pool_nodes.setdefault(pool, set()).add(s.spec.node_name)
            else:
                shared_pools.add(pool)
            selects_nodes = selects_nodes or s.spec.node_selector is not None or any(
                d.node_name or d.node_selector is not None for d in s.spec.devices or []
            )
        by_pool: dict[tuple[str, str], list[o.ResourceSlice]] = {}
        for s in inventory.slices:
            by_pool.setdefault((s.spec.driver, s.spec.pool.name), []).append(s)
        slices: dict[str, tuple[o.ResourceSlice, ...]] = {}
        for name in inventory.node_names():
            pools = sorted({(s.spec.driver, s.spec.pool.name) for s in local.get(name, ())} | shared_pools)
            slices[name] = tuple(s for pool in pools for s in by_pool[pool])
        comparable = not (shared_pools or selects_nodes or inventory.taint_rules or any(len(n) > 1 for n in pool_nodes.values()))
        state = _ClusterState(slices, AllocatedState.from_claims(allocated).merge(inventory.extra_allocated), None)
        for claim in allocated:
            state.index_claim(claim)
        if comparable:
            state.shapes = {name: NodeShape.of(local.get(name, ())) for name in slices}
            owner = {pool: next(iter(ns)) for pool, ns in pool_nodes.items()}
            for claim in allocated:
                results = claim.status.allocation.devices.results or [] if claim.status and claim.status.allocation and claim.status.allocation.devices else []
                for node in {owner.get((r.driver, r.pool), "") for r in results} - {""}:
                    state.node_use[node] = state.node_use.get(node, AllocatedState()).merge(AllocatedState.from_claims([claim]))
        return state

    def index_claim(self, claim: o.ResourceClaim) -> None:
        for pool in sorted(_pools_of(claim)):
            self.claims_by_pool.setdefault(pool, []).append(claim)

    def claims_in(self, slices: Sequence[o.ResourceSlice]) -> tuple[o.ResourceClaim, ...]:
        """The allocated claims with devices in the pools of ``slices``, each once (what the
        devices in use there are gathered from; the order does not matter to an allocator)."""
        seen: dict[int, o.ResourceClaim] = {}
        for pool in sorted({(s.spec.driver, s.spec.pool.name) for s in slices}):
            for claim in self.claims_by_pool.get(pool, ()):
                seen.setdefault(id(claim), claim)
        return tuple(seen.values())

    def place(self, node: str, claim: o.ResourceClaim) -> None:
        self.index_claim(claim)
        used = AllocatedState.from_claims([claim])
        self.in_use = self.in_use.merge(used)
        if self.shapes is not None:
            self.node_use[node] = self.node_use.get(node, AllocatedState()).merge(used)
            self.signatures.pop(node, None)

    def key(self, node: str, reads: AttributeReads) -> tuple[bytes, bytes] | None:
        """``node``'s state up to names for claims reading ``reads`` (None: not comparable)."""
        if self.shapes is None:
            return None
        shape = self.shapes[node]
        sig = self.signatures.get(node)
        if sig is None:
            use = self.node_use.get(node)
            sig = self.signatures[node] = b"" if use is None else state_signature(use, shape.positions())
        return shape.under(reads), sig


def _place(
    claim: o.ResourceClaim,
    inventory: Inventory,
    state: _ClusterState,
    units: Mapping[str, NodeUnits],
    config: ReplayConfig,
    *,
    cel: CelEnvironment,
    gates: FeatureGates,
    parsed: DeviceParseCache,
    node_choice: str,
    time_limit: float,
    errors: list[str],
    allocate_with: Allocate | None = None,
) -> tuple[str, o.AllocationResult] | None:
    """The first node in name order where the claim fits, or with ``node_choice="score"`` the
    one with the best FirstAvailable score, then the most preferred by the row's policy.
    Nodes in a state already tried for this claim share its verdict (and, for the score, its
    score); the chosen node's allocation is always solved on that node."""
    reads = claim_reads((claim,), inventory.classes, compile=cel.compile) if state.shapes is not None else ALL

    def attempt(node_name: str) -> AllocationOutcome | None:
        request = AllocationRequest(
            claims=(claim,),
            node=inventory.node(node_name),
            inventory=Inventory(inventory.classes, state.slices[node_name], inventory.taint_rules, inventory.nodes,
                                extra_allocated=state.in_use),
            gates=gates,
            allocator=config.allocator,
            time_limit=time_limit,
            policy=config.policy,
            device_cache=parsed,
        )
        try:
            if allocate_with is not None:
                # The Go side gathers in-use devices from allocated claims, as the scheduler does:
                # those with devices in the pools this request carries (the others cannot change
                # its answer, and sending every claim made each request grow with the replay).
                whole = replace(request.inventory, claims=state.claims_in(state.slices[node_name]), extra_allocated=inventory.extra_allocated)
                return allocate_with(replace(request, inventory=whole))
            return allocate(request, cel=cel, validate=False)  # validated once, up front
        except (AllocationError, SolveTimeout) as err:
            errors.append(f"{claim.ref} on {node_name}: {err}")
            return None

    known: dict[tuple[bytes, bytes], int] = {}
    """Node state -> the FirstAvailable score of claims there (-1: does not fit)."""
    solved: dict[str, o.AllocationResult] = {}
    best: tuple[tuple[Any, ...], str] | None = None
    for node_name in units:
        key = state.key(node_name, reads)
        score = known.get(key) if key is not None else None
        if score is None:
            outcome = attempt(node_name)
            if outcome is None:
                continue  # an error on this node: not a verdict for its state
            score = outcome.score if outcome.allocated else -1
            if key is not None:
                known[key] = score
            if outcome.allocated:
                solved[node_name] = outcome.results[0]
        if score < 0:
            continue
        if node_choice != "score":
            return node_name, solved[node_name]  # the first of its state in name order: solved here
        rank = (-score, *node_key(_node_policy(config), units[node_name].free(state.in_use), node_name))
        if best is None or rank < best[0]:
            best = (rank, node_name)
    if best is None:
        return None
    chosen = best[1]
    if chosen not in solved:
        outcome = attempt(chosen)
        if outcome is None or not outcome.allocated:
            errors.append(f"{claim.ref} on {chosen}: a node in the same state fit, this one did not")
            return None
        return chosen, outcome.results[0]
    return chosen, solved[chosen]


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
