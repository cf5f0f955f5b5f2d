"""What the service does, independent of gRPC: decode, ask the core, verify, reserve.

The servicer (``service.server``) only converts messages and maps the exceptions below to
status codes. Every allocation the engine returns has passed the independent validator
(``model.check_allocation``) against the same inventory the solver saw; a failure there is an
internal error and nothing is returned (fail closed).

The decisions are the core's (``dra_solver.model``): ``allocate`` on one node, ``choose_node``
for whole-cluster ``schedule`` (pruning, equal nodes sharing one solve, the stop rule, the
policy's node preference) and ``explain_node``. The engine supplies what they need from the
world: the inventory snapshot and its ``NodeIndex``, reservations in flight, the caller's
deadline, a verdict cache kept across calls, per-thread CEL environments and metrics.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from prometheus_client import Counter, Histogram

from dra_solver import model
from dra_solver.model import (
    AllocatedState,
    AllocationOutcome,
    AllocationRequest,
    AllocatorName,
    CelEnvironment,
    CelFeatures,
    DeviceID,
    DeviceParseCache,
    DraSolverError,
    ExplainAnswer,
    FeatureGates,
    GroupVerdict,
    InvalidInput,
    InvalidInputs,
    KnownAnswer,
    NodeAttempt,
    NodeChoiceOptions,
    NodeIndex,
    NodeVerdict,
    ScheduleStats,
    SolveStats,
    SolveTimeout,
    ValidationMode,
    parse_documents,
)
from dra_solver.model import objects as o
from dra_solver.service.admission import check_admin_access
from dra_solver.service.claim_facts import ClaimFacts
from dra_solver.service.claim_templates import ClaimTemplates
from dra_solver.service.inflight import (
    MAX_IN_FLIGHT,
    NO_FLIGHT,
    CallerFlight,
    FlightClaim,
    FlightDecoder,
    Overlay,
    flight_claim,
    subtract,
)
from dra_solver.service.inventory import InventorySource, ObjectDecoder, Snapshot, StaticSource
from dra_solver.service.metrics import Metrics
from dra_solver.service.quoting import clip, node_not_found, shown
from dra_solver.service.reservations import (
    HeldNow,
    Reservation,
    ReservationConflict,
    ReservationStore,
    UnknownReservation,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

decode_warnings: ContextVar[list[str] | None] = ContextVar("decode_warnings", default=None)
"""``validate="warn"`` problems of the current call (the server sends them as "warning"
trailing metadata, like the API server's Warning header); None outside a call."""

MAX_DECODE_WARNINGS = 20


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
    max_group_pods: int = 1024
    """Pods per ScheduleGroup call (RESOURCE_EXHAUSTED beyond)."""
    max_batch_items: int = 1024
    """Schedule requests per ScheduleBatch call (RESOURCE_EXHAUSTED beyond)."""
    cache_entries: int = 8192
    """Schedule verdicts kept (by content), least recently used forgotten first."""
    answer_entries: int = 4096
    """Allocations kept by node state up to names (``model.KnownAnswer``), LRU."""
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
    claim_templates: int = 256
    """Claims kept decoded and validated by their content without metadata
    (``service.claim_templates``), LRU; 0 decodes every claim in full."""


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


@contextlib.contextmanager
def _callers_bytes(source: str) -> Iterator[None]:
    """Whatever goes wrong reading what a caller sent is that caller's invalid input, never a
    server error."""
    try:
        yield
    except DraSolverError:
        raise
    except RecursionError:
        raise InvalidInput("", (), "Invalid value: the document is nested too deeply", source=source) from None
    except MemoryError:
        raise InvalidInput("", (), "Invalid value: the document is too large once decoded", source=source) from None
    except Exception as err:  # a decoder gap must not become INTERNAL for a caller's bytes
        log.warning("%s: undecodable payload: %s: %s", source, type(err).__name__, shown(str(err)))
        raise InvalidInput("", (), f"Invalid value: cannot decode the payload: {type(err).__name__}", source=source) from None


def _utf8(blob: bytes, *, source: str) -> str:
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("", (), "not UTF-8 JSON", source=source) from None


class _ContentCache(Generic[T]):
    """Schedule verdicts (``model.VerdictCache``) or answers (``model.AnswerCache``) by
    content: least recently used forgotten first beyond ``size``; hits and misses counted in
    metrics under ``name``."""

    def __init__(self, size: int, metrics: Metrics, name: str = "schedule") -> None:
        self._entries: OrderedDict[tuple[bytes, ...], T] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()
        self._hits = metrics.cache_requests.labels(cache=name, result="hit")
        self._misses = metrics.cache_requests.labels(cache=name, result="miss")

    def get(self, key: tuple[bytes, ...]) -> T | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
        (self._hits if hit is not None else self._misses).inc()
        return hit

    def put(self, key: tuple[bytes, ...], value: T) -> None:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


AllocateFn = Callable[[AllocationRequest], AllocationOutcome]
CheckFn = Callable[[AllocationRequest, AllocationOutcome], None]
"""Raises (anything) when the outcome is not a valid allocation for the request."""


def default_allocate_fn(cel_for: Callable[[FeatureGates], CelEnvironment]) -> AllocateFn:
    def run(request: AllocationRequest) -> AllocationOutcome:
        # Objects were validated on the way in (claims per call, inventory when loaded).
        return model.allocate(request, cel=cel_for(request.gates), validate=False)

    return run


def default_check_fn(cel_for: Callable[[FeatureGates], CelEnvironment]) -> CheckFn:
    pools = model.PoolCache()  # one per engine: its snapshots' objects are shared across requests

    def run(request: AllocationRequest, outcome: AllocationOutcome) -> None:
        cel = cel_for(request.gates)
        # Allocations a caller brings (Reserve) carry no score to check: check the results only.
        given = outcome.results if outcome.stats.status == "GIVEN" else outcome
        problems = model.check_allocation(request, given, cel=cel, pools=pools)
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
    share_states: bool = True
    """Nodes equal up to names share a solve (``model.node_state``); False: only nodes equal
    up to their own name do (kept for benchmarks to measure against)."""

    def __post_init__(self) -> None:
        self._cels: OrderedDict[tuple[tuple[bool, bool], int], CelEnvironment] = OrderedDict()
        self._cel_lock = threading.Lock()
        if self.allocate_fn is None:
            self.allocate_fn = default_allocate_fn(self.cel_for)
        if self.check_fn is None:
            self.check_fn = default_check_fn(self.cel_for)
        self._cache = _ContentCache[GroupVerdict](self.limits.cache_entries, self.metrics)
        # Allocations by node state up to names: the chosen node's answer is rewritten from an
        # earlier solve of an equal state instead of solved again (and then checked).
        self._answers = _ContentCache[KnownAnswer](self.limits.answer_entries, self.metrics, "answers")
        self._selector_check: model.SelectorCheck | None = None
        self._selector_lock = threading.Lock()
        # Device objects are shared between nodes and carried over between snapshots
        # (service.inventory.ObjectDecoder): parse each once for every solve.
        self._devices = DeviceParseCache(self.limits.parsed_devices)
        self._flight_order = model.FlightOrder()
        self._node_phases: tuple[Histogram, ...] | None = None
        self._device_counters: dict[str, Counter] = {}
        self._flights = FlightDecoder()
        self._templates = ClaimTemplates(self.limits.claim_templates)
        self._facts = ClaimFacts()

    def cel_for(self, gates: FeatureGates) -> CelEnvironment:
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
            source = f"{field_name}[{i}]"
            # A claim like one seen before but for its metadata is that one with this metadata
            # (validated, strict mode only): decoded and validated once per template, and
            # found from its text alone when a client writes it as it wrote the template.
            key: str | None = None
            known: o.ResourceClaim | None = None
            docs: list[dict[str, Any]] = []
            text = _utf8(blob, source=source)
            if validate == "strict":
                with _callers_bytes(source):
                    known = self._templates.from_text(text)
            if known is None:
                docs = self._parse_text(text, source=source)
                if validate == "strict" and len(docs) == 1:
                    with _callers_bytes(source):
                        key = self._templates.key(docs[0])
                        known = self._templates.get(key, docs[0], text) if key is not None else None
            decoded: list[o.TypedObject] = [known] if known is not None else self._decode_docs(docs, source=source, validate=validate)
            if not decoded:
                raise InvalidInput("", (), "Required value: a ResourceClaim object (the payload holds no object)", source=source)
            for obj in decoded:
                if not isinstance(obj, o.ResourceClaim):
                    raise InvalidInput(obj.describe(), ("kind",), f'Unsupported value: "{obj.kind}": supported values: "ResourceClaim"', source=source)
                if obj.allocated and not allow_allocated:
                    raise InvalidInput(obj.describe(), ("status", "allocation"), "Forbidden: the claim is already allocated; pass only claims to allocate", source=source)
                if not obj.metadata.name:
                    raise InvalidInput(obj.describe(), ("metadata", "name"), "Required value: name or generateName is required", source=source)
                if obj.ref in seen:
                    raise InvalidInput(obj.describe(), ("metadata", "name"), f"Duplicate value: {shown(obj.ref)}", source=source)
                seen.add(obj.ref)
                if validate != "ignore" and obj is not known:
                    self._validate(obj, source=source)
                    if key is not None:
                        self._templates.put(key, obj, doc=docs[0], text=text)
                claims.append(obj)
        if len(claims) > self.limits.max_claims:
            raise InvalidInput("", (field_name,), f"Too many: {len(claims)}: must have at most {self.limits.max_claims} items")
        return tuple(claims)

    def decode_flight(self, blobs: Sequence[bytes], complete: bool) -> CallerFlight:
        """A call's ``in_flight`` claims (docs/replicas.md): allocated claims, decoded without
        validation (the caller's own earlier answers), remembered by their bytes."""
        if not blobs:
            return CallerFlight((), complete) if complete else NO_FLIGHT
        if len(blobs) > MAX_IN_FLIGHT:
            raise LimitExceeded(f"inFlight: Too many: {len(blobs)}: must have at most {MAX_IN_FLIGHT} items")
        out = []
        for i, blob in enumerate(blobs):
            hit = self._flights.get(blob)
            if hit is None:
                decoded = self._decode_blob(blob, source=f"inFlight[{i}]", validate="ignore")
                if len(decoded) != 1 or not isinstance(decoded[0], o.ResourceClaim):
                    raise InvalidInput("", (), "Invalid value: must be one ResourceClaim", source=f"inFlight[{i}]")
                claim = decoded[0]
                if not claim.allocated:
                    raise InvalidInput(claim.describe(), ("status", "allocation"), "Required value: an in-flight claim carries its allocation", source=f"inFlight[{i}]")
                hit = flight_claim(claim)
                self._flights.put(blob, hit)
            out.append(hit)
        return CallerFlight(tuple(out), complete)

    def _in_flight(self, snap: Snapshot, flight: CallerFlight, claims: Sequence[o.ResourceClaim]) -> ReservationStore | Overlay:
        """What counts as in flight for a call: the replica's reservations, plus the caller's
        in-flight claims (not the call's own) when it sent any."""
        if not flight.claims:
            return self.reservations
        return Overlay(self.reservations, flight.state(snap, excluding=self._not_from_flight(flight, claims)))

    def _not_from_flight(self, flight: CallerFlight, claims: Sequence[o.ResourceClaim]) -> list[str]:
        """The caller's in-flight claims not to count: the call's own, and, for a caller that
        also keeps reservations here, those a reservation already counts (a claim counted
        twice would consume its devices' capacity twice)."""
        out = [c.ref for c in claims]
        if not flight.stateless:
            out.extend(self.reservations.held_claims([c.ref for c in flight.claims]))
        return out

    def _decode_blob(
        self, blob: bytes, *, source: str, decoder: ObjectDecoder | None = None, validate: ValidationMode = "strict"
    ) -> list[o.TypedObject]:
        """Objects of one payload. Whatever goes wrong decoding what a caller sent is that
        caller's invalid input, never a server error."""
        return self._decode_docs(self._parse_text(_utf8(blob, source=source), source=source), source=source, decoder=decoder, validate=validate)

    def _parse_text(self, text: str, *, source: str) -> list[dict[str, Any]]:
        with _callers_bytes(source):
            return parse_documents(text, source=source)

    def _decode_docs(
        self, docs: list[dict[str, Any]], *, source: str, decoder: ObjectDecoder | None = None, validate: ValidationMode = "strict"
    ) -> list[o.TypedObject]:
        dec = decoder or ObjectDecoder(validate=validate)
        with _callers_bytes(source):
            decoded = [dec.decode(doc, source=source) for doc in docs]
            _pass_on_warnings(dec.take_warnings())
            return decoded

    def _validate(self, obj: o.TypedObject, *, source: str) -> None:
        with self._selector_lock:
            if self._selector_check is None:
                self._selector_check = model.default_selector_check()
        errors = model.validate_object(obj, selector_check=self._selector_check)
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

    def solve(self, request: AllocationRequest) -> AllocationOutcome:
        """One per-node solve with the engine's allocator and metrics (gang placement's
        per-node solves go through here)."""
        return self._solve(request)

    def device_cache(self) -> DeviceParseCache:
        """Parsed devices shared across solves (``model.pools.DeviceParseCache``)."""
        return self._devices

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
        in_flight: ReservationStore | Overlay | HeldNow | None = None,
    ) -> tuple[AllocationRequest, int | None]:
        """The core's request for ``node`` and the reservation version it was built against
        (None without reservations): a reservation made from the answer is refused if
        allocations in flight changed since (``ReservationStore.reserve(solved_at=...)``)."""
        index = snap.index
        extra = None
        version = None
        if use_reservations:
            held = in_flight or self.reservations
            version = held.version
            view = index.view(node)
            pools = list(view.pools) if view else []
            pools.extend(index.shared_pools)
            extra = held.state(pools)
        request = AllocationRequest(
            claims=claims,
            node=index.nodes_by_name.get(node) or snap.inventory.node(node),
            inventory=index.node_inventory(node, extra),
            gates=self.gates_for(opts.feature_gates),
            allocator=opts.allocator,
            time_limit=time_limit,
            policy=opts.policy,
            device_cache=self._devices,
        )
        return request, version

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
        flight: CallerFlight = NO_FLIGHT,
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
            held = None if inline else self._in_flight(snap, flight, claims)
            request, solved_at = self._node_request(snap, claims, node, opts, time_limit=self.time_limit(deadline), use_reservations=not inline, in_flight=held)
            outcome = self._solve(request)
            if not outcome.allocated:
                broken = None if inline else model.invalid_pools_error(snap.index, node)
                if broken is not None:
                    raise broken
                return AllocateAnswer(node, False, tuple(ClaimAnswer(c, None) for c in claims), 0, outcome.reason or "cannot allocate all claims", outcome.stats, snap.generation)
            self._verify(request, outcome)
            reservation = None
            if reserve:
                try:
                    reservation = self._reserve(snap, request, outcome, ttl=ttl, pod="", solved_at=solved_at, caller=caller, flight=flight)
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
        counters = self._device_counters
        for result in outcome.results:
            for r in (result.devices.results or []) if result.devices else []:
                name = r.driver if r.driver in known else "other"
                counter = counters.get(name)
                if counter is None:  # the labelled child, looked up once per driver
                    counter = counters[name] = self.metrics.allocated_devices.labels(driver_name=name)
                counter.inc()

    # --- Reserve ----------------------------------------------------------------------------

    def _reserve(
        self, snap: Snapshot, request: AllocationRequest, outcome: AllocationOutcome, *, ttl: float, pod: str, solved_at: int | None = None,
        caller: str = "", flight: CallerFlight = NO_FLIGHT,
    ) -> Reservation:
        state = AllocatedState.from_results(outcome.results)
        index = snap.index
        if flight.stateless:
            return self._check_free(snap, request, outcome, state, flight, pod=pod)
        # The caller's in-flight claims count as taken beside the snapshot's.
        theirs = flight.state(snap, excluding=self._not_from_flight(flight, request.claims))

        def validate(others: AllocatedState) -> None:
            # The allocation must still be valid with every other in-flight allocation counted.
            if not (others.devices or others.shared or others.capacity or theirs.devices or theirs.shared or theirs.capacity):
                return
            view = index.view(request.node.name)
            pools = list(view.pools) if view else []
            pools.extend(index.shared_pools)
            inv = index.node_inventory(request.node.name, self.reservations.state(pools).merge(theirs))
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
            taken=index.allocated.merge(theirs) if flight.claims else index.allocated,
            latest_taken=lambda: self.source.snapshot().index.allocated,
            ttl=ttl,
            pod=pod,
            validate=validate,
            solved_at=solved_at,
            caller=caller,
        )

    def _check_free(
        self, snap: Snapshot, request: AllocationRequest, outcome: AllocationOutcome, state: AllocatedState, flight: CallerFlight, *, pod: str
    ) -> Reservation:
        """Stateless replicas: the allocation must be free of the snapshot's claims (other than
        these claims themselves), the caller's other in-flight claims and other callers'
        reservations; nothing is stored (the caller holds it), so the answer has an empty id."""
        refs = {c.ref for c in request.claims}
        index = snap.index
        own = [c for c in snap.inventory.claims if c.ref in refs and c.allocated]
        taken = subtract(index.allocated, own) if own else index.allocated
        theirs = flight.state(snap, excluding=refs)
        view = index.view(request.node.name)
        pools = list(view.pools) if view else []
        pools.extend(index.shared_pools)
        others = self.reservations.state(pools)
        for dev in sorted(state.devices):
            if dev in taken.devices:
                raise ReservationConflict(f"device {dev} is already allocated")
            if dev in theirs.devices:
                raise ReservationConflict(f"device {dev} is in flight for another of the caller's claims")
            if dev in others.devices:
                raise ReservationConflict(f"device {dev} is already reserved")
        # Shares, capacity and counters: the independent check against everything in use.
        shown_state = index.node_inventory(request.node.name)
        if own:
            shown_state = replace(shown_state, extra_allocated=subtract(shown_state.extra_allocated, own))
        inv = replace(shown_state, extra_allocated=shown_state.extra_allocated.merge(theirs).merge(others))
        try:
            self._verify(replace(request, inventory=inv), outcome)
        except CheckFailed as err:
            raise ReservationConflict(f"the allocation conflicts with one in use or in flight: {err}") from err
        claims = tuple((c.ref, c.metadata.uid or "") for c in request.claims)
        return Reservation("", request.node.name, claims, state, self.clock(), pod)

    def reserve(
        self, claim_blobs: Sequence[bytes], node: str, *, ttl: float = 0.0, pod: str = "", caller: str = "", flight: CallerFlight = NO_FLIGHT
    ) -> Reservation:
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
        request, _ = self._node_request(snap, bare, node, SolveOptions(), time_limit=self.limits.default_solve_seconds, use_reservations=False)
        stats = SolveStats(allocator="caller", status="GIVEN", wall_seconds=0.0)
        outcome = AllocationOutcome(True, results, 0, stats)
        if not flight.stateless:
            try:
                self._verify(request, outcome)
            except CheckFailed as err:
                raise ReservationConflict(f"the allocation is not valid on node {node}: {err}") from err
        return self._reserve(snap, request, outcome, ttl=ttl, pod=pod, caller=caller, flight=flight)

    def unreserve(self, reservation_id: str, claims: Sequence[str]) -> int:
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
        flight: CallerFlight = NO_FLIGHT,
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
            if reserve and not flight.stateless and attempt == 0:
                # The caller asks again for claims it holds: its own earlier hold must not keep
                # their devices from them (it would be refused until it expired).
                self.reservations.supersede([c.ref for c in claims], caller, pod)
            answer, request, outcome, solved_at = self._schedule_once(
                snap, claims, nodes, opts, wanted=wanted, deadline=deadline, in_flight=self._in_flight(snap, flight, claims)
            )
            if not reserve or request is None or outcome is None:
                return answer
            try:
                reservation = self._reserve(snap, request, outcome, ttl=ttl, pod=pod, solved_at=solved_at, caller=caller, flight=flight)
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
        in_flight: ReservationStore | Overlay | None = None,
    ) -> tuple[ScheduleAnswer, AllocationRequest | None, AllocationOutcome | None, int | None]:
        """Node choice (``model.choose_node``) on one snapshot: the engine supplies the solves
        (with its deadline, reservations and metrics), the verdict cache and the clock."""
        start = self.clock()
        visited_at = self.reservations.version
        # The visit reads the reservations once (not under the store's lock for every node).
        held = in_flight if in_flight is not None and in_flight is not self.reservations else self.reservations.now()

        def attempt(node: str, answer: Callable[[AllocationRequest], AllocationOutcome] | None = None) -> NodeAttempt | None:
            try:
                request, version = self._node_request(snap, claims, node, opts, time_limit=self.time_limit(deadline), use_reservations=True, in_flight=held)
            except DeadlineExceeded:
                return None
            # A known answer fits the state the visit keyed, which is this request's only while
            # no reservation changed since the call started (the store's own count: an overlay
            # of a caller's in-flight claims keeps the count it was made at); else solve.
            reusable = answer is not None and self.reservations.version == visited_at
            return NodeAttempt(request, answer(request) if answer is not None and reusable else self._solve(request), version)

        def expired() -> bool:
            assert deadline is not None
            return self.clock() >= deadline - self.limits.deadline_margin

        options = NodeChoiceOptions(allocator=opts.allocator, policy=opts.policy, gates=self.gates_for(opts.feature_gates), wanted=wanted)
        # Nodes equal up to names and attributes the claims cannot read share one solve.
        facts = self._facts.get(
            claims, snap.index.inventory.classes, allocator=options.allocator, policy=options.policy, gates=options.gates,
            compile=self.cel_for(options.gates).compile, spec_text=self._templates.spec_text,
        )
        try:
            choice = model.choose_node(
                claims,
                candidates,
                index=snap.index,
                options=options,
                attempt=attempt,
                in_flight=held,
                cache=self._cache,
                expired=expired if deadline is not None else None,
                memo=self._flight_order,
                generation=snap.generation,
                quote=shown,
                reads=facts.reads,
                share_states=self.share_states,
                answers=self._answers,
                reuse=attempt,
                key_of_claims=facts.key,
            )
        except SolveTimeout as err:
            raise DeadlineExceeded(str(err)) from None
        stats = choice.stats
        stats.wall_seconds = self.clock() - start
        self._observe_schedule(stats)
        chosen = choice.attempt
        if not choice.node or chosen is None:
            answer = ScheduleAnswer("", tuple(ClaimAnswer(c, None) for c in claims), 0, choice.verdicts, stats, None, choice.reason, snap.generation)
            return answer, None, None, None
        self._verify(chosen.request, chosen.outcome)
        self._count_devices(chosen.outcome)
        answers = tuple(ClaimAnswer(c, r) for c, r in zip(claims, chosen.outcome.results, strict=True))
        answer = ScheduleAnswer(choice.node, answers, chosen.outcome.score, choice.verdicts, stats, chosen.outcome.stats, "", snap.generation)
        return answer, chosen.request, chosen.outcome, chosen.tag

    def _observe_schedule(self, stats: ScheduleStats) -> None:
        if self._node_phases is None:  # the labelled children, looked up once
            h = self.metrics.schedule_nodes
            self._node_phases = tuple(h.labels(phase=p) for p in ("candidates", "evaluated", "pruned", "feasible", "solved"))
        values = (stats.nodes_total, stats.nodes_evaluated, stats.nodes_pruned, stats.nodes_feasible, stats.solves)
        for child, value in zip(self._node_phases, values, strict=True):
            child.observe(value)

    # --- Explain ----------------------------------------------------------------------------

    def explain(
        self,
        claim_blobs: Sequence[bytes],
        node: str,
        *,
        objects: Sequence[bytes] = (),
        opts: SolveOptions = SolveOptions(),
        deadline: float | None = None,
        flight: CallerFlight = NO_FLIGHT,
    ) -> ExplainAnswer:
        if not node:
            raise InvalidInput("", ("node",), "Required value: the node to explain")
        claims = self.decode_claims(claim_blobs, validate=opts.validate)
        inline = bool(objects)
        snap = self.inline_snapshot(objects, validate=opts.validate) if inline else self.current()
        check_admin_access(claims, snap.namespaces)
        if node not in snap.index.views and node not in snap.index.nodes_by_name:
            raise NotFound(node_not_found(node))
        held = None if inline else self._in_flight(snap, flight, claims)
        request, _ = self._node_request(snap, claims, node, opts, time_limit=self.time_limit(deadline), use_reservations=not inline, in_flight=held)
        holders: dict[DeviceID, str] = {d: f"claim {ref}" for d, ref in snap.index.holders().items()}
        if not inline:
            holders.update({d: f"{model.RESERVED_HOLDER} for claim {refs}" for d, refs in self.reservations.holders().items()})
            for c in flight.claims:
                holders.update({d: f"{model.RESERVED_HOLDER} for claim {c.ref} (in flight)" for d in c.state.devices if d not in holders})
        return model.explain_node(request, cel=self.cel_for(request.gates), holders=holders, solve=self._solve)

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
        if index is not None:
            self.metrics.inventory_index_duration.labels(layout="carried" if index.carried else "laid_out").observe(snap.index_seconds)
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


def placed_flight(answer: ScheduleAnswer) -> tuple[FlightClaim, ...]:
    """The allocations a placed answer chose, as in-flight claims: what a stateless caller
    adds to its next call's (ScheduleBatch does it for the batch's later items)."""
    placed = [(c.claim, c.result) for c in answer.claims if c.result is not None]
    if not placed:
        return ()
    claims, results = zip(*placed, strict=True)
    return tuple(flight_claim(c) for c in _with_results(claims, results))


def _with_results(claims: Sequence[o.ResourceClaim], results: Sequence[o.AllocationResult]) -> list[o.ResourceClaim]:
    return [c.model_copy(update={"status": o.ResourceClaimStatus(allocation=r)}) for c, r in zip(claims, results, strict=True)]


MAX_POD_REF = 63 + 1 + 253
"""``namespace/name`` of a pod at most (a DNS label, a DNS subdomain)."""


def _check_pod(pod: str) -> None:
    # Kept with each reservation: a caller must not make reservations arbitrarily large.
    if len(pod) > MAX_POD_REF:
        raise InvalidInput("", ("pod",), f"Too long: may not be more than {MAX_POD_REF} bytes")


def cel_features_key(gates: FeatureGates) -> tuple[bool, bool]:
    """The gates a CEL environment depends on (those ``model.default_cel`` reads)."""
    return (gates.consumable_capacity, gates.list_type_attributes)


def shown_detail(detail: str) -> str:
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
