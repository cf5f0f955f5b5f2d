"""A PodGroup's placement problem, prepared: domains, node and pod classes, per-node answers.

API:
- ``GroupProblem(request, *, solve, clock=time.monotonic)``: built once per call.
  - ``domains``: label value -> node names (sorted); without a topology key one domain ``""``
    holding every node; nodes without the label are left out, as upstream does;
  - ``nodes`` (``NodeInfo``: domain, room, whole units and those in use before, class) and
    ``pods`` (``PodInfo``: candidate nodes, class);
  - ``node_classes`` / ``pod_classes``: identical nodes (same domain, device shape, devices in
    use and in flight, room, and the same pods' filters accept them) and identical pods (same
    claim specs with names ignored, requests, shared claims, candidate nodes), each in name
    order;
  - ``fits(pod, node)``: the pod alone on the node (room, then its claims: one solve per pod
    class and node class, cached); ``solve_on(node, claims, extra)``: one solve on a node
    (the caller's allocator, deadline applied); ``reachable(node)``: devices the node reaches;
  - ``open_shared`` (shared claims still to allocate, with their index in the request) and
    ``fixed_shared`` (already allocated: pods using them only go to nodes their allocation
    selects).
- ``SolveFn``: ``AllocationRequest -> AllocationOutcome`` (``model.allocate``, injected by the
  front door so deferred errors are settled as for one node).

Why one preparation for both paths: the aggregated master and the joint model must see the
same nodes, classes, rooms and per-node verdicts, so that they (and the brute force in tests)
optimise the same objective over the same candidates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.cluster import AllocatedState, DeviceID, Inventory
from dra_solver.model.cpsat.problem import Problem, prepare_problem
from dra_solver.model.errors import AllocationError, NodeLocalError, SolveTimeout
from dra_solver.model.group_request import GroupPod, GroupRequest, NodeRoom
from dra_solver.model.node_index import PoolKey, state_key
from dra_solver.model.node_load import NodeUnits, Slot
from dra_solver.model.pools import NodeSelectorError, gather_pools, node_selector_matches
from dra_solver.model.stats import SolveStats

SolveFn = Callable[[AllocationRequest], AllocationOutcome]


@dataclass(slots=True)
class NodeInfo:
    name: str
    node: o.Node
    domain: str
    room: NodeRoom
    units: NodeUnits
    touched: frozenset[Slot]
    """Whole units with something in use before (allocated or in flight)."""
    cls: int = -1

    @property
    def idle_units(self) -> int:
        return int(self.units.total) - len(self.touched)

    @property
    def untouched(self) -> bool:
        """Nothing in use on it: opening it costs a whole idle node."""
        return not self.touched


@dataclass(slots=True)
class PodInfo:
    index: int
    pod: GroupPod
    nodes: frozenset[str]
    cls: int = -1

    @property
    def name(self) -> str:
        return self.pod.name


@dataclass(frozen=True, slots=True)
class Verdict:
    fits: bool
    reason: str = ""


def room_fits(pod: GroupPod, room: NodeRoom, count: int = 1) -> bool:
    """``count`` pods like ``pod`` fit ``room`` (CPU, memory, pod slots)."""
    if room.pods is not None and room.pods < count:
        return False
    if room.cpu_millis is not None and pod.cpu_millis * count > room.cpu_millis:
        return False
    return not (room.memory_bytes is not None and pod.memory_bytes * count > room.memory_bytes)


class GroupProblem:
    def __init__(
        self, request: GroupRequest, *, solve: SolveFn, cel: CelEnvironment, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.request = request
        self.cel = cel
        self.index = request.index
        self._solve = solve
        self.clock = clock
        self.start = clock()
        self.solves = 0
        index = request.index
        self.shared_by_ref = {c.ref: c for c in request.shared_claims}
        self.open_shared: list[tuple[int, o.ResourceClaim]] = [
            (i, c) for i, c in enumerate(request.shared_claims) if not c.allocated
        ]
        self.fixed_shared: list[tuple[int, o.ResourceClaim]] = [
            (i, c) for i, c in enumerate(request.shared_claims) if c.allocated
        ]
        # --- nodes and domains ------------------------------------------------------------
        names = sorted(set(index.node_names) | set(index.nodes_by_name))
        key = request.topology_key
        self._flight = self._split_in_flight(request.in_flight)
        self.domains: dict[str, list[str]] = {}
        self.nodes: dict[str, NodeInfo] = {}
        for name in names:
            node = index.nodes_by_name.get(name) or index.inventory.node(name)
            labels = node.metadata.labels or {}
            if key and key not in labels:
                continue
            domain = labels.get(key, "") if key else ""
            room = request.rooms.get(name, NodeRoom())
            view = index.view(name)
            local = [s for p in view.pools for s in index.slices_by_pool[p] if s.spec.node_name == name] if view else []
            units = NodeUnits.of(local)
            touched = units.touched(index.in_use(name).merge(self._flight.get(name, AllocatedState())))
            self.nodes[name] = NodeInfo(name, node, domain, room, units, touched)
            self.domains.setdefault(domain, []).append(name)
        self.max_node_units = max((int(n.units.total) for n in self.nodes.values()), default=0)
        # --- pods -------------------------------------------------------------------------
        allowed_by_fixed: dict[str, frozenset[str]] = {}
        for _, claim in self.fixed_shared:
            allowed_by_fixed[claim.ref] = self._selected_nodes(claim)
        self._fixed_allowed = allowed_by_fixed
        self.pods: list[PodInfo] = []
        for i, pod in enumerate(request.pods):
            nodes = set(self.nodes) if pod.nodes is None else set(pod.nodes) & set(self.nodes)
            for ref in pod.shared:
                if ref in allowed_by_fixed:
                    nodes &= allowed_by_fixed[ref]
            self.pods.append(PodInfo(i, pod, frozenset(nodes)))
        # --- classes ----------------------------------------------------------------------
        candidate_sets = sorted({p.nodes for p in self.pods}, key=lambda s: sorted(s))
        set_index = {s: n for n, s in enumerate(candidate_sets)}
        pod_keys: dict[tuple[object, ...], list[int]] = {}
        for p in self.pods:
            specs = json.dumps([c.spec.to_api() for c in p.pod.claims], sort_keys=True)
            k = (specs, tuple(sorted(p.pod.shared)), p.pod.cpu_millis, p.pod.memory_bytes, set_index[p.nodes])
            pod_keys.setdefault(k, []).append(p.index)
        self.pod_classes: list[list[int]] = []
        for members in pod_keys.values():
            members.sort(key=lambda i: self.pods[i].name)
        for members in sorted(pod_keys.values(), key=lambda m: self.pods[m[0]].name):
            for i in members:
                self.pods[i].cls = len(self.pod_classes)
            self.pod_classes.append(members)
        self._accepted = {name: tuple(name in s for s in candidate_sets) for name in self.nodes}
        self.solve_keys: dict[str, tuple[object, ...]] = {}
        """Per node, what its answers depend on besides the pods: equal keys, equal answers
        (the domain is not part of it: racks alike share their solves)."""
        self.node_classes: list[list[str]] = []
        self._classify(local=False)
        self._verdicts: dict[tuple[int, tuple[object, ...]], Verdict] = {}
        self._reach: dict[str, frozenset[DeviceID]] = {}
        self._inventories: dict[str, Inventory] = {}
        self._simple_pools: tuple[frozenset[PoolKey], dict[tuple[str, str], frozenset[PoolKey]]] | None = None
        self._prepared: dict[object, Problem] = {}

    # --- classes ------------------------------------------------------------------------------

    def _classify(self, *, local: bool) -> None:
        """Node classes: nodes alike (``solve_keys``) in one domain. ``local``: by the nodes'
        own slices only (``NodeIndex.local_shape``), sound once the pods' claims are known to
        use node-local devices only (``localize``)."""
        index = self.index
        node_keys: dict[tuple[object, ...], list[str]] = {}
        for name, info in self.nodes.items():
            view = index.view(name)
            flight = self._flight.get(name)
            shape = index.local_shape(name) if local else (view.shape if view else b"")
            solve_key = (
                shape,
                index.inuse_key(name),
                state_key(flight, name) if flight is not None else b"",
                info.room,
                self._accepted[name],
            )
            self.solve_keys[name] = solve_key
            node_keys.setdefault((info.domain, *solve_key), []).append(name)
        self.node_classes = []
        for names_of in sorted(node_keys.values(), key=lambda m: m[0]):
            for name in names_of:
                self.nodes[name].cls = len(self.node_classes)
            self.node_classes.append(sorted(names_of))

    def localize(self) -> None:
        """Class nodes by their own slices only (the aggregated path, once exact: a pod's
        claims then see nothing of the rack-level devices that set racks' shapes apart)."""
        self._classify(local=True)
        self._verdicts.clear()

    def split_by_shared_reach(self) -> bool:
        """Without a topology key, split the one domain into the node sets that reach the same
        devices for the open shared claims, when those sets are pairwise disjoint and every
        pod uses every open shared claim: a shared device then binds all pods to the nodes of
        one set, so solving each set alone is exact (and each set may then qualify for the
        aggregated path, whose shared claims must look alike on every node of a domain).
        Returns whether it split; the sets are named by their first node."""
        claims = [c for _, c in self.open_shared]
        if self.request.topology_key or not claims or len(self.domains) != 1:
            return False
        refs = {c.ref for c in claims}
        if any(not refs <= set(p.pod.shared) for p in self.pods):
            return False
        if any(not (c.spec.devices and c.spec.devices.requests) for c in claims):
            return False  # a shared claim may allocate nothing: it binds no pod anywhere
        by_shape: dict[bytes, frozenset[DeviceID]] = {}
        for rep in self.shapes():
            view = self.index.view(rep)
            by_shape[view.shape if view else b""] = frozenset(self.candidates(rep, claims, key=("shared", rep)))
        sets: dict[frozenset[DeviceID], list[str]] = {}
        for name in self.nodes:
            view = self.index.view(name)
            sets.setdefault(by_shape[view.shape if view else b""], []).append(name)
        if len(sets) < 2:
            return False
        seen: set[DeviceID] = set()
        for ids in sets:
            if seen & ids:
                return False  # overlapping reach: a device may serve nodes of two sets
            seen |= ids
        self.domains = {}
        for members in sorted(sets.values(), key=lambda m: sorted(m)[0]):
            members.sort()
            for name in members:
                self.nodes[name].domain = members[0]
            self.domains[members[0]] = members
        self._classify(local=False)
        self._verdicts.clear()
        return True

    def shapes(self) -> list[str]:
        """One node per distinct (domain, device shape): enough to learn which devices claims
        may use anywhere (in-use state only removes candidates)."""
        seen: set[tuple[str, bytes]] = set()
        out: list[str] = []
        for name, info in sorted(self.nodes.items()):
            view = self.index.view(name)
            k = (info.domain, view.shape if view else b"")
            if k not in seen:
                seen.add(k)
                out.append(name)
        return out

    # --- helpers ----------------------------------------------------------------------------

    def _split_in_flight(self, state: AllocatedState) -> dict[str, AllocatedState]:
        """In-flight devices per node whose pools they are in ("" = shared pools)."""
        if not (state.devices or state.shared or state.capacity):
            return {}
        pool_node = self.index.pool_node
        out: dict[str, AllocatedState] = {}
        by_node: dict[str, set[PoolKey]] = {}
        for d in [*state.devices, *(d for d, _ in state.shared), *state.capacity]:
            by_node.setdefault(pool_node.get((d.driver, d.pool), ""), set()).add((d.driver, d.pool))
        shared = state.restricted_to(frozenset(by_node.get("", set())))
        for node, pools in by_node.items():
            if node:
                out[node] = state.restricted_to(frozenset(pools)).merge(shared)
        if shared.devices or shared.shared or shared.capacity:
            for name in self.index.node_names:
                out.setdefault(name, shared)
        return out

    def _selected_nodes(self, claim: o.ResourceClaim) -> frozenset[str]:
        """Nodes an allocated claim's node selector admits (every node without one)."""
        allocation = claim.status.allocation if claim.status else None
        selector = allocation.node_selector if allocation else None
        if selector is None:
            return frozenset(self.nodes)
        out = set()
        for name, info in self.nodes.items():
            try:
                if node_selector_matches(selector, info.node):
                    out.add(name)
            except NodeSelectorError as err:
                raise AllocationError(f"claim {claim.ref}: allocation node selector: {err}") from err
        return frozenset(out)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def time_left(self) -> float | None:
        limit = self.request.time_limit
        if limit is None:
            return None
        left = limit - self.elapsed()
        if left <= 0:
            raise SolveTimeout(f"podgroup {self.request.name}: the time limit of {limit}s passed")
        return left

    def inventory(self, node: str) -> Inventory:
        """The node's inventory, less the shared pools that provably cannot reach it."""
        inv = self._inventories.get(node)
        if inv is None:
            inv = self.index.node_inventory(node, self._flight.get(node))
            far = self._unreachable_pools(node)
            if far:
                inv = Inventory(inv.classes, tuple(sl for sl in inv.slices if (sl.spec.driver, sl.spec.pool.name) not in far),
                                inv.taint_rules, inv.nodes, inv.claims, inv.extra_allocated)
            self._inventories[node] = inv
        return inv

    def _unreachable_pools(self, node: str) -> frozenset[tuple[str, str]]:
        """Shared pools whose every slice selects nodes by one ``key In (values)`` that this
        node's label misses: none of their devices can be used here, so the per-node solves
        need not read them (a rack-level slice per rack would otherwise make every solve read
        every rack's slices)."""
        if self._simple_pools is None:
            by_pool: dict[tuple[str, str], set[tuple[str, frozenset[str]]] | None] = {}
            for sl in self.index.shared_slices:
                pool = (sl.spec.driver, sl.spec.pool.name)
                rule = _simple_in(sl.spec.node_selector) if not sl.spec.all_nodes else None
                if rule is None or (pool in by_pool and by_pool[pool] is None):
                    by_pool[pool] = None
                else:
                    by_pool.setdefault(pool, set()).add(rule)  # type: ignore[union-attr]
            simple: set[tuple[str, str]] = set()
            reach: dict[tuple[str, str], set[tuple[str, str]]] = {}
            for pool, rules in by_pool.items():
                if rules is None:
                    continue
                simple.add(pool)
                for key, values in rules:
                    for value in values:
                        reach.setdefault((key, value), set()).add(pool)
            self._simple_pools = (frozenset(simple), {k: frozenset(v) for k, v in reach.items()})
        simple_pools, reach_by_label = self._simple_pools
        labels = self.nodes[node].node.metadata.labels or {}
        near: set[tuple[str, str]] = set()
        for item in labels.items():
            near |= reach_by_label.get(item, frozenset())
        return simple_pools - near

    def node_request(self, node: str, claims: Sequence[o.ResourceClaim], extra: AllocatedState | None = None) -> AllocationRequest:
        inv = self.inventory(node)
        if extra is not None and (extra.devices or extra.shared or extra.capacity):
            inv = Inventory(inv.classes, inv.slices, inv.taint_rules, inv.nodes, inv.claims, inv.extra_allocated.merge(extra))
        req = self.request
        return AllocationRequest(
            claims=tuple(claims),
            node=self.nodes[node].node,
            inventory=inv,
            gates=req.gates,
            time_limit=self.time_left(),
            policy=req.policy,
            device_cache=req.device_cache,
        )

    def solve_on(self, node: str, claims: Sequence[o.ResourceClaim], extra: AllocatedState | None = None) -> AllocationOutcome:
        """Allocate ``claims`` on ``node`` (``extra``: more devices in use); a node-local error
        is "does not fit"; any other error names the node."""
        if not claims:
            return AllocationOutcome(True, (), 0, _EMPTY_STATS)
        request = self.node_request(node, claims, extra)
        self.solves += 1
        try:
            return self._solve(request)
        except NodeLocalError as err:
            return AllocationOutcome(False, (), 0, _EMPTY_STATS, str(err))
        except AllocationError as err:
            if isinstance(err, NodeLocalError):
                raise
            raise AllocationError(f"node {node}: {err}") from err

    def fits(self, pod: PodInfo, node: str) -> Verdict:
        """The pod alone on the node: its filter, the room, then its claims."""
        info = self.nodes[node]
        if node not in pod.nodes:
            for ref in pod.pod.shared:
                allowed = self._fixed_allowed.get(ref)
                if allowed is not None and node not in allowed:
                    return Verdict(False, f"shared claim {ref} is already allocated on devices the node cannot reach")
            return Verdict(False, "node not a candidate (the pod's node filter)")
        if not room_fits(pod.pod, info.room):
            return Verdict(False, "not enough room (cpu, memory or pods)")
        key = (pod.cls, self.solve_keys[node])
        known = self._verdicts.get(key)
        if known is None:
            outcome = self.solve_on(self.node_classes[info.cls][0], pod.pod.claims)
            known = self._verdicts[key] = Verdict(outcome.allocated, outcome.reason)
        return known

    def prepare(self, node: str, claims: Sequence[o.ResourceClaim], *, key: object = None) -> Problem:
        """The prepared per-node problem of ``claims`` on ``node`` (cached under ``key``)."""
        if key is not None:
            known = self._prepared.get(key)
            if known is not None:
                return known
        try:
            prepared = prepare_problem(self.node_request(node, claims), cel=self.cel)
        except AllocationError as err:
            raise AllocationError(f"node {node}: {err}") from err
        if key is not None:
            self._prepared[key] = prepared
        return prepared

    def candidates(self, node: str, claims: Sequence[o.ResourceClaim], *, key: object = None) -> list[DeviceID]:
        """Every device some request of ``claims`` may use on ``node``."""
        prepared = self.prepare(node, claims, key=key)
        return sorted({c.id for opt in prepared.all_options() for c in opt.candidates})

    def reachable(self, node: str) -> frozenset[DeviceID]:
        """Devices ``node`` may use (of pools that target it), whatever claims ask."""
        known = self._reach.get(node)
        if known is None:
            inv = self.inventory(node)
            pools = gather_pools(inv.slices, self.nodes[node].node, gates=self.request.gates, taint_rules=inv.taint_rules)
            known = self._reach[node] = frozenset(
                d.id for pool in pools if pool.usable for d in pool.devices if d.node_match
            )
        return known

    def units_in_use_after(self, node: str, results: Iterable[o.AllocationResult]) -> int:
        """Whole units of ``node`` newly touched by ``results``."""
        info = self.nodes[node]
        state = AllocatedState.from_claims(
            o.ResourceClaim(status=o.ResourceClaimStatus(allocation=r)) for r in results
        )
        touched = info.units.touched(state)
        return len(touched - info.touched)

    def pods_using(self, ref: str) -> list[PodInfo]:
        return [p for p in self.pods if ref in p.pod.shared]

    def domain_rank(self, domain: str) -> int:
        """The domain's position in name order (the last tie-break)."""
        return sorted(self.domains).index(domain)

    def domain_idle(self, domain: str) -> int:
        return sum(self.nodes[n].idle_units for n in self.domains.get(domain, ()))


def policy_levels(
    policy: str, *, keyed: bool, domain_idle: Any, opened_idle: Any, used: Any, used_idle: Any, touched: Any, domain_rank: Any = 0
) -> tuple[Any, ...]:
    """The placement levels of ``model.group_request.GroupObjective`` (each minimised), from a
    placement's figures: ``pack`` takes the domain with the fewest idle units (best fit), opens
    the fewest idle nodes, uses the fewest nodes, the fullest ones (fewest idle units on the
    nodes used), and touches the fewest whole units (GPUs stay whole); ``spread`` takes the
    emptiest domain and the most and emptiest nodes, then touches the fewest units; other
    policies have none. Among equals, the first domain by name (``domain_rank``). The figures
    are numbers (evaluating a placement) or linear expressions (building a model): one
    definition for both."""
    levels: list[Any]
    if policy in ("", "pack"):
        levels = [opened_idle, used, used_idle, touched]
        if keyed:
            levels = [domain_idle, *levels, domain_rank]
    elif policy == "spread":
        levels = [-used, -used_idle, touched]
        if keyed:
            levels = [-domain_idle, *levels, domain_rank]
    else:
        levels = []
    return tuple(levels)


def level_spans(policy: str, *, keyed: bool, domain_units: int, node_units: int, nodes: int, pods: int, domains: int) -> list[int]:
    """Bounds on ``|level|`` for ``policy_levels``' levels: ``domain_units`` the most idle
    units of a domain, ``node_units`` the most units of one node, ``nodes`` and ``pods`` how
    many may be used and placed, ``domains`` how many there are. At most one node per pod is
    used, and touched units lie on used nodes or under the shared claims."""
    used = min(nodes, pods)
    units = used * node_units + domain_units
    if policy in ("", "pack"):
        spans = [used, used, used * node_units, units]
    elif policy == "spread":
        spans = [used, used * node_units, units]
    else:
        return []
    return [domain_units, *spans, domains] if keyed else spans


_EMPTY_STATS = SolveStats(allocator="cpsat", status="TRIVIAL", wall_seconds=0.0)


def _simple_in(selector: o.NodeSelector | None) -> tuple[str, frozenset[str]] | None:
    """``(key, values)`` of a node selector that is exactly one term of one ``In`` label
    requirement, else None."""
    if selector is None or len(selector.node_selector_terms) != 1:
        return None
    term = selector.node_selector_terms[0]
    if term.match_fields or not term.match_expressions or len(term.match_expressions) != 1:
        return None
    req = term.match_expressions[0]
    if req.operator != "In" or not req.key:
        return None
    return req.key, frozenset(req.values or ())
