"""A small Python client for the dra-solver gRPC service.

    from dra_solver.service.client import Client

    with Client("127.0.0.1:50051") as solver:
        answer = solver.schedule([claim_dict], reserve=True)
        if answer.node:
            claims = solver.with_allocations([claim_dict], answer)   # write these to the API

Claims and inventory objects may be given as dicts (the API's JSON form), JSON bytes/str, or
``model.objects`` instances. Errors surface as ``grpc.RpcError`` with the server's status code
and message (``err.code()``, ``err.details()``).
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.gen.drasolver.v1 import allocation_pb2_grpc as pb_grpc
from dra_solver.service.tls import channel_credentials

ObjectLike = bytes | str | Mapping[str, Any] | Any


def encode(obj: ObjectLike) -> bytes:
    """JSON bytes of an API object given as dict, JSON text or a pydantic model."""
    if isinstance(obj, bytes):
        return obj
    if isinstance(obj, str):
        return obj.encode()
    if isinstance(obj, Mapping):
        return json.dumps(obj, separators=(",", ":")).encode()
    to_api = getattr(obj, "to_api", None)
    if callable(to_api):
        return json.dumps(to_api(), separators=(",", ":")).encode()
    raise TypeError(f"cannot encode {type(obj).__name__} as a Kubernetes object")


def _as_dict(obj: ObjectLike) -> dict[str, Any]:
    value = json.loads(encode(obj))
    if not isinstance(value, dict):
        raise TypeError("expected one JSON object")
    return value


class Client:
    def __init__(
        self,
        target: str,
        *,
        timeout: float | None = 30.0,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        server_name: str | None = None,
        channel: grpc.Channel | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """``credentials``: TLS credentials already made from the files (``tls.channel_credentials``),
        used instead of reading ``tls_ca``/``tls_cert``/``tls_key`` again."""
        self.target = target
        self.timeout = timeout
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if channel is None:
            if credentials is None and (tls_ca or tls_cert or tls_key):  # a key alone is refused, not ignored
                credentials = channel_credentials(ca=tls_ca, cert=tls_cert, key=tls_key)
            if credentials is not None:
                channel = grpc.secure_channel(target, credentials, options=options)
            else:
                channel = grpc.insecure_channel(target, options=options)
        self.channel = channel
        self.stub = pb_grpc.AllocationServiceStub(channel)  # type: ignore[no-untyped-call]
        self._health = health_pb2_grpc.HealthStub(channel)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout if timeout is None else timeout

    @staticmethod
    def _options(allocator: str, policy: str, feature_gates: str, validate: str = "") -> pb.SolveOptions:
        return pb.SolveOptions(allocator=allocator, policy=policy, feature_gates=feature_gates, validate=validate)

    def allocate(
        self,
        claims: Sequence[ObjectLike],
        node: str,
        *,
        objects: Iterable[ObjectLike] = (),
        allocator: str = "",
        policy: str = "",
        feature_gates: str = "",
        reserve: bool = False,
        ttl: float = 0.0,
        timeout: float | None = None,
        validate: str = "",
    ) -> pb.AllocateResponse:
        request = pb.AllocateRequest(
            claims=[encode(c) for c in claims],
            node=node,
            objects=[encode(x) for x in objects],
            options=self._options(allocator, policy, feature_gates, validate),
            reserve=reserve,
            reservation_ttl_seconds=ttl,
        )
        response: pb.AllocateResponse = self.stub.Allocate(request, timeout=self._timeout(timeout))
        return response

    def schedule(
        self,
        claims: Sequence[ObjectLike],
        nodes: Iterable[str] = (),
        *,
        allocator: str = "",
        policy: str = "",
        feature_gates: str = "",
        reserve: bool = False,
        ttl: float = 0.0,
        feasible_nodes_wanted: int = 0,
        pod: str = "",
        timeout: float | None = None,
        validate: str = "",
        in_flight: Sequence[ObjectLike] | None = None,
        in_flight_complete: bool | None = None,
        chosen_verdict_only: bool = False,
    ) -> pb.ScheduleResponse:
        """``in_flight``: every allocated claim this caller has in flight (docs/replicas.md);
        given (even empty), no replica keeps a reservation for the call, unless
        ``in_flight_complete`` is False (then the replica also holds what ``reserve`` asks).
        ``chosen_verdict_only``: a placed answer lists only the chosen node's verdict."""
        request = self.schedule_request(
            claims, nodes, allocator=allocator, policy=policy, feature_gates=feature_gates, reserve=reserve, ttl=ttl,
            feasible_nodes_wanted=feasible_nodes_wanted, pod=pod, validate=validate, in_flight=in_flight,
            in_flight_complete=in_flight_complete, chosen_verdict_only=chosen_verdict_only,
        )
        response: pb.ScheduleResponse = self.stub.Schedule(request, timeout=self._timeout(timeout))
        return response

    def schedule_request(
        self,
        claims: Sequence[ObjectLike],
        nodes: Iterable[str] = (),
        *,
        allocator: str = "",
        policy: str = "",
        feature_gates: str = "",
        reserve: bool = False,
        ttl: float = 0.0,
        feasible_nodes_wanted: int = 0,
        pod: str = "",
        validate: str = "",
        in_flight: Sequence[ObjectLike] | None = None,
        in_flight_complete: bool | None = None,
        chosen_verdict_only: bool = False,
    ) -> pb.ScheduleRequest:
        """The request :meth:`schedule` sends, for :meth:`schedule_batch`."""
        return pb.ScheduleRequest(
            claims=[encode(c) for c in claims],
            nodes=list(nodes),
            options=self._options(allocator, policy, feature_gates, validate),
            reserve=reserve,
            reservation_ttl_seconds=ttl,
            feasible_nodes_wanted=feasible_nodes_wanted,
            pod=pod,
            in_flight=[encode(c) for c in in_flight or ()],
            in_flight_complete=in_flight is not None if in_flight_complete is None else in_flight_complete,
            chosen_verdict_only=chosen_verdict_only,
        )

    def schedule_batch(self, requests: Sequence[pb.ScheduleRequest], *, timeout: float | None = None) -> list[pb.ScheduleBatchResult]:
        """Several Schedule requests in one call (docs/grpc-api.md#batches), answered in order;
        one result per request, each with its own status (``status.code`` 0 = answered)."""
        response: pb.ScheduleBatchResponse = self.stub.ScheduleBatch(pb.ScheduleBatchRequest(requests=list(requests)), timeout=self._timeout(timeout))
        return list(response.results)

    def schedule_stream(self, *, timeout: float | None = None) -> ScheduleStream:
        """One ScheduleStream call kept open (docs/grpc-api.md#streams): ``stream.schedule(request)``
        sends one Schedule request and returns its result, as :meth:`schedule_batch` gives one;
        ``stream.send``/``stream.receive`` keep several in flight (answered in the order sent).
        ``timeout`` is the whole stream's deadline (default: none). Close it, or use ``with``."""
        return ScheduleStream(self.stub, timeout=timeout)

    def reserve(
        self, claims: Sequence[ObjectLike], node: str, *, ttl: float = 0.0, pod: str = "", timeout: float | None = None,
        in_flight: Sequence[ObjectLike] | None = None,
    ) -> pb.Reservation:
        """Hold allocations: ``claims`` must carry ``status.allocation`` (see with_allocations).
        With ``in_flight`` (as in :meth:`schedule`) only check them: nothing is held."""
        request = pb.ReserveRequest(
            claims=[encode(c) for c in claims], node=node, ttl_seconds=ttl, pod=pod,
            in_flight=[encode(c) for c in in_flight or ()], in_flight_complete=in_flight is not None,
        )
        response: pb.ReserveResponse = self.stub.Reserve(request, timeout=self._timeout(timeout))
        return response.reservation

    def unreserve(self, reservation_id: str = "", *, claims: Iterable[str] = (), timeout: float | None = None) -> int:
        request = pb.UnreserveRequest(reservation_id=reservation_id, claims=list(claims))
        response: pb.UnreserveResponse = self.stub.Unreserve(request, timeout=self._timeout(timeout))
        return int(response.released)

    def explain(
        self,
        claims: Sequence[ObjectLike],
        node: str,
        *,
        objects: Iterable[ObjectLike] = (),
        feature_gates: str = "",
        timeout: float | None = None,
        validate: str = "",
    ) -> pb.ExplainResponse:
        request = pb.ExplainRequest(
            claims=[encode(c) for c in claims],
            node=node,
            objects=[encode(x) for x in objects],
            options=self._options("", "", feature_gates, validate),
        )
        response: pb.ExplainResponse = self.stub.Explain(request, timeout=self._timeout(timeout))
        return response

    def schedule_group(self, request: pb.ScheduleGroupRequest, *, timeout: float | None = None) -> pb.ScheduleGroupResponse:
        """Place a gang whole (``ScheduleGroup``); build the request with :meth:`group_pod`."""
        response: pb.ScheduleGroupResponse = self.stub.ScheduleGroup(request, timeout=self._timeout(timeout))
        return response

    @staticmethod
    def group_pod(
        name: str,
        claims: Sequence[ObjectLike] = (),
        *,
        shared_claims: Iterable[str] = (),
        nodes: Iterable[str] | None = None,
        cpu_millis: int = 0,
        memory_bytes: int = 0,
    ) -> pb.GroupPod:
        """One pod of a ``ScheduleGroupRequest``; ``nodes=None`` = every node is a candidate."""
        return pb.GroupPod(
            name=name,
            claims=[encode(c) for c in claims],
            shared_claims=list(shared_claims),
            nodes=list(nodes or ()),
            nodes_given=nodes is not None,
            cpu_millis=cpu_millis,
            memory_bytes=memory_bytes,
        )

    def inventory(self, *, timeout: float | None = None) -> pb.GetInventoryResponse:
        response: pb.GetInventoryResponse = self.stub.GetInventory(pb.GetInventoryRequest(), timeout=self._timeout(timeout))
        return response

    def health(self, service: str = "", *, timeout: float | None = None) -> str:
        """"SERVING", "NOT_SERVING", ... as the standard health service reports it."""
        response = self._health.Check(health_pb2.HealthCheckRequest(service=service), timeout=self._timeout(timeout))
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

    def wait_ready(self, *, timeout: float = 30.0) -> None:
        """Block until the channel connects and health says SERVING: ``serve`` opens its port
        before its inventory is loaded (raises grpc.FutureTimeoutError)."""
        end = time.monotonic() + timeout
        grpc.channel_ready_future(self.channel).result(timeout=timeout)
        while True:
            try:
                if self.health(timeout=max(0.1, min(5.0, end - time.monotonic()))) == "SERVING":
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() >= end:
                raise grpc.FutureTimeoutError()
            time.sleep(0.05)

    @staticmethod
    def with_allocations(claims: Sequence[ObjectLike], response: pb.AllocateResponse | pb.ScheduleResponse) -> list[dict[str, Any]]:
        """The claims (as dicts) with ``status.allocation`` set from an answer, in order."""
        out = []
        for claim, answer in zip(claims, response.claims, strict=True):
            doc = _as_dict(claim)
            if answer.status == pb.CLAIM_STATUS_ALLOCATED:
                status = dict(doc.get("status") or {})
                status["allocation"] = json.loads(answer.allocation)
                doc["status"] = status
            out.append(doc)
        return out

    @staticmethod
    def devices(response: pb.AllocateResponse | pb.ScheduleResponse) -> list[str]:
        """"claim/request=driver/pool/device" for every device of an answer."""
        out = []
        for answer in response.claims:
            if answer.status != pb.CLAIM_STATUS_ALLOCATED:
                continue
            alloc = json.loads(answer.allocation)
            for r in (alloc.get("devices") or {}).get("results") or []:
                out.append(f"{answer.claim}/{r['request']}={r['driver']}/{r['pool']}/{r['device']}")
        return out


_END = object()


class ScheduleStream:
    """A ScheduleStream call. :meth:`schedule` sends one request and waits for its answer;
    :meth:`send` and :meth:`receive` keep several requests in flight: the server answers them
    one by one in the order sent, each as its own Schedule call would be when it is answered
    (so a later request sees what an earlier one reserved), while the next ones are already on
    their way. Not for several threads at once: give each thread its own stream."""

    def __init__(self, stub: pb_grpc.AllocationServiceStub, *, timeout: float | None = None) -> None:
        self._outgoing: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._call = stub.ScheduleStream(self._requests(), timeout=timeout)
        self._closed = False
        self._pending = 0
        self.unreceived: list[pb.ScheduleBatchResult] = []
        """Answers :meth:`close` read before the stream ended badly (what they reserved is held)."""

    def _requests(self) -> Iterator[pb.ScheduleRequest]:
        while (item := self._outgoing.get()) is not _END:
            yield cast(pb.ScheduleRequest, item)

    def _finish(self) -> None:
        """No more requests, however the stream ends: gRPC's thread that reads them waits for
        the next one until told (a stream dropped without this kept that thread forever)."""
        if not self._closed:
            self._closed = True
            self._outgoing.put(_END)

    @property
    def pending(self) -> int:
        """Requests sent whose answers were not received yet."""
        return self._pending

    def schedule(self, request: pb.ScheduleRequest) -> pb.ScheduleBatchResult:
        """The request's result (``status.code`` 0: ``response`` holds the answer). Raises
        ``grpc.RpcError`` only when the stream itself ended (deadline, cancelled, server gone),
        and ValueError while answers to earlier :meth:`send` calls are still to be received."""
        if self._pending and not self._closed:
            raise ValueError(f"{self._pending} answers to requests sent earlier come first: receive them")
        self.send(request)
        return self.receive()

    def send(self, request: pb.ScheduleRequest) -> None:
        """Sends without waiting for the answer (:meth:`receive` gives answers in the order
        sent). Raises ``grpc.RpcError`` when the stream already ended, as :meth:`receive` would."""
        if self._closed:
            raise ValueError("the stream is closed")
        if self._call.done():  # its deadline passed, or the server ended it: nothing would be answered
            self._finish()
            self._pending = 0
            raise cast(grpc.RpcError, self._call)
        self._outgoing.put(request)
        self._pending += 1

    def receive(self) -> pb.ScheduleBatchResult:
        """The answer to the oldest request sent and not received yet; waits for it."""
        if self._closed:
            raise ValueError("the stream is closed")
        if not self._pending:
            raise ValueError("no request sent is waiting for its answer")
        try:
            result: pb.ScheduleBatchResult = next(self._call)
        except grpc.RpcError:
            self._finish()  # the call is over: close() has nothing left to end or report
            self._pending = 0
            raise
        self._pending -= 1
        return result

    def close(self) -> list[pb.ScheduleBatchResult]:
        """Ends the stream once the server has answered every request sent; returns the answers
        not received yet (what they reserved is held as for any answer). Raises
        ``grpc.RpcError`` if the stream ended badly; the answers read before that are then in
        :attr:`unreceived`."""
        if self._closed:
            return []
        self._finish()
        left: list[pb.ScheduleBatchResult] = []
        try:
            for result in self._call:  # the server ends its side once it has read our end
                left.append(result)
        except grpc.RpcError:
            self.unreceived = left
            raise
        finally:
            self._pending = 0
        return left

    def __enter__(self) -> ScheduleStream:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            # Cancel before the request iterator ends: ending it half-closes the stream, and a
            # half-close that reached the server first would have it answer (and reserve for)
            # every request sent, and end the stream OK.
            self._call.cancel()
            self._finish()
            return
        self.close()
