"""What the service does, independent of gRPC: decode, ask the core, verify, reserve.

The servicer (``service.server``) only converts messages and maps the exceptions below to
status codes. Every allocation the engine returns has passed the independent validator
(``model.check``) against the same inventory the solver saw; a failure there is an internal
error and nothing is returned (fail closed).

Whole-cluster ``schedule`` avoids solving 5,000 times: nodes are visited in name order; a node
with too few free devices is pruned without a solve; nodes whose devices and in-use state are
identical up to the node's own name share one solve (and answers are cached across calls by
content, never by generation); the visit stops once enough is known (a node with the best
possible FirstAvailable score, or the requested number of feasible nodes).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.allocation import (
    AllocatedState,
    AllocationOutcome,
    AllocationRequest,
    AllocatorName,
    DeviceID,
    SolveStats,
)
from dra_solver.model.cpsat.problem import DEFAULT_POLICY
from dra_solver.model.decode import ValidationMode, parse_documents
from dra_solver.model.errors import (
    AllocationError,
    DraSolverError,
    InvalidInput,
    InvalidInputs,
    SolveTimeout,
)
from dra_solver.model.features import FeatureGates
from dra_solver.model.node_load import NODE_POLICIES, node_key
from dra_solver.model.pools import DeviceParseCache
from dra_solver.service.admission import check_admin_access
from dra_solver.service.inventory import (
    InventorySource,
    NodeIndex,
    ObjectDecoder,
    PoolKey,
    Snapshot,
    StaticSource,
)
from dra_solver.service.metrics import Metrics
from dra_solver.service.quoting import node_not_found, shown
from dra_solver.service.reservations import Reservation, ReservationConflict, ReservationStore

log = logging.getLogger(__name__)

decode_warnings: ContextVar[list[str] | None] = ContextVar("decode_warnings", default=None)
"""``validate="warn"`` problems of the current call (the server sends them as "warning"
trailing metadata, like the API server's Warning header); None outside a call."""

MAX_DECODE_WARNINGS = 20

FIRST_AVAILABLE_MAX = 8
"""resourceapi.FirstAvailableDeviceRequestMaxSize: the weight of a request's first subrequest."""


# --- errors the transport maps to status codes ----------------------------------------------


class NotFound(DraSolverError):
    """An unknown node, reservation or claim (NOT_FOUND)."""


class NotReady(DraSolverError):
    """The inventory has not been loaded yet (UNAVAILABLE)."""


class DeadlineExceeded(DraSolverError):
    """No answer before the caller's deadline (DEADLINE_EXCEEDED)."""


class CheckFailed(DraSolverError):
    """The solver's answer failed independent validation (INTERNAL; nothing is returned)."""


class LimitExceeded(DraSolverError):
    """A request over a configured size limit (RESOURCE_EXHAUSTED)."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_claims: int = 32
    """Claims per call (a pod references at most 32 claims... we accept the same)."""
    max_objects: int = 50_000
    """Inline inventory objects per call."""
    max_candidates: int = 100_000
    default_solve_seconds: float = 10.0
    """Solver time when the caller sets no deadline."""
    max_solve_seconds: float = 60.0
    deadline_margin: float = 0.02
    """Seconds kept back from the caller's deadline for verification and encoding."""
    reserve_retries: int = 8
    """Re-solves after a concurrent caller took the chosen devices first."""
    cache_entries: int = 8192
    """Schedule answers kept (by content), least recently used forgotten first."""
    cel_environments: int = 64
    """CEL environments kept (one per CEL feature set and serving thread: 4 feature sets x 16
    workers by default; ``serve`` sizes it to its ``--workers``), LRU beyond. Sized so that
    serving never evicts: an environment's native parts (cel-cpp) are not all returned when
    it is dropped, about 0.4 MiB each, so churning environments would grow memory."""
    cel_compiled: int = 128
    """Compiled selectors kept per CEL environment (callers can send any expression), LRU;
    about 30 KiB each, freed when evicted."""
    cel_matches: int = 8192
    """(selector, device) results kept per CEL environment, LRU."""
    parsed_devices: int = 100_000
    """Parsed devices kept across solves (``model.pools.DeviceParseCache``)."""


@dataclass(frozen=True, slots=True)
class SolveOptions:
    allocator: AllocatorName = "cpsat"
    policy: str = ""
    feature_gates: str = ""
    validate: ValidationMode = "strict"
    """Field validation of the call's objects (kubectl's --validate); "ignore" also skips API
    validation."""


@dataclass(frozen=True, slots=True)
class ClaimAnswer:
    claim: o.ResourceClaim
    result: o.AllocationResult | None


@dataclass(frozen=True, slots=True)
class AllocateAnswer:
    node: str
    allocated: bool
    claims: tuple[ClaimAnswer, ...]
    score: int
    reason: str
    stats: SolveStats
    generation: int
    reservation: Reservation | None = None


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    verdict: str
    """feasible | unschedulable | not-evaluated"""
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


@dataclass(frozen=True, slots=True)
class ScheduleAnswer:
    node: str
    claims: tuple[ClaimAnswer, ...]
    score: int
    verdicts: tuple[NodeVerdict, ...]
    stats: ScheduleStats
    solve_stats: SolveStats | None
    reason: str
    generation: int
    reservation: Reservation | None = None


@dataclass(frozen=True, slots=True)
class _GroupVerdict:
    feasible: bool
    score: int
    reason: str


AllocateFn = Callable[[AllocationRequest], AllocationOutcome]
CheckFn = Callable[[AllocationRequest, AllocationOutcome], None]
"""Raises (anything) when the outcome is not a valid allocation for the request."""


def default_allocate_fn(cel_for: Callable[[FeatureGates], Any]) -> AllocateFn:
    from dra_solver.model.allocate import allocate

    def run(request: AllocationRequest) -> AllocationOutcome:
        # Objects were validated on the way in (claims per call, inventory when loaded).
        return allocate(request, cel=cel_for(request.gates), validate=False)

    return run


def default_check_fn(cel_for: Callable[[FeatureGates], Any]) -> CheckFn:
    from dra_solver.model import check

    def run(request: AllocationRequest, outcome: AllocationOutcome) -> None:
        cel = cel_for(request.gates)
        # Allocations a caller brings (Reserve) carry no score to check: check the results only.
        given = outcome.results if outcome.stats.status == "GIVEN" else outcome
        problems = check.check_allocation(request, given, cel=cel)
        if problems:
            raise CheckFailed("; ".join(str(p) for p in problems))

    return run


@dataclass
class Engine:
    source: InventorySource
    reservations: ReservationStore
    metrics: Metrics
    gates: FeatureGates = field(default_factory=FeatureGates)
    limits: Limits = field(default_factory=Limits)
    allocate_fn: AllocateFn | None = None
    check_fn: CheckFn | None = None
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._cels: OrderedDict[tuple[tuple[bool, bool], int], Any] = OrderedDict()
        self._solved_at = threading.local()
        self._cel_lock = threading.Lock()
        if self.allocate_fn is None:
            self.allocate_fn = default_allocate_fn(self.cel_for)
        if self.check_fn is None:
            self.check_fn = default_check_fn(self.cel_for)
        self._cache: OrderedDict[tuple[bytes, ...], _GroupVerdict] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._selector_check: Any = None
        self._selector_lock = threading.Lock()
        # Device objects are shared between nodes and carried over between snapshots
        # (service.inventory.ObjectDecoder): parse each once for every solve.
        self._devices = DeviceParseCache(self.limits.parsed_devices)
        self._flight_free: dict[str, tuple[tuple[int, tuple[bytes, ...]], float]] = {}

    def cel_for(self, gates: FeatureGates) -> Any:
        """A CEL environment for these gates (its optional features follow them), one per
        serving thread, kept for the server's lifetime so compile and match caches stay warm.

        Per thread because cel-cpp device activations built on one thread cannot be evaluated
        on another ("No PyCelArena found"). Keyed by the CEL features the gates turn on, not by
        the gates (callers choose any of thousands of gate combinations; an environment
        depends on two of them), and bounded (``Limits.cel_environments``, LRU).
        """
        key = (cel_features_key(gates), threading.get_ident())
        with self._cel_lock:
            env = self._cels.get(key)
            if env is not None:
                self._cels.move_to_end(key)
                return env
        from dra_solver.model.cel import CelEnvironment, CelFeatures

        consumable, lists = key[0]
        env = CelEnvironment(
            features=CelFeatures(consumable_capacity=consumable, list_type_attributes=lists),
            cache_size=self.limits.cel_compiled,
            match_cache_size=self.limits.cel_matches,
        )
        with self._cel_lock:
            env = self._cels.setdefault(key, env)
            while len(self._cels) > max(1, self.limits.cel_environments):
                self._cels.popitem(last=False)
            return env

    # --- decoding ---------------------------------------------------------------------------

    def decode_claims(
        self, blobs: Sequence[bytes], *, field_name: str = "claims", allow_allocated: bool = False, validate: ValidationMode = "strict"
    ) -> tuple[o.ResourceClaim, ...]:
        if len(blobs) > self.limits.max_claims:
            raise InvalidInput("", (field_name,), f"Too many: {len(blobs)}: must have at most {self.limits.max_claims} items")
        if not blobs:
            raise InvalidInput("", (field_name,), "Required value: at least one ResourceClaim is required")
        claims: list[o.ResourceClaim] = []
        seen: set[str] = set()
        for i, blob in enumerate(blobs):
            decoded = self._decode_blob(blob, source=f"{field_name}[{i}]", validate=validate)
            if not decoded:
                raise InvalidInput("", (), "Required value: a ResourceClaim object (the payload holds no object)", source=f"{field_name}[{i}]")
            for obj in decoded:
                if not isinstance(obj, o.ResourceClaim):
                    raise InvalidInput(obj.describe(), ("kind",), f'Unsupported value: "{obj.kind}": supported values: "ResourceClaim"', source=f"{field_name}[{i}]")
                if obj.allocated and not allow_allocated:
                    raise InvalidInput(obj.describe(), ("status", "allocation"), "Forbidden: the claim is already allocated; pass only claims to allocate", source=f"{field_name}[{i}]")
                if not obj.metadata.name:
                    raise InvalidInput(obj.describe(), ("metadata", "name"), "Required value: name or generateName is required", source=f"{field_name}[{i}]")
                if obj.ref in seen:
                    raise InvalidInput(obj.describe(), ("metadata", "name"), f"Duplicate value: {shown(obj.ref)}", source=f"{field_name}[{i}]")
                seen.add(obj.ref)
                if validate != "ignore":
                    self._validate(obj, source=f"{field_name}[{i}]")
                claims.append(obj)
        if len(claims) > self.limits.max_claims:
            raise InvalidInput("", (field_name,), f"Too many: {len(claims)}: must have at most {self.limits.max_claims} items")
        return tuple(claims)

    def _decode_blob(
        self, blob: bytes, *, source: str, decoder: ObjectDecoder | None = None, validate: ValidationMode = "strict"
    ) -> list[o.TypedObject]:
        """Objects of one payload. Whatever goes wrong decoding what a caller sent is that
        caller's invalid input, never a server error."""
        try:
            text = blob.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("", (), "not UTF-8 JSON", source=source) from None
        dec = decoder or ObjectDecoder(validate=validate)
        try:
            decoded = [dec.decode(doc, source=source) for doc in parse_documents(text, source=source)]
            _pass_on_warnings(dec.take_warnings())
            return decoded
        except DraSolverError:
            raise
        except RecursionError:
            raise InvalidInput("", (), "Invalid value: the document is nested too deeply", source=source) from None
        except MemoryError:
            raise InvalidInput("", (), "Invalid value: the document is too large once decoded", source=source) from None
        except Exception as err:  # a decoder gap must not become INTERNAL for a caller's bytes
            log.warning("%s: undecodable payload: %s: %s", source, type(err).__name__, shown(str(err)))
            raise InvalidInput("", (), f"Invalid value: cannot decode the payload: {type(err).__name__}", source=source) from None

    def _validate(self, obj: o.TypedObject, *, source: str) -> None:
        from dra_solver.model.validation import default_selector_check, validate_object

        with self._selector_lock:
            if self._selector_check is None:
                self._selector_check = default_selector_check() or (lambda _e: None)
        errors = validate_object(obj, selector_check=self._selector_check)
        if errors:
            for err in errors:
                err.source = source
                err.args = (err._render(),)
            if len(errors) == 1:
                raise errors[0]
            raise InvalidInputs(errors)

    def inline_snapshot(self, blobs: Sequence[bytes], *, validate: ValidationMode = "strict") -> Snapshot:
        if len(blobs) > self.limits.max_objects:
            raise InvalidInput("", ("objects",), f"Too many: {len(blobs)}: must have at most {self.limits.max_objects} items")
        dec = ObjectDecoder(validate=validate)
        objects: list[o.TypedObject] = []
        for i, blob in enumerate(blobs):
            objects.extend(self._decode_blob(blob, source=f"objects[{i}]", decoder=dec))
        if len(objects) > self.limits.max_objects:
            raise InvalidInput("", ("objects",), f"Too many: {len(objects)} objects: must have at most {self.limits.max_objects}")
        for i, obj in enumerate(objects):
            if validate != "ignore":
                self._validate(obj, source=f"objects[{i}]")
        src = StaticSource(objects, name="inline")
        src.start()
        return src.snapshot()

    def gates_for(self, text: str) -> FeatureGates:
        if not text:
            return self.gates
        try:
            return FeatureGates.parse(text, base=self.gates)
        except InvalidInput as err:
            # The parser quotes the caller's text; say it with a bounded quote, under the
            # field's gRPC name.
            raise InvalidInput("", ("options", "featureGates"), f"Invalid value: {shown(text)}: {shown_detail(err.detail)}") from None

    # --- snapshot and time -----------------------------------------------------------------

    def current(self) -> Snapshot:
        snap = self.source.snapshot()
        if not snap.ready:
            raise NotReady("the inventory is not loaded yet; retry shortly")
        return snap

    def time_limit(self, deadline: float | None) -> float:
        """Solver seconds from an absolute monotonic deadline (None = no deadline)."""
        if deadline is None:
            return self.limits.default_solve_seconds
        remaining = deadline - self.clock() - self.limits.deadline_margin
        if remaining <= 0:
            raise DeadlineExceeded("the deadline passed before solving started")
        return min(remaining, self.limits.max_solve_seconds)

    # --- core calls -------------------------------------------------------------------------

    def _solve(self, request: AllocationRequest) -> AllocationOutcome:
        assert self.allocate_fn is not None
        try:
            outcome = self.allocate_fn(request)
        except SolveTimeout:
            status = "UNKNOWN" if request.allocator == "cpsat" else "DEADLINE"
            self.metrics.solver_status.labels(allocator=request.allocator, status=status).inc()
            raise
        self.metrics.observe_solve(outcome.stats, score=outcome.score if outcome.allocated else None)
        return outcome

    def _verify(self, request: AllocationRequest, outcome: AllocationOutcome) -> None:
        assert self.check_fn is not None
        try:
            self.check_fn(request, outcome)
        except CheckFailed:
            raise
        except Exception as err:
            raise CheckFailed(f"allocation failed independent validation: {err}") from err

    def _node_request(
        self,
        snap: Snapshot,
        claims: tuple[o.ResourceClaim, ...],
        node: str,
        opts: SolveOptions,
        *,
        time_limit: float,
        use_reservations: bool,
    ) -> AllocationRequest:
        index = snap.index
        extra = None
        if use_reservations:
            self._solved_at.version = self.reservations.version
            view = index.view(node)
            pools = list(view.pools) if view else []
            pools.extend(index.shared_pools)
            extra = self.reservations.state(pools)
        return AllocationRequest(
            claims=claims,
            node=index.nodes_by_name.get(node) or snap.inventory.node(node),
            inventory=index.node_inventory(node, extra),
            gates=self.gates_for(opts.feature_gates),
            allocator=opts.allocator,
            time_limit=time_limit,
            policy=opts.policy,
            device_cache=self._devices,
        )

    # --- Allocate ---------------------------------------------------------------------------

    def allocate(
        self,
        claim_blobs: Sequence[bytes],
        node: str,
        *,
        objects: Sequence[bytes] = (),
        opts: SolveOptions = SolveOptions(),
        reserve: bool = False,
        ttl: float = 0.0,
        deadline: float | None = None,
        caller: str = "",
    ) -> AllocateAnswer:
        if not node:
            raise InvalidInput("", ("node",), "Required value: the node to allocate on")
        claims = self.decode_claims(claim_blobs, validate=opts.validate)
        inline = bool(objects)
        if inline and reserve:
            raise InvalidInput("", ("reserve",), "Forbidden: cannot reserve against an inline inventory")
        for attempt in range(self.limits.reserve_retries + 1):
            snap = self.inline_snapshot(objects, validate=opts.validate) if inline else self.current()
            check_admin_access(claims, snap.namespaces)
            if node not in snap.index.views and node not in snap.index.nodes_by_name:
                raise NotFound(node_not_found(node))
            request = self._node_request(snap, claims, node, opts, time_limit=self.time_limit(deadline), use_reservations=not inline)
            solved_at = getattr(self._solved_at, "version", None) if not inline else None
            outcome = self._solve(request)
            if not outcome.allocated:
                if not inline:
                    _raise_invalid_pools(snap.index, node)
                return AllocateAnswer(node, False, tuple(ClaimAnswer(c, None) for c in claims), 0, outcome.reason or "cannot allocate all claims", outcome.stats, snap.generation)
            self._verify(request, outcome)
            reservation = None
            if reserve:
                try:
                    reservation = self._reserve(snap, request, outcome, ttl=ttl, pod="", solved_at=solved_at, caller=caller)
                except ReservationConflict:
                    if attempt == self.limits.reserve_retries:
                        raise
                    continue
            self._count_devices(outcome)
            answers = tuple(ClaimAnswer(c, r) for c, r in zip(claims, outcome.results, strict=True))
            return AllocateAnswer(node, True, answers, outcome.score, "", outcome.stats, snap.generation, reservation)
        raise AssertionError("unreachable")

    def _count_devices(self, outcome: AllocationOutcome) -> None:
        # Drivers of the server's inventory only: an inline inventory names any driver it likes.
        served = self.source.snapshot()
        known = served.index.device_count_by_driver if served.ready else {}
        for result in outcome.results:
            for r in (result.devices.results or []) if result.devices else []:
                self.metrics.allocated_devices.labels(driver_name=r.driver if r.driver in known else "other").inc()

    # --- Reserve ----------------------------------------------------------------------------

    def _reserve(
        self, snap: Snapshot, request: AllocationRequest, outcome: AllocationOutcome, *, ttl: float, pod: str, solved_at: int | None = None,
        caller: str = "",
    ) -> Reservation:
        state = AllocatedState.from_claims(_with_results(request.claims, outcome.results))
        index = snap.index

        def validate(others: AllocatedState) -> None:
            # The allocation must still be valid with every other in-flight allocation counted.
            if not (others.devices or others.shared or others.capacity):
                return
            view = index.view(request.node.name)
            pools = list(view.pools) if view else []
            pools.extend(index.shared_pools)
            inv = index.node_inventory(request.node.name, self.reservations.state(pools))
            again = replace(request, inventory=inv)
            try:
                self._verify(again, outcome)
            except CheckFailed as err:
                raise ReservationConflict(f"the allocation conflicts with one in flight: {err}") from err

        for c in request.claims:
            # Held as long as the reservation: bounded even when validation was skipped.
            if len(c.ref) > MAX_POD_REF or len(c.metadata.uid or "") > 128:
                raise InvalidInput(c.describe()[:100], ("metadata",), "Invalid value: name, namespace or uid too long to reserve")
        return self.reservations.reserve(
            node=request.node.name,
            claims=[(c.ref, c.metadata.uid or "") for c in request.claims],
            state=state,
            taken=index.allocated,
            latest_taken=lambda: self.source.snapshot().index.allocated,
            ttl=ttl,
            pod=pod,
            validate=validate,
            solved_at=solved_at,
            caller=caller,
        )

    def reserve(self, claim_blobs: Sequence[bytes], node: str, *, ttl: float = 0.0, pod: str = "", caller: str = "") -> Reservation:
        """Hold allocations the caller already has (claims with status.allocation set)."""
        if not node:
            raise InvalidInput("", ("node",), "Required value: the node the claims were allocated on")
        _check_pod(pod)
        claims = self.decode_claims(claim_blobs, allow_allocated=True)
        for i, c in enumerate(claims):
            if not c.allocated:
                raise InvalidInput(c.describe(), ("status", "allocation"), "Required value: Reserve needs the allocation to hold", source=f"claims[{i}]")
        snap = self.current()
        check_admin_access(claims, snap.namespaces)
        if node not in snap.index.views and node not in snap.index.nodes_by_name:
            raise NotFound(node_not_found(node))
        results = tuple(c.status.allocation for c in claims if c.status and c.status.allocation)
        bare = tuple(c.model_copy(update={"status": None}) for c in claims)
        request = self._node_request(snap, bare, node, SolveOptions(), time_limit=self.limits.default_solve_seconds, use_reservations=False)
        stats = SolveStats(allocator="caller", status="GIVEN", wall_seconds=0.0)
        outcome = AllocationOutcome(True, results, 0, stats)
        try:
            self._verify(request, outcome)
        except CheckFailed as err:
            raise ReservationConflict(f"the allocation is not valid on node {node}: {err}") from err
        return self._reserve(snap, request, outcome, ttl=ttl, pod=pod, caller=caller)

    def unreserve(self, reservation_id: str, claims: Sequence[str]) -> int:
        from dra_solver.service.reservations import UnknownReservation

        if not reservation_id and not claims:
            raise InvalidInput("", ("reservationId",), "Required value: a reservation id or claims")
        try:
            return self.reservations.release(reservation_id, claims=claims)
        except UnknownReservation as err:
            raise NotFound(str(err)) from None

    # --- Schedule ---------------------------------------------------------------------------

    def schedule(
        self,
        claim_blobs: Sequence[bytes],
        nodes: Sequence[str] = (),
        *,
        opts: SolveOptions = SolveOptions(),
        reserve: bool = False,
        ttl: float = 0.0,
        wanted: int = 0,
        pod: str = "",
        deadline: float | None = None,
        caller: str = "",
    ) -> ScheduleAnswer:
        _check_pod(pod)
        claims = self.decode_claims(claim_blobs, validate=opts.validate)
        if len(nodes) > self.limits.max_candidates:
            raise LimitExceeded(f"nodes: Too many: {len(nodes)}: must have at most {self.limits.max_candidates} items")
        if wanted < 0:
            raise InvalidInput("", ("feasibleNodesWanted",), f"Invalid value: {wanted}: must be greater than or equal to 0")
        for attempt in range(self.limits.reserve_retries + 1):
            snap = self.current()
            check_admin_access(claims, snap.namespaces)
            answer, request, outcome, solved_at = self._schedule_once(snap, claims, nodes, opts, wanted=wanted, deadline=deadline)
            if not reserve or request is None or outcome is None:
                return answer
            try:
                reservation = self._reserve(snap, request, outcome, ttl=ttl, pod=pod, solved_at=solved_at, caller=caller)
            except ReservationConflict:
                if attempt == self.limits.reserve_retries:
                    raise
                continue
            return ScheduleAnswer(answer.node, answer.claims, answer.score, answer.verdicts, answer.stats, answer.solve_stats, answer.reason, answer.generation, reservation)
        raise AssertionError("unreachable")

    def _schedule_once(
        self,
        snap: Snapshot,
        claims: tuple[o.ResourceClaim, ...],
        candidates: Sequence[str],
        opts: SolveOptions,
        *,
        wanted: int,
        deadline: float | None,
    ) -> tuple[ScheduleAnswer, AllocationRequest | None, AllocationOutcome | None, int | None]:
        start = self.clock()
        index = snap.index
        names = sorted(set(candidates)) if candidates else list(index.node_names)
        stats = ScheduleStats(nodes_total=len(names))
        node_policy = (opts.policy or DEFAULT_POLICY) if (opts.allocator or "cpsat") == "cpsat" else ""
        rank: dict[str, int] = {}
        need, exclusive = _min_devices(claims)
        best_possible = FIRST_AVAILABLE_MAX * sum(1 for c in claims for r in c.spec.devices.requests or [] if r.first_available)
        claims_key = _claims_key(claims, opts, self.gates_for(opts.feature_gates))
        global_key = (index.global_key, index.shared_inuse_key, *self.reservations.pool_keys(index.shared_pools), claims_key)
        groups: dict[tuple[bytes, ...], tuple[_GroupVerdict, str]] = {}
        solved: dict[str, tuple[AllocationRequest, AllocationOutcome, int | None]] = {}
        verdicts: list[NodeVerdict] = []
        best: tuple[int, str] | None = None
        stopped = False
        # Candidates the inventory does not know at all are reported whatever the visit finds
        # (it may stop early at a best-scoring node), so a caller can tell a typo from a node
        # that does not fit.
        unknown = [n for n in names if index.view(n) is None and n not in index.nodes_by_name] if candidates else []
        for name in unknown:
            stats.nodes_evaluated += 1
            stats.nodes_pruned += 1
            verdicts.append(NodeVerdict(name, "unschedulable", reason=node_not_found(name)))
        missing = set(unknown)
        known_names = [n for n in names if n not in missing] if missing else names
        for name in self._visit_order(snap, known_names, node_policy, explicit=bool(candidates)):
            if stopped or (deadline is not None and self.clock() >= deadline - self.limits.deadline_margin):
                break
            rank[name] = len(rank)
            stats.nodes_evaluated += 1
            view = index.view(name)
            if view is None:
                stats.nodes_pruned += 1
                verdicts.append(NodeVerdict(name, "unschedulable", reason="node has no devices"))
                continue
            if exclusive and not view.shared_devices:
                free = index.free_devices(name, self.reservations.devices(view.pools))
                if free < need:
                    stats.nodes_pruned += 1
                    broken = _invalid_pools_error(index, name)
                    reason = str(broken) if broken else f"cannot allocate all claims: {free} free devices, at least {need} needed"
                    verdicts.append(NodeVerdict(name, "unschedulable", reason=reason))
                    continue
            key = (view.shape, index.inuse_key(name), *self.reservations.pool_keys(view.pools))
            known_group = groups.get(key)
            if known_group is not None:
                verdict = known_group[0]
            else:
                cached = self._cache_get((*global_key, *key))
                if cached is not None:
                    stats.cache_hits += 1
                    verdict = cached
                else:
                    try:
                        request = self._node_request(snap, claims, name, opts, time_limit=self.time_limit(deadline), use_reservations=True)
                    except DeadlineExceeded:
                        break
                    try:
                        outcome = self._solve(request)
                        if not outcome.allocated:
                            _raise_invalid_pools(index, name)
                    except SolveTimeout:
                        verdicts.append(NodeVerdict(name, "not-evaluated", reason="the deadline passed while solving"))
                        break
                    except AllocationError as err:
                        if not getattr(err, "node_local", False):
                            raise AllocationError(f"node {name}: {err}") from err
                        # Upstream: an error for this node only; other nodes may still fit.
                        outcome = AllocationOutcome(False, (), 0, getattr(err, "stats", None) or SolveStats(opts.allocator, "ERROR", 0.0), str(err))
                    stats.solves += 1
                    verdict = _GroupVerdict(outcome.allocated, outcome.score if outcome.allocated else 0, outcome.reason or "cannot allocate all claims")
                    if outcome.allocated:
                        solved[name] = (request, outcome, getattr(self._solved_at, "version", None))
                    self._cache_put((*global_key, *key), verdict)
                groups[key] = (verdict, name)
            if verdict.feasible:
                stats.nodes_feasible += 1
                verdicts.append(NodeVerdict(name, "feasible", score=verdict.score))
                if best is None or verdict.score > best[0]:
                    best = (verdict.score, name)
                stopped = stats.nodes_feasible >= wanted if wanted > 0 else best[0] >= best_possible
            else:
                verdicts.append(NodeVerdict(name, "unschedulable", reason=verdict.reason))
        stats.groups = len(groups)
        chosen_request: AllocationRequest | None = None
        chosen_outcome: AllocationOutcome | None = None
        chosen_at: int | None = None
        chosen = ""
        # The chosen node needs a real allocation: reuse its solve, else solve it now.
        order = sorted((v for v in verdicts if v.verdict == "feasible"), key=lambda v: (-v.score, rank[v.node]))
        for v in order:
            if v.node in solved:
                chosen_request, chosen_outcome, chosen_at = solved[v.node]
            else:
                try:
                    chosen_request = self._node_request(snap, claims, v.node, opts, time_limit=self.time_limit(deadline), use_reservations=True)
                    chosen_at = getattr(self._solved_at, "version", None)
                    chosen_outcome = self._solve(chosen_request)
                except (DeadlineExceeded, SolveTimeout):
                    if chosen_outcome is None:
                        raise DeadlineExceeded("the deadline passed before a node's allocation was computed") from None
                    break
                stats.solves += 1
            if chosen_outcome.allocated:
                chosen = v.node
                break
        stats.wall_seconds = self.clock() - start
        self._observe_schedule(stats)
        if not chosen or chosen_request is None or chosen_outcome is None:
            evaluated = {v.node for v in verdicts}
            not_evaluated = [n for n in names if n not in evaluated]
            reason = _summary(verdicts, len(names), not_evaluated=len(not_evaluated))
            if not verdicts and names and deadline is not None:
                raise DeadlineExceeded("the deadline passed before any node was evaluated")
            return (
                ScheduleAnswer("", tuple(ClaimAnswer(c, None) for c in claims), 0, tuple(verdicts), stats, None, reason, snap.generation),
                None,
                None,
                None,
            )
        self._verify(chosen_request, chosen_outcome)
        self._count_devices(chosen_outcome)
        answers = tuple(ClaimAnswer(c, r) for c, r in zip(claims, chosen_outcome.results, strict=True))
        answer = ScheduleAnswer(chosen, answers, chosen_outcome.score, tuple(verdicts), stats, chosen_outcome.stats, "", snap.generation)
        return answer, chosen_request, chosen_outcome, chosen_at

    def _visit_order(self, snap: Snapshot, names: Sequence[str], policy: str, *, explicit: bool) -> Iterable[str]:
        """Nodes from most to least preferred by the policy (``model.node_load``): the visit
        stops at the first node with the best possible FirstAvailable score, so that node is
        also the preferred one among those. Without a node preference: name order.

        The order by devices in use is computed once per snapshot; only nodes with devices in
        flight (reservations) are re-keyed per call and merged in lazily."""
        if policy not in NODE_POLICIES:
            return names
        index = snap.index
        in_flight: dict[str, list[PoolKey]] = {}
        for pool in self.reservations.held_pools():
            owner = index.pool_node.get(pool)
            if owner:
                in_flight.setdefault(owner, []).append(pool)

        def key(name: str) -> tuple[float, str]:
            pools = in_flight.get(name)
            if pools is None:
                return node_key(policy, index.free_units(name), name)
            # Re-keyed only when the node's reservations changed since the last call.
            fingerprint = (snap.generation, self.reservations.pool_keys(pools))
            known = self._flight_free.get(name)
            if known is not None and known[0] == fingerprint:
                free = known[1]
            else:
                free = index.free_units(name, self.reservations.state(pools))
                self._flight_free[name] = (fingerprint, free)
            return node_key(policy, free, name)

        if explicit:
            return sorted(names, key=key)
        moved = sorted((key(n), n) for n in in_flight if n in index.views)
        rest = ((k, n) for k, n in index.preference_order(policy) if n not in in_flight)
        return (n for _, n in heapq.merge(moved, rest))

    def _observe_schedule(self, stats: ScheduleStats) -> None:
        h = self.metrics.schedule_nodes
        h.labels(phase="candidates").observe(stats.nodes_total)
        h.labels(phase="evaluated").observe(stats.nodes_evaluated)
        h.labels(phase="pruned").observe(stats.nodes_pruned)
        h.labels(phase="feasible").observe(stats.nodes_feasible)
        h.labels(phase="solved").observe(stats.solves)

    def _cache_get(self, key: tuple[bytes, ...]) -> _GroupVerdict | None:
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
        self.metrics.cache_requests.labels(cache="schedule", result="hit" if hit else "miss").inc()
        return hit

    def _cache_put(self, key: tuple[bytes, ...], verdict: _GroupVerdict) -> None:
        with self._cache_lock:
            self._cache[key] = verdict
            while len(self._cache) > self.limits.cache_entries:
                self._cache.popitem(last=False)

    # --- Explain ----------------------------------------------------------------------------

    def explain(
        self,
        claim_blobs: Sequence[bytes],
        node: str,
        *,
        objects: Sequence[bytes] = (),
        opts: SolveOptions = SolveOptions(),
        deadline: float | None = None,
    ) -> Any:
        from dra_solver.service.explain import explain_on_node

        if not node:
            raise InvalidInput("", ("node",), "Required value: the node to explain")
        claims = self.decode_claims(claim_blobs, validate=opts.validate)
        inline = bool(objects)
        snap = self.inline_snapshot(objects, validate=opts.validate) if inline else self.current()
        check_admin_access(claims, snap.namespaces)
        if node not in snap.index.views and node not in snap.index.nodes_by_name:
            raise NotFound(node_not_found(node))
        request = self._node_request(snap, claims, node, opts, time_limit=self.time_limit(deadline), use_reservations=not inline)
        holders: dict[DeviceID, str] = {d: f"claim {ref}" for d, ref in snap.index.holders().items()}
        if not inline:
            holders.update({d: f"a reservation in flight for claim {refs}" for d, refs in self.reservations.holders().items()})
        return explain_on_node(request, cel=self.cel_for(request.gates), holders=holders, solve=self._solve)

    # --- Inventory --------------------------------------------------------------------------

    def inventory_status(self) -> dict[str, Any]:
        snap = self.source.snapshot()
        return {
            "source": self.source.name,
            "ready": snap.ready,
            "generation": snap.generation,
            "objects": snap.counts(),
            "nodes": len(snap.index.node_names) if snap.ready else 0,
            "reservations": len(self.reservations),
            "invalid_pools": dict(snap.invalid_pools),
            "problems": snap.problems,
            "problem_count": snap.problem_count,
        }

    def on_snapshot(self, snap: Snapshot) -> None:
        """Listener: new inventory -> metrics, and reservations the API now shows allocated."""
        self.reservations.observe(snap)
        index: NodeIndex | None = snap.index if snap.ready else None
        problems: dict[str, int] = {}
        for p in snap.problems:
            problems[p.kind] = problems.get(p.kind, 0) + 1
        self.metrics.observe_inventory(
            snap.counts(),
            index.device_count_by_driver if index else {},
            generation=snap.generation,
            ready=snap.ready,
            invalid_pools=len(snap.invalid_pools),
            problems_by_kind=problems,
        )
        self.metrics.reservations_in_flight.set(len(self.reservations))


# --- helpers ----------------------------------------------------------------------------------


def _with_results(claims: Sequence[o.ResourceClaim], results: Sequence[o.AllocationResult]) -> list[o.ResourceClaim]:
    return [c.model_copy(update={"status": o.ResourceClaimStatus(allocation=r)}) for c, r in zip(claims, results, strict=True)]


def _min_devices(claims: Sequence[o.ResourceClaim]) -> tuple[int, bool]:
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


def _claims_key(claims: Sequence[o.ResourceClaim], opts: SolveOptions, gates: FeatureGates) -> bytes:
    # Answers depend on the claims' specs, not their names.
    specs = [c.spec.to_api() for c in claims]
    text = json.dumps([specs, opts.allocator, opts.policy, str(gates)], sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _summary(verdicts: Sequence[NodeVerdict], total: int, *, not_evaluated: int) -> str:
    """Like the scheduler: "0/3 nodes are available: 2 cannot allocate all claims, 1 ..."."""
    reasons: dict[str, int] = {}
    for v in verdicts:
        if v.verdict == "feasible":
            continue
        text = v.reason.split(":")[0] if v.reason else "unschedulable"
        reasons[text] = reasons.get(text, 0) + 1
    if not_evaluated:
        reasons["not evaluated before the deadline"] = not_evaluated
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"0/{total} nodes are available" + (f": {parts}." if parts else ".")



MAX_POD_REF = 63 + 1 + 253
"""``namespace/name`` of a pod at most (a DNS label, a DNS subdomain)."""


def _check_pod(pod: str) -> None:
    # Kept with each reservation: a caller must not make reservations arbitrarily large.
    if len(pod) > MAX_POD_REF:
        raise InvalidInput("", ("pod",), f"Too long: may not be more than {MAX_POD_REF} bytes")


def _invalid_pools_error(index: NodeIndex, node: str) -> AllocationError | None:
    """Upstream's answer on a node that reaches an invalid pool when nothing else fits: an
    error for this node only (the pool's devices are never allocated)."""
    pools = index.invalid_pools_of(node)
    if not pools:
        return None
    first = pools[0]
    more = f" (and {len(pools) - 1} more)" if len(pools) > 1 else ""
    err = AllocationError(f"invalid resource pools were encountered: pool {first[0]}/{first[1]}{more}: {index.invalid_pools[first]}")
    err.node_local = True  # type: ignore[attr-defined]
    return err


def _raise_invalid_pools(index: NodeIndex, node: str) -> None:
    err = _invalid_pools_error(index, node)
    if err is not None:
        raise err


def cel_features_key(gates: FeatureGates) -> tuple[bool, bool]:
    """The gates a CEL environment depends on (those ``model.allocate.default_cel`` reads)."""
    return (gates.consumable_capacity, gates.list_type_attributes)


def shown_detail(detail: str) -> str:
    from dra_solver.service.quoting import clip

    return clip(detail, 200)


def _pass_on_warnings(warnings: Sequence[str]) -> None:
    """Log ``validate="warn"`` problems and hand them to the call (bounded: a payload with
    thousands of unknown fields must not become thousands of metadata entries)."""
    if not warnings:
        return
    for line in warnings[:MAX_DECODE_WARNINGS]:
        log.info("decode warning: %s", shown_detail(line))
    sink = decode_warnings.get()
    if sink is not None:
        room = MAX_DECODE_WARNINGS - len(sink)
        # Metadata values are printable ASCII: escape the rest rather than fail the call.
        sink.extend(
            "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in shown_detail(w))
            for w in warnings[: max(0, room)]
        )
