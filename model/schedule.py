"""Node choice: where do a pod's claims fit best, answered over many nodes with few solves.

API:
- ``choose_node(claims, candidates, *, index, options, attempt, in_flight, cache=None,
  expired=None, memo=None, generation=0) -> NodeChoice``: visits nodes, solves as few as it
  can, and picks one. ``attempt(node)`` solves the claims on one node (the caller builds the
  request: deadline, devices in flight) and returns a ``NodeAttempt``, or None when the
  deadline passed before it could solve; ``in_flight`` (``InFlight``) tells which devices
  allocations in flight hold; ``cache`` (``VerdictCache``) keeps verdicts across calls by
  content; ``expired()`` says the caller's deadline has passed (None: no deadline); ``memo``
  and ``generation`` let the visit order reuse work across calls (see ``visit_order``);
  ``answers`` (``AnswerCache`` of ``KnownAnswer``) and ``reuse`` let the chosen node take an
  allocation found earlier on a node in the same state, rewritten with its names
  (``answer_on``), instead of a solve.
- ``NodeChoice``: the chosen node ("" when none) with the ``NodeAttempt`` that allocated
  there, every node's ``NodeVerdict`` (feasible with its score, unschedulable with a reason,
  not evaluated), ``ScheduleStats`` and, when no node fits, the scheduler-style summary.
- ``visit_order(index, names, policy, *, explicit, in_flight, memo, generation)``: nodes from
  most to least preferred by the policy (``model.node_load``).
- ``claims_key(claims, *, allocator, policy, gates, spec_text=None) -> bytes``, ``min_devices(claims)``,
  ``invalid_pools_error(index, node)``, ``summary(verdicts, total, *, not_evaluated)``.

How few solves: nodes are visited in the policy's preference order (name order without one);
a node with too few free devices is pruned without a solve (and says how many it has); nodes
whose devices and in-use state are identical up to the node's own name share one solve (and
verdicts are cached across calls by content, never by generation); the visit stops once enough
is known: a node with the best possible FirstAvailable score, or the requested number of
feasible nodes. The chosen node is the best score, ties broken by visit order; its allocation
is reused from its solve, or rewritten from a known answer for its state (``answers``), or
solved now when its verdict came from a shared solve or the cache and no answer is known.

Contract: raises ``AllocationError`` (prefixed "node N: ") when a node's attempt stops on an
error that is not node-local; a ``NodeLocalError`` is that node's verdict. Raises
``SolveTimeout`` when the deadline passes before any node was evaluated, or before the chosen
node's allocation was computed.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal, Protocol

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest, AllocatorName
from dra_solver.model.cel import ALL, AttributeReads
from dra_solver.model.cluster import AllocatedState, DeviceID
from dra_solver.model.errors import AllocationError, NodeLocalError, SolveTimeout
from dra_solver.model.features import FeatureGates
from dra_solver.model.flight_order import FlightNodes, FlightOrder
from dra_solver.model.node_index import NodeIndex, PoolKey
from dra_solver.model.node_state import device_mapping, remap_results
from dra_solver.model.policy import DEFAULT_POLICY, NODE_POLICIES
from dra_solver.model.score import best_possible_score
from dra_solver.model.stats import SolveStats

_NOTHING: frozenset[DeviceID] = frozenset()

VerdictName = Literal["feasible", "unschedulable", "not-evaluated"]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    verdict: VerdictName
    score: int = 0
    reason: str = ""


@dataclass
class ScheduleStats:
    nodes_total: int = 0
    nodes_evaluated: int = 0
    nodes_pruned: int = 0
    nodes_feasible: int = 0
    groups: int = 0
    solves: int = 0
    cache_hits: int = 0
    wall_seconds: float = 0.0
    """Set by the caller, who owns the clock."""


@dataclass(frozen=True, slots=True)
class GroupVerdict:
    """The answer for every node of one shape and in-use state (what the cache keeps)."""

    feasible: bool
    score: int
    reason: str


@dataclass(frozen=True, slots=True)
class NodeAttempt:
    """One solve on one node: the request the core got and its outcome; ``tag`` is the
    caller's (the service: the reservation version the request was built against)."""

    request: AllocationRequest
    outcome: AllocationOutcome
    tag: int | None = None


@dataclass(frozen=True, slots=True)
class NodeChoiceOptions:
    allocator: AllocatorName = "cpsat"
    policy: str = ""
    gates: FeatureGates = field(default_factory=FeatureGates)
    wanted: int = 0
    """Stop after this many feasible nodes (0: at the first node with the best possible score)."""


@dataclass(frozen=True, slots=True)
class NodeChoice:
    node: str
    """The chosen node, "" when none fits."""
    attempt: NodeAttempt | None
    verdicts: tuple[NodeVerdict, ...]
    stats: ScheduleStats
    reason: str = ""
    """Why no node was chosen, like the scheduler: "0/3 nodes are available: ..."."""


class InFlight(Protocol):
    """Allocations not yet in the inventory (the service's reservations), by pool."""

    def held_pools(self) -> AbstractSet[PoolKey]: ...

    def devices(self, pools: Iterable[PoolKey]) -> frozenset[DeviceID]: ...

    def pool_keys(self, pools: Iterable[PoolKey]) -> tuple[bytes, ...]: ...

    def state(self, pools: Iterable[PoolKey] | None = None) -> AllocatedState: ...

    def fingerprints(self) -> dict[PoolKey, bytes]:
        """Every pool in ``held_pools`` -> what ``pool_keys`` gives for it."""
        ...

    def changes_since(self, version: int) -> tuple[int, dict[PoolKey, bytes | None] | None]:
        """``(current, changed)``: this state is version ``current`` (-1: not versioned) and
        differs from version ``version`` in the pools of ``changed`` (each one's
        ``pool_keys`` value, None where nothing is held any more); ``changed`` is None when
        that is not known (``fingerprints`` is read instead)."""
        ...


class VerdictCache(Protocol):
    def get(self, key: tuple[bytes, ...]) -> GroupVerdict | None: ...

    def put(self, key: tuple[bytes, ...], verdict: GroupVerdict) -> None: ...


@dataclass(frozen=True, slots=True)
class KnownAnswer:
    """An allocation found on ``node`` (whose own devices were ``layout``, in upstream's
    search order): what an ``AnswerCache`` keeps, rewritten for another node of the same
    state by ``answer_on``."""

    node: str
    layout: tuple[DeviceID, ...]
    outcome: AllocationOutcome
    positions: dict[DeviceID, int] = field(init=False, repr=False, compare=False)
    """``layout`` by device: where each one is (made once, read on every reuse)."""
    reused: SolveStats = field(init=False, repr=False, compare=False)
    """The outcome's statistics marked ``reused`` (made once)."""
    selectors: dict[tuple[int, str], o.NodeSelector] = field(init=False, repr=False, compare=False)
    """Node selectors renamed for the last target node, by result and node: a node meets the
    same answer again only when asked again in the same state (no reservation between); a
    node filling up meets each answer once, so older nodes' entries are dropped at once
    rather than piling up (dropping hundreds at a time stalled a call)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", {d: i for i, d in enumerate(self.layout)})
        object.__setattr__(self, "reused", replace(self.outcome.stats, reused=True))
        object.__setattr__(self, "selectors", {})


class AnswerCache(Protocol):
    def get(self, key: tuple[bytes, ...]) -> KnownAnswer | None: ...

    def put(self, key: tuple[bytes, ...], answer: KnownAnswer) -> None: ...


REUSABLE_STATUSES = frozenset({"TRIVIAL", "OPTIMAL", "FOUND"})
"""Solver statuses of answers that do not depend on the time the solver had (a FEASIBLE
answer might have improved with more time): only these are reused on other nodes."""


def answer_on(known: KnownAnswer, request: AllocationRequest, layout: Sequence[DeviceID]) -> AllocationOutcome:
    """``known`` written for ``request`` (its claims, its node whose own devices are
    ``layout``): devices by position, share IDs and the node selector renamed
    (``model.node_state.remap_results``); score and solver statistics are the source's,
    marked ``reused``."""
    mapping = device_mapping(known.layout, layout, positions=known.positions)
    kept = known.selectors
    # ``list`` copies the keys in one step: another call may be changing them meanwhile.
    if any(node != request.node.name for _, node in list(kept)):
        kept.clear()
    results = remap_results(
        known.outcome.results, mapping, claims=request.claims, source_node=known.node, target_node=request.node.name, selectors=known.selectors,
    )
    return AllocationOutcome(True, results, known.outcome.score, known.reused)


def choose_node(
    claims: Sequence[o.ResourceClaim],
    candidates: Sequence[str],
    *,
    index: NodeIndex,
    options: NodeChoiceOptions,
    attempt: Callable[[str], NodeAttempt | None],
    in_flight: InFlight,
    cache: VerdictCache | None = None,
    expired: Callable[[], bool] | None = None,
    memo: FlightOrder | None = None,
    generation: int = 0,
    quote: Callable[[str], str] = json.dumps,
    reads: AttributeReads = ALL,
    share_states: bool = True,
    answers: AnswerCache | None = None,
    reuse: Callable[[str, Callable[[AllocationRequest], AllocationOutcome]], NodeAttempt | None] | None = None,
    key_of_claims: bytes | None = None,
) -> NodeChoice:
    """Visit, solve, choose (see the module docstring). ``quote`` shows a node name the caller
    made up in a verdict (the service bounds its length). ``reads``: the device attributes the
    claims can read (``model.node_state.claim_reads``; ``ALL`` when unknown): nodes equal up to
    names and unread attributes share a solve. ``share_states=False`` groups only nodes equal
    up to the node's own name (the slower way, kept to measure against).

    ``answers`` keeps allocations by content like ``cache`` keeps verdicts: the chosen node's
    allocation is then rewritten from an earlier solve of a node in the same state
    (``answer_on``) instead of solved again; ``reuse(node, answer)`` is ``attempt`` with
    ``answer(request)`` in place of the solve (None: deadline passed). Only with
    ``share_states``, where equal keys mean equal problems up to names. ``key_of_claims``:
    ``claims_key`` of ``claims`` with ``options``' allocator, policy and gates, when the caller
    keeps it (None: made here)."""
    if candidates and len(candidates) >= len(index.node_names) and set(candidates) == index.node_name_set:
        # Every node of the index and no other (a scheduler that filtered none out): the same
        # visit as without a list, in the snapshot's own order, rather than each name sorted,
        # looked up and merged again on every call.
        candidates = ()
    names: Sequence[str] = sorted(set(candidates)) if candidates else index.node_names
    stats = ScheduleStats(nodes_total=len(names))
    node_policy = (options.policy or DEFAULT_POLICY) if (options.allocator or "cpsat") == "cpsat" else ""
    rank: dict[str, int] = {}
    need, exclusive = min_devices(claims)
    best_possible = best_possible_score(claims)
    if key_of_claims is None:
        key_of_claims = claims_key(claims, allocator=options.allocator, policy=options.policy, gates=options.gates)
    global_key = (index.global_key, index.shared_inuse_key, *in_flight.pool_keys(index.shared_pools), key_of_claims)
    groups: dict[tuple[bytes, ...], tuple[GroupVerdict, str]] = {}
    held_pools = in_flight.held_pools()
    views = index.views
    settled = index.state_keys(reads)
    solved: dict[str, NodeAttempt] = {}
    keys: dict[str, tuple[bytes, ...]] = {}
    answers = answers if share_states and reuse is not None else None
    verdicts: list[NodeVerdict] = []
    best: tuple[int, str] | None = None
    stopped = False
    # Candidates the inventory does not know at all are reported whatever the visit finds (it
    # may stop early at a best-scoring node), so a caller can tell a typo from a node that
    # does not fit.
    unknown = [n for n in names if index.view(n) is None and n not in index.nodes_by_name] if candidates else []
    for name in unknown:
        stats.nodes_evaluated += 1
        stats.nodes_pruned += 1
        verdicts.append(NodeVerdict(name, "unschedulable", reason=f"node {quote(name)} not found in the inventory"))
    missing = set(unknown)
    known_names = [n for n in names if n not in missing] if missing else names
    # Nodes without a free device are pruned wherever they come: visiting them last leaves the
    # choice as it was and spares a call the full nodes a packing order puts first.
    order = visit_order(
        index, known_names, node_policy, explicit=bool(candidates), in_flight=in_flight, memo=memo, generation=generation,
        full_last=exclusive and need >= 1,
    )
    for name in order:
        if stopped or (expired is not None and expired()):
            break
        rank[name] = len(rank)
        stats.nodes_evaluated += 1
        view = views.get(name)
        if view is None:
            stats.nodes_pruned += 1
            verdicts.append(NodeVerdict(name, "unschedulable", reason="node has no devices"))
            continue
        # In-flight state is asked for only where some is held (most nodes have none).
        held = bool(held_pools) and not held_pools.isdisjoint(view.pools)
        if exclusive and not view.shared_devices:
            free = index.free_devices(name, in_flight.devices(view.pools)) if held else index.free_devices(name, _NOTHING)
            if free < need:
                stats.nodes_pruned += 1
                broken = invalid_pools_error(index, name)
                reason = str(broken) if broken else too_few_free_reason(free, need)
                verdicts.append(NodeVerdict(name, "unschedulable", reason=reason))
                continue
        key: tuple[bytes, ...]
        if share_states:
            if held:
                pools = view.pools
                key = index.state_key(name, reads, in_flight.pool_keys(pools), partial(in_flight.state, pools))
            else:
                key = settled.get(name) or index.state_key(name, reads)
        else:
            key = (view.shape, index.inuse_key(name), *in_flight.pool_keys(view.pools))
        keys[name] = key
        known_group = groups.get(key)
        if known_group is not None:
            verdict = known_group[0]
        else:
            cached = cache.get((*global_key, *key)) if cache is not None else None
            if cached is not None:
                stats.cache_hits += 1
                verdict = cached
            else:
                outcome: AllocationOutcome
                made: NodeAttempt | None = None
                try:
                    made = attempt(name)
                    if made is None:
                        break  # the deadline passed before the node could be solved
                    outcome = made.outcome
                    if not outcome.allocated:
                        broken = invalid_pools_error(index, name)
                        if broken is not None:
                            raise broken
                except SolveTimeout:
                    verdicts.append(NodeVerdict(name, "not-evaluated", reason="the deadline passed while solving"))
                    break
                except NodeLocalError as err:
                    # Upstream: an error for this node only; other nodes may still fit.
                    outcome = AllocationOutcome(False, (), 0, err.stats or SolveStats(options.allocator, "ERROR", 0.0), str(err))
                except AllocationError as err:
                    raise AllocationError(f"node {name}: {err}") from err
                stats.solves += 1
                verdict = GroupVerdict(outcome.allocated, outcome.score if outcome.allocated else 0, outcome.reason or "cannot allocate all claims")
                if outcome.allocated and made is not None:
                    solved[name] = made
                    _remember(answers, (*global_key, *key), index, name, outcome)
                if cache is not None:
                    cache.put((*global_key, *key), verdict)
            groups[key] = (verdict, name)
        if verdict.feasible:
            stats.nodes_feasible += 1
            verdicts.append(NodeVerdict(name, "feasible", score=verdict.score))
            if best is None or verdict.score > best[0]:
                best = (verdict.score, name)
            stopped = stats.nodes_feasible >= options.wanted if options.wanted > 0 else best[0] >= best_possible
        else:
            verdicts.append(NodeVerdict(name, "unschedulable", reason=verdict.reason))
    stats.groups = len(groups)
    chosen: NodeAttempt | None = None
    chosen_node = ""
    # The chosen node needs a real allocation: reuse its solve, else solve it now.
    feasible = sorted((v for v in verdicts if v.verdict == "feasible"), key=lambda v: (-v.score, rank[v.node]))
    for v in feasible:
        if v.node in solved:
            chosen = solved[v.node]
        else:
            full_key = (*global_key, *keys[v.node]) if v.node in keys else None
            known = answers.get(full_key) if answers is not None and full_key is not None else None
            try:
                if known is not None and reuse is not None:
                    layout = index.node_shape(v.node).layout
                    again = reuse(v.node, partial(answer_on, known, layout=layout))
                else:
                    again = attempt(v.node)
                if again is None:
                    raise SolveTimeout("the deadline passed before a node's allocation was computed")
            except SolveTimeout:
                if chosen is None:
                    raise SolveTimeout("the deadline passed before a node's allocation was computed") from None
                break
            chosen = again
            if known is None:
                stats.solves += 1
                if full_key is not None and again.outcome.allocated:
                    _remember(answers, full_key, index, v.node, again.outcome)
        if chosen.outcome.allocated:
            chosen_node = v.node
            break
    if not chosen_node or chosen is None:
        if not verdicts and names and expired is not None:
            raise SolveTimeout("the deadline passed before any node was evaluated")
        # Every candidate has a verdict unless the visit stopped early.
        not_evaluated = 0 if len(verdicts) == len(names) else len(set(names) - {v.node for v in verdicts})
        reason = summary(verdicts, len(names), not_evaluated=not_evaluated)
        return NodeChoice("", None, tuple(verdicts), stats, reason)
    return NodeChoice(chosen_node, chosen, tuple(verdicts), stats)


def _remember(answers: AnswerCache | None, key: tuple[bytes, ...], index: NodeIndex, node: str, outcome: AllocationOutcome) -> None:
    if answers is not None and outcome.stats.status in REUSABLE_STATUSES:
        answers.put(key, KnownAnswer(node, index.node_shape(node).layout, outcome))


def visit_order(
    index: NodeIndex,
    names: Sequence[str],
    policy: str,
    *,
    explicit: bool,
    in_flight: InFlight,
    memo: FlightOrder | None = None,
    generation: int = 0,
    full_last: bool = False,
) -> Iterable[str]:
    """Nodes from most to least preferred by the policy (``model.node_load``): the visit
    stops at the first node with the best possible FirstAvailable score, so that node is
    also the preferred one among those. Without a node preference: name order.
    ``full_last``: nodes with no free device (``NodeIndex.no_free_device``, in-flight devices
    counted) after all others; only for claims that need a device of their own, which such a
    node can never take.

    The order by devices in use is computed once per snapshot (``NodeIndex``); nodes with
    devices in flight are keyed by ``memo`` (``FlightOrder``, kept by the caller across calls
    with the snapshot's ``generation``: only nodes whose allocations in flight changed since
    the last call are keyed again) and merged in lazily."""
    if policy not in NODE_POLICIES:
        if not full_last:
            return names
        policy = ""  # no preference: name order, with full nodes last
    own_key = partial(index.order_key, policy, full_last=full_last)
    flying = bool(policy) and bool(in_flight.held_pools())
    if not flying and not explicit:
        return index.preference_names(policy, full_last=full_last)
    # The nodes in flight: iterated in their visiting order, and asked ``name in moved``.
    moved: FlightNodes | tuple[()]
    moved, start = (memo or FlightOrder()).ordered(index, in_flight, generation, policy, full_last) if flying else ((), 0)
    if not explicit:
        rest = ((k, n) for k, n in itertools.islice(index.preference_order(policy, full_last=full_last), start, None) if n not in moved)
        return (n for _, n in heapq.merge(moved, rest))
    wanted = set(names)
    if len(wanted) != len(names):
        flight_keys = {n: k for k, n in moved}
        return sorted(names, key=lambda n: flight_keys.get(n) or own_key(n))
    # The caller's candidates, read off the snapshot's order (keys computed once per snapshot)
    # rather than keyed one by one on every call; names the index does not know keyed here.
    unknown = sorted((own_key(n), n) for n in wanted if n not in index.views)
    mine = [(k, n) for k, n in moved if n in wanted]
    rest = ((k, n) for k, n in itertools.islice(index.preference_order(policy, full_last=full_last), start, None) if n in wanted and n not in moved)
    return (n for _, n in heapq.merge(mine, rest, unknown))


def too_few_free_reason(free: int, need: int) -> str:
    """The verdict on a node pruned because it has fewer free devices than the claims need."""
    return f"cannot allocate all claims: {free} free devices, at least {need} needed"


_TOO_FEW_FREE = re.compile(r"cannot allocate all claims: \d+ free devices, at least \d+ needed")


def is_too_few_free(reason: str) -> bool:
    """Whether a node's verdict (as a Schedule answer gives it) is ``too_few_free_reason``'s."""
    return _TOO_FEW_FREE.fullmatch(reason) is not None


def min_devices(claims: Sequence[o.ResourceClaim]) -> tuple[int, bool]:
    """A lower bound on distinct free devices the claims need, and whether the bound applies
    (it does not when a request has admin access, which may use devices already in use)."""
    need = 0
    for claim in claims:
        for req in claim.spec.devices.requests or []:
            subs: list[tuple[str | None, int | None, bool]] = []
            if req.exactly is not None:
                subs.append((req.exactly.allocation_mode, req.exactly.count, bool(req.exactly.admin_access)))
            for sub in req.first_available or []:
                subs.append((sub.allocation_mode, sub.count, False))
            if any(admin for _, _, admin in subs):
                return 0, False
            counts = [(count or 1) if (mode or "ExactCount") == "ExactCount" else 1 for mode, count, _ in subs]
            if counts:
                need = max(need, min(counts))
    return need, True


def claims_key(
    claims: Sequence[o.ResourceClaim], *, allocator: str, policy: str, gates: FeatureGates,
    spec_text: Callable[[o.ResourceClaimSpec], str | None] | None = None,
) -> bytes:
    """What an answer depends on besides the node: the claims' specs (not their names), the
    allocator, the policy and the gates. ``spec_text(spec)``: a spec's JSON as below when the
    caller already has it (None: made here)."""
    digest = hashlib.blake2b(digest_size=16)
    for claim in claims:
        # The model's own JSON (fields in declaration order): equal specs give equal bytes.
        text = spec_text(claim.spec) if spec_text is not None else None
        digest.update((text if text is not None else claim.spec.model_dump_json(exclude_none=True)).encode())
        digest.update(b"\n")
    digest.update(json.dumps([allocator, policy, _gates_text(gates)]).encode())
    return digest.digest()


@functools.lru_cache(maxsize=64)
def _gates_text(gates: FeatureGates) -> str:
    return str(gates)


def summary(verdicts: Sequence[NodeVerdict], total: int, *, not_evaluated: int) -> str:
    """Like the scheduler: "0/3 nodes are available: 2 cannot allocate all claims, 1 ..."."""
    by_reason: dict[str, int] = {}
    for v in verdicts:
        if v.verdict != "feasible":
            by_reason[v.reason] = by_reason.get(v.reason, 0) + 1
    reasons: dict[str, int] = {}
    for full, count in by_reason.items():
        text = full.split(":")[0] if full else "unschedulable"
        reasons[text] = reasons.get(text, 0) + count
    if not_evaluated:
        reasons["not evaluated before the deadline"] = not_evaluated
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"0/{total} nodes are available" + (f": {parts}." if parts else ".")


def invalid_pools_error(index: NodeIndex, node: str) -> NodeLocalError | None:
    """Upstream's answer on a node that reaches an invalid pool when nothing else fits: an
    error for this node only (the pool's devices are never allocated)."""
    if not index.invalid_pools:  # the usual case, asked for every pruned node
        return None
    pools = index.invalid_pools_of(node)
    if not pools:
        return None
    first = pools[0]
    more = f" (and {len(pools) - 1} more)" if len(pools) > 1 else ""
    return NodeLocalError(f"invalid resource pools were encountered: pool {first[0]}/{first[1]}{more}: {index.invalid_pools[first]}")
