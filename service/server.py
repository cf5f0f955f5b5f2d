"""The gRPC server: the ``drasolver.v1.AllocationService`` servicer, health, reflection.

Servicer methods stay short: convert the request, call the engine with the caller's deadline,
convert the answer. :func:`failure` maps the engine's exceptions to status codes in one place
(for whole calls and for ScheduleBatch items); :func:`_handle` aborts with them and records
latency and status-code metrics. Bounded concurrency comes from gRPC itself
(``maximum_concurrent_rpcs``): calls beyond the bound get RESOURCE_EXHAUSTED at once instead of
queueing without limit. A bad request only ever fails itself.

Whatever a caller sends is answered with a documented code (docs/limits-and-errors.md): the
request bytes are parsed here rather than by gRPC (which answers INTERNAL for bytes that are not
the message), and every message and detail sent back is clipped, so a huge or malformed value
in a request can neither become a huge status nor fail to encode.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import grpc
from google.protobuf import message as pb_message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from dra_solver.model import ALLOCATORS, AllocationError, InvalidInput, InvalidInputs, SolveTimeout
from dra_solver.service import engine as e
from dra_solver.service import gc_pauses, groups, messages, python_cpu
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.gen.drasolver.v1 import allocation_pb2_grpc as pb_grpc
from dra_solver.service.inflight import CallerFlight, FlightClaim
from dra_solver.service.inventory import Snapshot
from dra_solver.service.metrics import SOLVING_RPCS, MetricsServer
from dra_solver.service.quoting import clip
from dra_solver.service.reservations import ReservationConflict, ReservationLimit

log = logging.getLogger(__name__)

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["AllocationService"].full_name
"""``drasolver.v1.AllocationService``."""

Resp = TypeVar("Resp", bound=pb_message.Message)


@dataclass
class ServerDeps:
    """Everything a server needs; tests build it with their own engine and limits."""

    engine: e.Engine
    max_workers: int = 16
    max_concurrent_rpcs: int | None = 64
    max_message_bytes: int = 64 * 1024 * 1024
    max_streams: int | None = None
    """ScheduleStream calls open at once (each holds a serving thread while it waits for its
    next message); default half of ``max_workers``, so that streams never take every thread."""
    credentials: grpc.ServerCredentials | None = None
    health: health.HealthServicer = field(default_factory=lambda: health.HealthServicer(experimental_non_blocking=True))
    servicer: AllocationServicer | None = None
    """Set by :func:`create_server`."""


MAX_STATUS_MESSAGE = 1024
"""UTF-8 bytes of a status message (grpc-message); longer ones are clipped."""
MAX_VIOLATIONS = 20
"""google.rpc.BadRequest field violations sent at most; the message says how many were left out."""
MAX_VIOLATION_FIELD = 256
MAX_VIOLATION_DESCRIPTION = 512
MAX_DETAILS = 1536
"""UTF-8 bytes of all field violations together. Clients refuse answers whose headers pass
8 KiB (gRPC's default), and would report RESOURCE_EXHAUSTED instead of our code: message
(percent-encoded, at most 3x) plus details (base64, 4/3 x, holding the message again) stay
well under that."""


def _status_message(err: InvalidInput | InvalidInputs) -> str:
    errors = err.errors if isinstance(err, InvalidInputs) else [err]
    shown = "\n".join(clip(str(x), MAX_VIOLATION_DESCRIPTION) for x in errors[:MAX_VIOLATIONS])
    if len(errors) > MAX_VIOLATIONS:
        shown += f"\n... and {len(errors) - MAX_VIOLATIONS} more errors"
    return clip_bytes(shown, MAX_STATUS_MESSAGE)


def clip_bytes(text: str, limit: int) -> str:
    """``text`` (clipped, encodable) whose UTF-8 form is at most ``limit`` bytes."""
    text = clip(text, limit)
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def _bad_request(err: InvalidInput | InvalidInputs) -> Any:
    errors = err.errors if isinstance(err, InvalidInputs) else [err]
    detail = error_details_pb2.BadRequest()
    budget = MAX_DETAILS
    for x in errors[:MAX_VIOLATIONS]:
        where = clip_bytes((f"{x.source}: " if x.source else "") + (f"{x.obj}: " if x.obj else "") + x.field, MAX_VIOLATION_FIELD)
        description = clip_bytes(x.detail, MAX_VIOLATION_DESCRIPTION)
        budget -= len(where.encode()) + len(description.encode())
        if budget < 0:
            break  # the message says how many errors there are
        detail.field_violations.add(field=where, description=description)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=_status_message(err))
    status.details.add().Pack(detail)
    return status


@dataclass(frozen=True, slots=True)
class Failure:
    """How a call (or a ScheduleBatch item) that raised ends: its code, the ``outcome`` metric
    label and the status sent (message clipped; a BadRequest detail for INVALID_ARGUMENT)."""

    code: grpc.StatusCode
    outcome: str
    status: Any  # google.rpc.Status


def failure(rpc: str, err: Exception) -> Failure:
    """The one place mapping the engine's exceptions to status codes (docs/limits-and-errors.md)."""
    def ended(code: grpc.StatusCode, outcome: str, message: str) -> Failure:
        return Failure(code, outcome, status_pb2.Status(code=code.value[0], message=clip_bytes(message, MAX_STATUS_MESSAGE)))

    if isinstance(err, (InvalidInput, InvalidInputs)):
        return Failure(grpc.StatusCode.INVALID_ARGUMENT, "invalid", _bad_request(err))
    if isinstance(err, UnicodeError):
        # Only text a caller sent can hold lone surrogates (JSON "\ud800"): it cannot be
        # encoded into an answer.
        return ended(grpc.StatusCode.INVALID_ARGUMENT, "invalid", f"a string in the request is not valid Unicode text: {err}")
    if isinstance(err, e.NotFound):
        return ended(grpc.StatusCode.NOT_FOUND, "invalid", str(err))
    if isinstance(err, AllocationError):
        return ended(grpc.StatusCode.FAILED_PRECONDITION, "error", str(err))
    if isinstance(err, ReservationConflict):
        return ended(grpc.StatusCode.ABORTED, "conflict", str(err))
    if isinstance(err, (e.DeadlineExceeded, SolveTimeout)):
        return ended(grpc.StatusCode.DEADLINE_EXCEEDED, "timeout", str(err) or "the deadline passed before an answer was found")
    if isinstance(err, e.NotReady):
        return ended(grpc.StatusCode.UNAVAILABLE, "error", str(err))
    if isinstance(err, (e.LimitExceeded, ReservationLimit)):
        return ended(grpc.StatusCode.RESOURCE_EXHAUSTED, "limited", str(err))
    if isinstance(err, e.CheckFailed):
        log.error("%s: answer withheld: %s", rpc, clip_bytes(str(err), MAX_STATUS_MESSAGE))
        return ended(grpc.StatusCode.INTERNAL, "error", f"internal error: the answer failed validation and was withheld: {err}")
    log.exception("%s failed", rpc)
    return ended(grpc.StatusCode.INTERNAL, "error", f"internal error: {type(err).__name__}: {err}")


BATCH_ENVELOPE_BYTES = 16
"""Bytes a ScheduleBatchResult adds to the answer besides its own (tag and length), with room
to spare; also kept free for the answer's own envelope."""


def _unanswered(count: int, limit: int) -> list[Any]:
    """The results of the items a ScheduleBatch did not answer because its answer was full."""
    status = status_pb2.Status(
        code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
        message=f"not answered: the batch's answer reached the {limit}-byte message limit before this request; nothing was "
        "reserved for it; send it again (in a smaller batch, or with chosen_verdict_only)",
    )
    return [pb.ScheduleBatchResult(status=status) for _ in range(count)]


def caller_identity(context: grpc.ServicerContext, *, tls: bool = True) -> str:
    """Who is calling, for per-caller limits: the client certificate's common name under mTLS,
    else the peer's address without its port (one host = one caller). ``tls`` False: the
    server has no TLS, so no certificate to read (the auth context is a measurable share of a
    whole-GPU Schedule's time)."""
    names: list[bytes] = []
    try:
        found: Any = context.auth_context().get("x509_common_name") if tls else None
        names = list(found or [])
    except Exception:  # no auth context outside TLS on some transports
        names = []
    if names:
        return "cn:" + clip(bytes(names[0]).decode("utf-8", "replace"), 256)
    peer = context.peer() or ""
    if peer.startswith(("ipv4:", "ipv6:")):
        peer = peer.rsplit(":", 1)[0]
    return clip(peer, 256)


def allocator_label(rpc: str, allocator: str) -> str:
    """The ``allocator`` metric label: only known allocator names, never what a caller typed."""
    if rpc not in SOLVING_RPCS:
        return "none"
    if not allocator:
        return "cpsat"
    return allocator if allocator in ALLOCATORS else "invalid"


class AllocationServicer(pb_grpc.AllocationServiceServicer):
    def __init__(self, engine: e.Engine, *, tls: bool = True, max_message_bytes: int = 64 * 1024 * 1024, max_streams: int = 8) -> None:
        self.engine = engine
        self.max_streams = max_streams
        self._streams = 0
        self.metrics = engine.metrics
        self.tls = tls
        """Whether callers connect over TLS (and may present a certificate naming them)."""
        self.max_message_bytes = max_message_bytes
        """The largest answer the server may send (a ScheduleBatch stops filling its answer there)."""
        self._active = 0
        self._active_lock = threading.Lock()

    @property
    def active(self) -> int:
        """Calls being handled now (shutdown tells whether any outlived the grace period)."""
        return self._active

    # Each method: convert, call the engine (deadline from the caller), convert back.

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        def run(deadline: float | None) -> tuple[pb.AllocateResponse, str]:
            a = self.engine.allocate(
                list(request.claims), request.node, objects=list(request.objects), opts=messages.solve_options(request.options),
                reserve=request.reserve, ttl=request.reservation_ttl_seconds, deadline=deadline, caller=caller_identity(context, tls=self.tls),
                flight=self.engine.decode_flight(list(request.in_flight), request.in_flight_complete),
            )
            return messages.allocate_response(a, now=self.engine.clock()), "allocated" if a.allocated else "unsatisfiable"

        return self._handle("Allocate", request.options.allocator, context, run)

    def Schedule(self, request: pb.ScheduleRequest, context: grpc.ServicerContext) -> pb.ScheduleResponse:
        def run(deadline: float | None) -> tuple[pb.ScheduleResponse, str]:
            flight = self.engine.decode_flight(list(request.in_flight), request.in_flight_complete)
            _, response, outcome = self._schedule(request, deadline, caller_identity(context, tls=self.tls), flight)
            return response, outcome

        return self._handle("Schedule", request.options.allocator, context, run)

    def _schedule(
        self, request: pb.ScheduleRequest, deadline: float | None, caller: str, flight: CallerFlight
    ) -> tuple[e.ScheduleAnswer, pb.ScheduleResponse, str]:
        """A Schedule request answered (a call's, or a ScheduleBatch item's): the engine's
        answer, the message and the ``outcome`` metric label."""
        a = self.engine.schedule(
            list(request.claims), list(request.nodes), opts=messages.solve_options(request.options), reserve=request.reserve,
            ttl=request.reservation_ttl_seconds, wanted=request.feasible_nodes_wanted, pod=request.pod, deadline=deadline,
            caller=caller, flight=flight,
        )
        response = messages.schedule_response(a, now=self.engine.clock(), chosen_verdict_only=request.chosen_verdict_only)
        return a, response, "allocated" if a.node else "unsatisfiable"

    def Reserve(self, request: pb.ReserveRequest, context: grpc.ServicerContext) -> pb.ReserveResponse:
        def run(deadline: float | None) -> tuple[pb.ReserveResponse, str]:
            flight = self.engine.decode_flight(list(request.in_flight), request.in_flight_complete)
            r = self.engine.reserve(list(request.claims), request.node, ttl=request.ttl_seconds, pod=request.pod, caller=caller_identity(context, tls=self.tls), flight=flight)
            return pb.ReserveResponse(reservation=messages.reservation(r, now=self.engine.clock())), "reserved"

        return self._handle("Reserve", "", context, run)

    def Unreserve(self, request: pb.UnreserveRequest, context: grpc.ServicerContext) -> pb.UnreserveResponse:
        def run(deadline: float | None) -> tuple[pb.UnreserveResponse, str]:
            n = self.engine.unreserve(request.reservation_id, list(request.claims))
            return pb.UnreserveResponse(released=n), "released"

        return self._handle("Unreserve", "", context, run)

    def Explain(self, request: pb.ExplainRequest, context: grpc.ServicerContext) -> pb.ExplainResponse:
        def run(deadline: float | None) -> tuple[pb.ExplainResponse, str]:
            x = self.engine.explain(list(request.claims), request.node, objects=list(request.objects),
                                    opts=messages.solve_options(request.options), deadline=deadline,
                                    flight=self.engine.decode_flight(list(request.in_flight), request.in_flight_complete))
            return messages.explain_response(x), "allocatable" if x.allocatable else "explained"

        return self._handle("Explain", request.options.allocator, context, run)

    def ScheduleGroup(self, request: pb.ScheduleGroupRequest, context: grpc.ServicerContext) -> pb.ScheduleGroupResponse:
        def run(deadline: float | None) -> tuple[pb.ScheduleGroupResponse, str]:
            opts = messages.solve_options(request.options)
            spec = groups.decode_group(self.engine, request, opts=opts, max_pods=self.engine.limits.max_group_pods)
            a = groups.schedule_group(
                self.engine, spec, objects=list(request.objects), opts=opts, reserve=request.reserve,
                ttl=request.reservation_ttl_seconds, deadline=deadline, caller=caller_identity(context, tls=self.tls),
            )
            return messages.group_response(a, now=self.engine.clock()), "allocated" if a.outcome.placed else "unsatisfiable"

        return self._handle("ScheduleGroup", request.options.allocator, context, run)

    def ScheduleBatch(self, request: pb.ScheduleBatchRequest, context: grpc.ServicerContext) -> pb.ScheduleBatchResponse:
        def run(deadline: float | None) -> tuple[pb.ScheduleBatchResponse, str]:
            limit = self.engine.limits.max_batch_items
            if len(request.requests) > limit:
                raise e.LimitExceeded(f"requests: Too many: {len(request.requests)}: must have at most {limit} items")
            caller = caller_identity(context, tls=self.tls)
            earlier: tuple[FlightClaim, ...] = ()  # what the batch's items placed with reserve, for stateless items
            results: list[pb.ScheduleBatchResult] = []
            room = self.max_message_bytes - BATCH_ENVELOPE_BYTES
            for done, item in enumerate(request.requests):
                if not context.is_active():
                    break  # the caller is gone: nobody would read the rest
                result, placed = self._batch_item(item, deadline, caller, earlier)
                room -= result.ByteSize() + BATCH_ENVELOPE_BYTES
                if room < 0:
                    # Unverdicted items could make an answer of gigabytes (1,024 pods that fit
                    # nowhere on 5,000 nodes, each with a verdict per node): stop here, hold
                    # nothing for an answer that is not sent, and say so for the rest.
                    self._give_back(result)
                    results.extend(_unanswered(len(request.requests) - done, self.max_message_bytes))
                    break
                earlier = placed
                results.append(result)
            return pb.ScheduleBatchResponse(results=results), "answered"

        return self._handle("ScheduleBatch", "", context, run)

    def _batch_item(
        self, item: pb.ScheduleRequest, deadline: float | None, caller: str, earlier: tuple[FlightClaim, ...], rpc: str = "ScheduleBatch"
    ) -> tuple[pb.ScheduleBatchResult, tuple[FlightClaim, ...]]:
        """One item of a batch (or message of a stream), answered as its own Schedule call
        would be; its metrics are an allocation question's (``rpc`` the batch's or stream's)."""
        start = time.perf_counter()
        outcome = "error"
        warnings: list[str] = []
        token = e.decode_warnings.set(warnings)
        try:
            flight = self.engine.decode_flight(list(item.in_flight), item.in_flight_complete)
            if flight.stateless and earlier:
                flight = replace(flight, claims=(*flight.claims, *earlier))
            a, response, outcome = self._schedule(item, deadline, caller, flight)
            if a.node and item.reserve and flight.stateless:
                earlier = (*earlier, *e.placed_flight(a))
            return pb.ScheduleBatchResult(status=status_pb2.Status(code=code_pb2.OK), response=response, warnings=warnings), earlier
        except Exception as err:
            failed = failure(rpc, err)
            outcome = failed.outcome
            return pb.ScheduleBatchResult(status=failed.status, warnings=warnings), earlier
        finally:
            e.decode_warnings.reset(token)
            self.metrics.allocation_duration.labels(
                rpc=rpc, allocator=allocator_label("Schedule", item.options.allocator), outcome=outcome
            ).observe(time.perf_counter() - start)

    def ScheduleStream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        """Each message answered as its own Schedule call would be when it arrives; nothing
        carries from one message to the next but what reservations hold. The stream is one
        call to the metrics (``grpc_requests``, ``request_duration``); each message is an
        allocation question (``allocation_duration{rpc="ScheduleStream"}``)."""
        start = time.perf_counter()
        with self._active_lock:
            admitted = self._streams < self.max_streams
            if admitted:
                self._streams += 1
        if not admitted:
            self._record("ScheduleStream", "", grpc.StatusCode.RESOURCE_EXHAUSTED, "limited", 0.0)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"too many ScheduleStream calls open: at most {self.max_streams} "
                          "(serve --max-streams); close one, or send Schedule or ScheduleBatch calls")
        done = threading.Event()

        def ended(code: grpc.StatusCode = grpc.StatusCode.CANCELLED, outcome: str = "cancelled") -> None:
            """Once per stream: its slot given back and the call recorded."""
            with self._active_lock:
                if done.is_set():
                    return
                done.set()
                self._streams -= 1
            self._record("ScheduleStream", "", code, outcome, time.perf_counter() - start)

        # Also on the call's end, however it ends: a cancelled stream's generator may be left
        # suspended at a ``yield`` that gRPC never resumes, so its code after the loop may never run.
        if not context.add_callback(ended):  # over already
            ended()
            return
        caller = caller_identity(context, tls=self.tls)
        try:
            for raw in requests:
                with self._counted():
                    answer = self._stream_item(raw, context, caller)
                yield answer
        except grpc.RpcError:  # the caller cancelled or went away while we waited for its next message
            ended()
            return
        except Exception:  # a fault past each message's own handling: gRPC ends the stream UNKNOWN
            ended(grpc.StatusCode.UNKNOWN, "error")
            raise
        # Before the stream's status goes out: a caller that sees its stream end sees it counted.
        # gRPC may report a cancelled stream's end of requests just before the cancellation
        # itself (two events on its polling thread): a moment's wait lets it land, so that a
        # cancel is not counted as a half-close (once per stream, not per message).
        if context.is_active():
            time.sleep(0.002)
        if context.is_active():
            ended(grpc.StatusCode.OK, "answered")
        else:
            ended()

    def _stream_item(self, raw: bytes, context: grpc.ServicerContext, caller: str) -> bytes:
        """One message's answer, serialized."""
        try:
            item = pb.ScheduleRequest.FromString(raw)
        except Exception:  # DecodeError, invalid UTF-8 in a string field, nesting too deep
            self.metrics.allocation_duration.labels(rpc="ScheduleStream", allocator=allocator_label("Schedule", ""), outcome="invalid").observe(0.0)
            return pb.ScheduleBatchResult(status=status_pb2.Status(
                code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message="the message is not a valid drasolver.v1.ScheduleRequest message")).SerializeToString()
        result, _ = self._batch_item(item, self._deadline(context), caller, (), rpc="ScheduleStream")
        answer = result.SerializeToString()
        if len(answer) + BATCH_ENVELOPE_BYTES > self.max_message_bytes:
            # Sending it would end the whole stream (the message limit): fail this message only,
            # holding nothing for an answer that is not sent.
            self._give_back(result)
            return pb.ScheduleBatchResult(status=status_pb2.Status(
                code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                message=f"not answered: the answer would pass the {self.max_message_bytes}-byte message limit; nothing was reserved "
                "for it; send it again with chosen_verdict_only or fewer nodes")).SerializeToString()
        return answer

    def _give_back(self, result: pb.ScheduleBatchResult) -> None:
        """Release what an answer that will not be sent reserved."""
        if result.response.reservation.id:
            with contextlib.suppress(e.NotFound):  # expired already (a tiny ttl)
                self.engine.unreserve(result.response.reservation.id, ())

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """A call being handled, or a stream's message being answered, counts as in flight
        (shutdown's grace, the ``inflight`` gauge); a stream waiting for its next message does not."""
        self.metrics.inflight.inc()
        with self._active_lock:
            self._active += 1
        try:
            yield
        finally:
            with self._active_lock:
                self._active -= 1
            self.metrics.inflight.dec()

    def GetInventory(self, request: pb.GetInventoryRequest, context: grpc.ServicerContext) -> pb.GetInventoryResponse:
        def run(deadline: float | None) -> tuple[pb.GetInventoryResponse, str]:
            return messages.inventory_response(self.engine.inventory_status()), "ok"

        return self._handle("GetInventory", "", context, run)

    # --- the wire: request bytes parsed here, so bytes that are not the message are INVALID_ARGUMENT

    def handlers(self) -> dict[str, Any]:
        methods: dict[str, tuple[Any, Callable[[Any, grpc.ServicerContext], pb_message.Message]]] = {
            "Allocate": (pb.AllocateRequest, self.Allocate),
            "Schedule": (pb.ScheduleRequest, self.Schedule),
            "Reserve": (pb.ReserveRequest, self.Reserve),
            "Unreserve": (pb.UnreserveRequest, self.Unreserve),
            "Explain": (pb.ExplainRequest, self.Explain),
            "GetInventory": (pb.GetInventoryRequest, self.GetInventory),
            "ScheduleGroup": (pb.ScheduleGroupRequest, self.ScheduleGroup),
            "ScheduleBatch": (pb.ScheduleBatchRequest, self.ScheduleBatch),
        }
        handlers = {
            rpc: grpc.unary_unary_rpc_method_handler(self._wire(rpc, request_type, method), request_deserializer=None, response_serializer=None)
            for rpc, (request_type, method) in methods.items()
        }
        handlers["ScheduleStream"] = grpc.stream_stream_rpc_method_handler(self.ScheduleStream, request_deserializer=None, response_serializer=None)
        return handlers

    def _wire(self, rpc: str, request_type: Any, method: Callable[[Any, grpc.ServicerContext], pb_message.Message]) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def handle(raw: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                request = request_type.FromString(raw)
            except Exception:  # DecodeError, invalid UTF-8 in a string field, nesting too deep
                self._record(rpc, "", grpc.StatusCode.INVALID_ARGUMENT, "invalid", 0.0)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {request_type.DESCRIPTOR.full_name} message")
            out: bytes = method(request, context).SerializeToString()
            return out

        return handle

    # --- one place for deadlines, status codes and metrics ---------------------------------

    def _handle(self, rpc: str, allocator: str, context: grpc.ServicerContext, run: Callable[[float | None], tuple[Resp, str]]) -> Resp:
        start = time.perf_counter()
        code = grpc.StatusCode.OK
        outcome = "error"
        warnings: list[str] = []
        warnings_token = e.decode_warnings.set(warnings)
        try:
            with self._counted():
                response, outcome = run(self._deadline(context))
            if warnings:  # options.validate="warn": like the API server's Warning header
                context.set_trailing_metadata(tuple(("warning", w) for w in warnings))
            return response
        except Exception as err:
            if isinstance(err, grpc.RpcError) or type(err).__name__ == "_AbortionError":
                raise
            failed = failure(rpc, err)
            code, outcome = failed.code, failed.outcome
            if failed.status.details:
                context.abort_with_status(rpc_status.to_status(failed.status))
            context.abort(code, failed.status.message)
        finally:
            e.decode_warnings.reset(warnings_token)
            self._record(rpc, allocator, code, outcome, time.perf_counter() - start)
        raise AssertionError("unreachable: abort raises")

    def _deadline(self, context: grpc.ServicerContext) -> float | None:
        remaining = context.time_remaining()
        return None if remaining is None or remaining > 1e9 else self.engine.clock() + remaining

    def _record(self, rpc: str, allocator: str, code: grpc.StatusCode, outcome: str, seconds: float) -> None:
        self.metrics.grpc_requests.labels(grpc_method=rpc, grpc_status_code=code.name).inc()
        if rpc in SOLVING_RPCS:
            self.metrics.allocation_duration.labels(rpc=rpc, allocator=allocator_label(rpc, allocator), outcome=outcome).observe(seconds)
        else:
            self.metrics.request_duration.labels(rpc=rpc, outcome=outcome).observe(seconds)


def create_server(address: str, deps: ServerDeps) -> tuple[grpc.Server, int]:
    """A started server on ``address`` ("HOST:PORT", port 0 = any free port, or "unix:PATH").

    Returns the server and the bound port (0 for unix sockets).
    """
    options = [
        ("grpc.max_receive_message_length", deps.max_message_bytes),
        ("grpc.max_send_message_length", deps.max_message_bytes),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=deps.max_workers, thread_name_prefix="grpc"),
        options=options,
        maximum_concurrent_rpcs=deps.max_concurrent_rpcs,
    )
    servicer = AllocationServicer(
        deps.engine, tls=deps.credentials is not None, max_message_bytes=deps.max_message_bytes,
        max_streams=deps.max_workers // 2 if deps.max_streams is None else deps.max_streams,
    )
    handlers = servicer.handlers()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]
    deps.servicer = servicer
    health_pb2_grpc.add_HealthServicer_to_server(deps.health, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    try:
        port = server.add_secure_port(address, deps.credentials) if deps.credentials else server.add_insecure_port(address)
    except RuntimeError:  # gRPC's "Failed to bind to address ...": the reason went to its log
        port = 0
    if port == 0 and not address.startswith("unix:"):
        raise OSError(f"cannot listen on {address}: the port is in use, or the host is not an address of this machine")
    server.start()
    return server, port


def track_health(deps: ServerDeps) -> Callable[[Snapshot], None]:
    """Listener keeping health in step with the inventory: SERVING only once it is ready."""

    def update(snap: Snapshot) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if snap.ready else health_pb2.HealthCheckResponse.NOT_SERVING
        deps.health.set("", status)
        deps.health.set(SERVICE_NAME, status)

    return update


class Service:
    """Server + inventory + metrics endpoint, started and stopped together.

    :meth:`listen` opens the gRPC and metrics ports at once, reporting NOT_SERVING (gRPC
    health; ``/readyz`` not ready; calls that need the inventory get UNAVAILABLE) until the
    inventory is loaded and indexed; :meth:`load` loads it (or :meth:`load_in_background`,
    so that a large inventory does not keep the ports closed). :meth:`start` does both in
    order, for callers that want a ready service when it returns.
    """

    def __init__(
        self, address: str, deps: ServerDeps, *, metrics_address: str | None = None, metrics_port: int | None = None,
        full_collection_interval: float | None = None, python_cpu: int | None = None,
    ) -> None:
        """``full_collection_interval``: once the inventory is loaded, full garbage collections
        on that clock instead of the collector's own (``service.gc_pauses``; process-wide, so
        only for a process that is this service: ``dra-solver serve``). ``python_cpu``: the
        process's Python threads on that CPU from :meth:`listen` to :meth:`stop`
        (``service.python_cpu``; process-wide too)."""
        self.deps = deps
        self.engine = deps.engine
        self._address = address
        self._metrics_address = metrics_address
        self._metrics_port = metrics_port
        self.server: grpc.Server | None = None
        self.port = 0
        self.metrics_server: Any = None
        self._stopped = threading.Event()
        self._health_update: Callable[[Snapshot], None] | None = None
        self._loader: threading.Thread | None = None
        self._full_collection_interval = full_collection_interval
        self._release_collector: Callable[[], None] | None = None
        self._collector_lock = threading.Lock()
        self._python_cpu = python_cpu
        self._unpin: Callable[[], None] | None = None

    def start(self) -> Service:
        """Listen, then load the inventory (returns once it is loaded, or raises)."""
        self.listen()
        self.load()
        return self

    def listen(self) -> Service:
        """Open the ports; health says NOT_SERVING until the inventory is ready."""
        health_update = track_health(self.deps)
        self._health_update = health_update
        health_update(self.engine.source.snapshot())
        # The engine first (it builds the snapshot's node index), then health: SERVING only once
        # a call can be answered without waiting for the index.
        self.engine.source.add_listener(self._on_snapshot)
        self.engine.source.add_listener(health_update)
        self.engine.reservations.on_change = self._reservation_event
        self.server, self.port = create_server(self._address, self.deps)
        if self._python_cpu is not None:
            # After the server starts its polling thread: it and the serving threads it starts
            # later are pinned; gRPC's C threads, started with the server, are not.
            self._unpin = python_cpu.pin_python_threads(self._python_cpu)
            log.info("python threads pinned to CPU %d", self._python_cpu)
        if self._metrics_port is not None:
            self.metrics_server = MetricsServer(
                self.engine.metrics, address=self._metrics_address or "127.0.0.1", port=self._metrics_port, readiness=self._readiness
            )
        return self

    def load(self) -> None:
        """Start the inventory source (a file source loads here; raises on bad content)."""
        assert self._health_update is not None, "listen() first"
        self.engine.source.start()
        snap = self.engine.source.snapshot()
        if snap.ready:
            self._on_snapshot(snap)
            self._health_update(snap)
        # The loaded inventory lives as long as its snapshot; keep the cyclic GC from rescanning
        # its millions of objects on every collection (they are still freed by refcounting).
        gc.collect()
        gc.freeze()
        if self._full_collection_interval is not None:
            with self._collector_lock:
                if self._release_collector is None and not self._stopped.is_set():
                    self._release_collector = gc_pauses.hold_full_collections(self._full_collection_interval)

    def load_in_background(self, on_failed: Callable[[BaseException], None]) -> None:
        """:meth:`load` on an ``inventory-load`` thread; ``on_failed`` gets what it raised."""

        def run() -> None:
            try:
                self.load()
            except BaseException as err:  # reported to the caller, who decides to exit
                if not self._stopped.is_set():
                    on_failed(err)

        self._loader = threading.Thread(target=run, name="inventory-load", daemon=True)
        self._loader.start()

    def _on_snapshot(self, snap: Snapshot) -> None:
        first = snap.ready and not self._indexed
        started = time.monotonic()
        self.engine.on_snapshot(snap)
        if first:
            self._indexed = True
            log.info("inventory: indexed %s nodes in %.1fs; serving", f"{len(snap.index.node_names):,}", time.monotonic() - started)

    _indexed = False

    def _readiness(self) -> str | None:
        if self._stopped.is_set():
            return "shutting down"
        return None if self.engine.source.snapshot().ready else "the inventory is not loaded yet"

    def _reservation_event(self, event: str, count: int) -> None:
        m = self.engine.metrics
        m.reservation_events.labels(status=event).inc(count)
        m.reservations_in_flight.set(self.engine.reservations.count_unlocked())

    def stop(self, grace: float = 5.0) -> bool:
        """Graceful: report NOT_SERVING, stop accepting, let in-flight calls finish for at most
        ``grace`` seconds, then cancel them. Never waits much longer than ``grace``, even for a
        call stuck in Python code (cancelling cannot interrupt it); returns False when such a
        call is still running (the process should then exit without waiting for it)."""
        if self._stopped.is_set():
            return True
        self._stopped.set()
        self.deps.health.enter_graceful_shutdown()
        drained = True
        if self.server is not None:
            done = self.server.stop(grace)
            done.wait(grace + 1.0)
            servicer = self.deps.servicer
            drained = servicer is None or servicer.active == 0
        self.engine.source.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        with self._collector_lock:
            release, self._release_collector = self._release_collector, None
        if release is not None:
            release()
        unpin, self._unpin = self._unpin, None
        if unpin is not None:
            unpin()
        return drained

    def wait(self) -> None:
        self._stopped.wait()
