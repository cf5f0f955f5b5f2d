"""ScheduleStream over real gRPC: each message answered, in order, as its own Schedule call
would be, a bad message failing only itself, the stream counted once in the metrics, and an
answer too large for a message refused without holding anything."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.service.client import ScheduleStream
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from tests.service.conftest import Running, assert_valid
from tests.service.test_schedule_batch import (
    OK,
    assert_as_one_by_one,
    assert_mixed_answers,
    code_named,
    devices,
    mixed_requests,
    one,
    pods,
    reserving_requests,
)

METHOD = "/drasolver.v1.AllocationService/ScheduleStream"


def raw_stream(target: str, messages: list[bytes], timeout: float = 30) -> list[pb.ScheduleBatchResult]:
    """Sends ``messages`` as they are (not necessarily ScheduleRequests) on one stream."""
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(METHOD, request_serializer=lambda m: m, response_deserializer=pb.ScheduleBatchResult.FromString)
        return list(call(iter(messages), timeout=timeout))


def test_a_stream_answers_each_message_as_its_own_schedule_call(fresh: Callable[..., Running]) -> None:
    streamed, single = fresh(), fresh()
    claims = pods(9)
    with streamed.client.schedule_stream() as stream:
        results = [stream.schedule(request) for request in reserving_requests(streamed.client, claims)]
    assert_as_one_by_one(streamed, single, claims, results)


def test_requests_sent_ahead_are_answered_in_order_as_one_by_one(fresh: Callable[..., Running]) -> None:
    """send() keeps several requests in flight; each is answered as its own Schedule call
    would be when its turn comes, so a later one sees what an earlier one reserved."""
    ahead, single = fresh(), fresh()
    claims = pods(9)
    requests = reserving_requests(ahead.client, claims)
    results = []
    with ahead.client.schedule_stream() as stream:
        for request in requests[:4]:
            stream.send(request)
        assert stream.pending == 4
        with pytest.raises(ValueError, match="4 answers to requests sent earlier come first"):
            stream.schedule(requests[4])
        for request in requests[4:]:  # one more sent for each answer taken: four in flight throughout
            results.append(stream.receive())
            stream.send(request)
        while stream.pending:
            results.append(stream.receive())
        with pytest.raises(ValueError, match="no request sent is waiting for its answer"):
            stream.receive()
    assert_as_one_by_one(ahead, single, claims, results)


def test_closing_a_stream_gives_the_answers_not_received_yet(fresh: Callable[..., Running]) -> None:
    r = fresh()
    c = r.client
    stream = c.schedule_stream(timeout=60)
    stream.send(c.schedule_request([one("kept-a")], reserve=True, ttl=600))
    stream.send(c.schedule_request([one("kept-b")], reserve=True, ttl=600))
    left = stream.close()
    assert [res.status.code for res in left] == [OK, OK] and stream.pending == 0
    # What they reserved is held, as for any answer: the caller has them to release.
    assert sorted(res.id for res in r.engine.reservations.all()) == sorted(res.response.reservation.id for res in left)
    with pytest.raises(ValueError, match="the stream is closed"):
        stream.send(c.schedule_request([one("after")]))


def test_a_failed_message_fails_only_itself_with_its_own_calls_status(running: Running) -> None:
    c = running.client
    requests, codes = mixed_requests(c)
    with c.schedule_stream(timeout=60) as stream:
        results = [stream.schedule(request) for request in requests]
    assert_mixed_answers(c, requests, codes, results)


def test_bytes_that_are_not_a_request_fail_that_message_only(running: Running) -> None:
    good = running.client.schedule_request([one("after")]).SerializeToString()
    results = raw_stream(running.target, [b"\xff\xff\xff", good, b"\x0a\x03\xff\xfe\xfd", good])
    assert [code_named(r.status.code) for r in results] == [
        grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK
    ]
    assert results[0].status.message == "the message is not a valid drasolver.v1.ScheduleRequest message"
    assert results[1].response.node and results[3].response.node


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_any_bytes_get_an_answer_per_message_and_never_internal(running: Running, bodies: list[bytes]) -> None:
    results = raw_stream(running.target, bodies)
    assert len(results) == len(bodies)
    assert all(code_named(r.status.code) not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) for r in results)


def test_metrics_count_the_stream_once_and_each_message_as_a_question(fresh: Callable[..., Running]) -> None:
    r = fresh()
    c = r.client
    with c.schedule_stream() as stream:
        stream.schedule(c.schedule_request([one("m")]))
        stream.schedule(c.schedule_request([one("m")], policy="nope"))
        assert r.engine.metrics.registry.get_sample_value("dra_solver_grpc_requests_in_flight") == 0, "an idle stream is not a call in flight"
    registry = r.engine.metrics.registry
    assert registry.get_sample_value("dra_solver_grpc_requests_total", {"grpc_method": "ScheduleStream", "grpc_status_code": "OK"}) == 1
    items = {
        outcome: registry.get_sample_value(
            "dra_solver_allocation_duration_seconds_count", {"rpc": "ScheduleStream", "allocator": "cpsat", "outcome": outcome}
        )
        for outcome in ("allocated", "invalid")
    }
    assert items == {"allocated": 1, "invalid": 1}
    assert registry.get_sample_value("dra_solver_request_duration_seconds_count", {"rpc": "ScheduleStream", "outcome": "answered"}) == 1


def test_a_caller_that_goes_away_ends_its_stream_as_cancelled(fresh: Callable[..., Running]) -> None:
    r = fresh(max_streams=1)
    stream = r.client.schedule_stream()
    assert stream.schedule(r.client.schedule_request([one("gone")])).status.code == OK
    with pytest.raises(RuntimeError), stream:
        raise RuntimeError("the caller fails: the stream is cancelled, not half-closed")
    registry = r.engine.metrics.registry
    for _ in range(1000):  # the server sees the cancellation on its own threads
        counted = registry.get_sample_value("dra_solver_grpc_requests_total", {"grpc_method": "ScheduleStream", "grpc_status_code": "CANCELLED"})
        if counted:
            break
        threading.Event().wait(0.01)
    assert counted == 1, [(x.labels, x.value) for m in registry.collect() for x in m.samples if x.name.startswith("dra_solver_grpc_requests")]
    with r.client.schedule_stream() as again:  # the cancelled stream gave its only slot back
        assert again.schedule(r.client.schedule_request([one("next")])).status.code == OK


def test_an_answer_too_large_for_a_message_fails_that_message_and_holds_nothing(fresh: Callable[..., Running]) -> None:
    r = fresh(max_message_bytes=3000)
    c = r.client
    unknown = [f"no-such-node-{i:03d}" for i in range(40)]  # each listed with a verdict: over 3,000 bytes of answer
    with c.schedule_stream() as stream:
        big = stream.schedule(c.schedule_request([one("big")], ["node-a", "node-b", *unknown], reserve=True))
        small = stream.schedule(c.schedule_request([one("small")], reserve=True, chosen_verdict_only=True))
    assert code_named(big.status.code) == grpc.StatusCode.RESOURCE_EXHAUSTED and "message limit" in big.status.message
    assert not big.HasField("response")
    assert small.status.code == OK and small.response.node
    assert len(r.engine.reservations) == 1, "only the answered message holds devices"


def test_a_stream_per_thread_never_hands_a_device_out_twice(fresh: Callable[..., Running]) -> None:
    r = fresh()
    claims = pods(24, prefix="t")
    answers: list[tuple[dict[str, object], pb.ScheduleBatchResult]] = []
    lock = threading.Lock()

    def caller(mine: Iterator[dict[str, object]]) -> None:
        with r.client.schedule_stream(timeout=60) as stream:
            for claim in mine:
                result = stream.schedule(r.client.schedule_request([claim], reserve=True))
                with lock:
                    answers.append((claim, result))

    threads = [threading.Thread(target=caller, args=(iter(claims[i::3]),)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == len(claims)
    placed = [(claim, res) for claim, res in answers if res.status.code == OK and res.response.node]
    taken = [d for _, res in placed for d in devices(res.response)]
    assert placed and len(taken) == len(set(taken))
    for claim, res in placed:
        assert_valid(r.objects, [claim], res.response, res.response.node, extra=None)


def test_streams_beyond_the_limit_are_refused_and_unary_calls_still_served(fresh: Callable[..., Running]) -> None:
    """Each open stream holds a serving thread: past ``max_streams`` a stream is refused at
    once, and Schedule calls keep their threads."""
    r = fresh(max_streams=1)
    c = r.client
    with c.schedule_stream() as first:
        assert first.schedule(c.schedule_request([one("s1")])).status.code == OK
        with pytest.raises(grpc.RpcError) as raised, c.schedule_stream(timeout=10) as second:
            second.schedule(c.schedule_request([one("s2")]))
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many ScheduleStream calls open: at most 1 (serve --max-streams)" in (raised.value.details() or "")
        assert c.schedule([one("unary")]).node, "a Schedule call is served while the stream is open"
    with c.schedule_stream() as again:  # the first one closed: its slot is free again
        assert again.schedule(c.schedule_request([one("s3")])).status.code == OK


def test_the_streams_deadline_ends_it_and_what_was_answered_stands(fresh: Callable[..., Running]) -> None:
    """The stream's deadline bounds every message: once it passes, the stream itself ends
    DEADLINE_EXCEEDED; answers given before it (and their reservations) stand."""
    r = fresh()
    c = r.client
    stream = c.schedule_stream(timeout=1.0)
    first = stream.schedule(c.schedule_request([one("early")], reserve=True, ttl=600))
    assert first.status.code == OK and first.response.reservation.id
    threading.Event().wait(1.5)
    with pytest.raises(grpc.RpcError) as ended:
        stream.schedule(c.schedule_request([one("late")], reserve=True, ttl=600))
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert [res.id for res in r.engine.reservations.all()] == [first.response.reservation.id]
    stream.close()  # the call already ended and said so: nothing left to report
    with pytest.raises(ValueError, match="the stream is closed"):
        stream.schedule(c.schedule_request([one("after")]))


def _waiting_for_requests() -> int:
    """Threads (gRPC's) waiting inside a client stream's request iterator."""
    # With the collector off: on Python 3.11, a collection that starts inside
    # sys._current_frames() can deadlock it (CPython gh-106883; it hung a CI run here).
    enabled = gc.isenabled()
    gc.disable()
    try:
        frames = sys._current_frames()
    finally:
        if enabled:
            gc.enable()
    return sum(1 for frame in frames.values() if frame.f_code is ScheduleStream._requests.__code__)


def test_a_stream_that_ends_however_leaves_no_thread_behind(fresh: Callable[..., Running]) -> None:
    """Cancelled, refused, past its deadline or closed: gRPC's thread that reads a client
    stream's requests is let go (a leak would grow with each retry of a refused stream)."""
    r = fresh(max_streams=1)
    c = r.client
    with c.schedule_stream() as holder:  # takes the one slot: the next streams are refused
        assert holder.schedule(c.schedule_request([one("holder")])).status.code == OK
        for _ in range(3):
            with pytest.raises(grpc.RpcError), c.schedule_stream(timeout=10) as refused:
                refused.schedule(c.schedule_request([one("refused")]))
    for _ in range(3):
        with pytest.raises(RuntimeError), c.schedule_stream(timeout=10) as dropped:
            dropped.send(c.schedule_request([one("dropped")]))
            raise RuntimeError("the caller gave up")
    late = c.schedule_stream(timeout=0.5)
    threading.Event().wait(1.0)
    with pytest.raises(grpc.RpcError) as ended:  # sending on a stream already over says how it ended
        late.send(c.schedule_request([one("late")]))
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and late.pending == 0
    deadline = time.monotonic() + 10
    while _waiting_for_requests() and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    assert _waiting_for_requests() == 0


def test_a_fault_past_a_messages_own_handling_ends_the_stream_unknown_and_counted(
    fresh: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault the service cannot turn into a message's status (a fake: real messages are all
    answered) ends the stream UNKNOWN, is counted as such, and gives the stream's slot back."""
    r = fresh(max_streams=1)
    c = r.client
    servicer = r.service.deps.servicer
    assert servicer is not None

    def broken(*args: object) -> bytes:
        raise RuntimeError("a fault")

    monkeypatch.setattr(servicer, "_stream_item", broken)
    with pytest.raises(grpc.RpcError) as ended, c.schedule_stream(timeout=10) as stream:
        stream.schedule(c.schedule_request([one("faulted")]))
    assert ended.value.code() == grpc.StatusCode.UNKNOWN
    registry = r.engine.metrics.registry
    assert registry.get_sample_value("dra_solver_grpc_requests_total", {"grpc_method": "ScheduleStream", "grpc_status_code": "UNKNOWN"}) == 1
    monkeypatch.undo()
    with c.schedule_stream(timeout=10) as again:  # its slot is free again
        assert again.schedule(c.schedule_request([one("after")])).status.code == OK
