"""ScheduleBatch over real gRPC: items answered in order as separate Schedule calls would be,
each with its own status, stateless items seeing what earlier items took, and the limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from dra_solver.model.decode import decode_object
from dra_solver.service import engine as e
from dra_solver.service.client import Client
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.inventory import StaticSource
from tests import builders as b
from tests.builders import ONE_GPU, device_class, gpu_slice, node
from tests.service.conftest import Running, assert_valid

OK = grpc.StatusCode.OK.value[0]


def code_named(number: int) -> grpc.StatusCode:
    """The gRPC status code whose number is ``number`` (a google.rpc.Status code)."""
    return next(code for code in grpc.StatusCode if code.value[0] == number)


def devices(answer: pb.ScheduleResponse) -> list[str]:
    """The devices an answer allocates, as driver/pool/device."""
    return sorted(d.split("=", 1)[1] for d in Client.devices(answer))


def assert_each_as_its_own_call(c: Client, requests: list[pb.ScheduleRequest], results: list[pb.ScheduleBatchResult]) -> None:
    """Each result has the code and message its request's own Schedule call ends with."""
    for request, result in zip(requests, results, strict=True):
        try:
            c.stub.Schedule(request)
            alone = grpc.StatusCode.OK
        except grpc.RpcError as err:
            alone = err.code()
            assert result.status.message == err.details()
        assert code_named(result.status.code) == alone


def gpus_on_one_node(fresh: Callable[..., Running], count: int) -> Running:
    """A server whose inventory is one node with ``count`` GPUs."""
    objects = [decode_object(x) for x in (device_class(), node("node-a"), gpu_slice("node-a", count=count))]
    return fresh(StaticSource(objects, name=f"{count}-gpus"))


def one(name: str) -> dict[str, Any]:
    """A one-GPU claim the demo cluster can place."""
    return b.SOLVER_TEST.named(name).request("gpu").obj()


def pods(count: int, prefix: str = "pod") -> list[dict[str, Any]]:
    """One-GPU claims, every third asking for two."""
    return [
        b.SOLVER_TEST.named(f"{prefix}-{i}").uid(f"uid-{prefix}-{i}").request("gpu", count=2 if i % 3 == 2 else 1).obj()
        for i in range(count)
    ]


def reserving_requests(c: Client, claims: list[dict[str, Any]]) -> list[pb.ScheduleRequest]:
    """A Schedule request with reserve for each claim's pod."""
    return [c.schedule_request([claim], reserve=True, ttl=600, pod=f"team/p{i}") for i, claim in enumerate(claims)]


def assert_as_one_by_one(ran: Running, single: Running, claims: list[dict[str, Any]], results: list[pb.ScheduleBatchResult]) -> None:
    """``results`` (of ``reserving_requests(claims)`` on ``ran``) are what the same calls one
    after the other give on ``single``: each valid, each holding its own reservation, no device
    twice, most of them placed."""
    assert [r.status.code for r in results] == [OK] * len(claims)
    one_by_one = [single.client.schedule([c], reserve=True, ttl=600, pod=f"team/p{i}") for i, c in enumerate(claims)]
    assert [(r.response.node, devices(r.response)) for r in results] == [(a.node, devices(a)) for a in one_by_one]
    placed = [(claim, r) for claim, r in zip(claims, results, strict=True) if r.response.node]
    assert len(placed) >= 5, "the demo cluster places most of them"
    taken: list[str] = []
    for claim, r in placed:
        assert r.response.reservation.id, "each reserving request holds its own reservation"
        assert_valid(ran.objects, [claim], r.response, r.response.node)
        taken.extend(devices(r.response))
    assert len(taken) == len(set(taken)), "a request never gets a device an earlier one reserved"
    assert len(ran.engine.reservations) == len(placed)


def mixed_requests(c: Client) -> tuple[list[pb.ScheduleRequest], list[grpc.StatusCode]]:
    """Good requests among bad ones, and the status each one's own Schedule call ends with."""
    good = one("fine")
    return [
        c.schedule_request([good]),
        c.schedule_request([b.SOLVER_TEST.named("bad").request("gpu", count=0).obj()]),
        c.schedule_request([good], policy="tightest"),
        c.schedule_request([b.SOLVER_TEST.named("nosuch").request("gpu", cls="no-such-class").obj()]),
        pb.ScheduleRequest(claims=[b"{not json"]),
        c.schedule_request([good], ["no-such-node"]),
    ], [grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK]


def assert_mixed_answers(c: Client, requests: list[pb.ScheduleRequest], codes: list[grpc.StatusCode], results: list[pb.ScheduleBatchResult]) -> None:
    """Each of ``mixed_requests`` answered alone: its own call's code and message, details."""
    assert_each_as_its_own_call(c, requests, results)
    assert [code_named(r.status.code) for r in results] == codes
    assert results[0].response.node and not results[1].HasField("response")
    assert "spec.devices.requests[0].exactly.count" in results[1].status.message
    detail = error_details_pb2.BadRequest()
    assert results[1].status.details[0].Unpack(detail)
    assert any("spec.devices.requests[0].exactly.count" in v.field for v in detail.field_violations)
    assert not results[5].response.node and "not found" in results[5].response.nodes[0].reason


def test_a_batch_answers_as_the_same_calls_one_after_the_other(fresh: Callable[..., Running]) -> None:
    batched, single = fresh(), fresh()
    claims = pods(9)
    assert_as_one_by_one(batched, single, claims, batched.client.schedule_batch(reserving_requests(batched.client, claims)))


def test_a_failed_item_fails_only_itself_with_its_own_calls_status(running: Running) -> None:
    c = running.client
    requests, codes = mixed_requests(c)
    assert_mixed_answers(c, requests, codes, c.schedule_batch(requests))


def test_warnings_stay_with_their_item(running: Running) -> None:
    c = running.client
    lax = b.SOLVER_TEST.named("lax").request("gpu").obj()
    lax["spec"]["devices"]["requests"][0]["exactly"]["bogus"] = 1
    results = c.schedule_batch([c.schedule_request([lax], validate="warn"), c.schedule_request([one("plain")])])
    assert [r.status.code for r in results] == [OK, OK]
    assert results[0].warnings and "bogus" in results[0].warnings[0]
    assert not results[1].warnings


@pytest.fixture
def two_gpus(fresh: Callable[..., Running]) -> Running:
    return gpus_on_one_node(fresh, 2)


def test_stateless_items_count_what_earlier_items_took(two_gpus: Running) -> None:
    c = two_gpus.client
    claims = [ONE_GPU.named(f"s{i}").uid(f"uid-s{i}").obj() for i in range(3)]
    requests = [c.schedule_request([claim], reserve=True, in_flight=[]) for claim in claims]
    results = c.schedule_batch(requests)
    assert [r.status.code for r in results] == [OK] * 3
    got = [devices(r.response) for r in results]
    assert got[0] != got[1] and got[0] and got[1], "the second item sees the first one's device as in flight"
    assert not results[2].response.node, "both GPUs are in flight for the third"
    assert [r.response.reservation.id for r in results[:2]] == ["", ""]
    assert len(two_gpus.engine.reservations) == 0, "stateless: nothing is kept on the replica"
    # Without reserve an item takes nothing: the next one may get the same device.
    again = c.schedule_batch([c.schedule_request([claim], in_flight=[]) for claim in claims[:2]])
    assert devices(again[0].response) == devices(again[1].response)


def test_empty_and_oversized_batches(fresh: Callable[..., Running]) -> None:
    r = fresh(limits=e.Limits(max_batch_items=3))
    assert r.client.schedule_batch([]) == []
    request = r.client.schedule_request([one("x")])
    with pytest.raises(grpc.RpcError) as raised:
        r.client.schedule_batch([request] * 4)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "requests: Too many: 4: must have at most 3 items" in (raised.value.details() or "")
    assert len(r.client.schedule_batch([request] * 3)) == 3


def test_metrics_count_the_call_once_and_each_item_as_a_question(fresh: Callable[..., Running]) -> None:
    r = fresh()
    c = r.client
    r.client.schedule_batch([c.schedule_request([one("m")]), c.schedule_request([one("m")], policy="nope")])
    registry = r.engine.metrics.registry
    calls = registry.get_sample_value("dra_solver_grpc_requests_total", {"grpc_method": "ScheduleBatch", "grpc_status_code": "OK"})
    assert calls == 1
    items = {
        outcome: registry.get_sample_value(
            "dra_solver_allocation_duration_seconds_count", {"rpc": "ScheduleBatch", "allocator": "cpsat", "outcome": outcome}
        )
        for outcome in ("allocated", "invalid")
    }
    assert items == {"allocated": 1, "invalid": 1}
    whole = registry.get_sample_value("dra_solver_request_duration_seconds_count", {"rpc": "ScheduleBatch", "outcome": "answered"})
    assert whole == 1


def test_the_batch_is_bounded_by_the_calls_deadline(fresh: Callable[..., Running]) -> None:
    """Items left when the deadline passes end DEADLINE_EXCEEDED, each on its own."""
    clock = [1000.0]

    def ticking() -> float:
        clock[0] += 0.5  # every reading half a second later: the 2 s deadline passes a few items in
        return clock[0]

    r = fresh()
    r.engine.clock = ticking
    c = r.client
    results = c.schedule_batch([c.schedule_request([one(f"d{i}")]) for i in range(12)], timeout=2.0)
    codes = [r.status.code for r in results]
    late = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert len(codes) == 12 and late in codes
    first_late = codes.index(late)
    assert codes[:first_late] == [OK] * first_late and set(codes[first_late:]) == {late}
    assert "deadline" in results[-1].status.message


def test_an_answer_that_would_pass_the_message_limit_stops_the_batch(fresh: Callable[..., Running]) -> None:
    """Items whose answers would not fit in one message are not answered, and nothing is held
    for them: the item that passed the limit gives its reservation back."""
    r = fresh(max_message_bytes=6000)
    c = r.client
    unknown = [f"no-such-node-{i:03d}" for i in range(25)]  # each listed with a verdict: about 1.7 KB an answer
    requests = [c.schedule_request([one(f"big-{i}")], ["node-a", "node-b", *unknown], reserve=True) for i in range(5)]
    results = c.schedule_batch(requests)
    codes = [res.status.code for res in results]
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert len(results) == 5 and codes[0] == OK and exhausted in codes
    answered = codes.index(exhausted)
    assert codes == [OK] * answered + [exhausted] * (5 - answered)
    assert "message limit" in results[-1].status.message and not results[-1].HasField("response")
    assert all(res.response.node and res.response.reservation.id for res in results[:answered])
    assert len(r.engine.reservations) == answered, "only the answered items hold devices"
    # The same requests one per call all fit.
    assert all(c.schedule_batch([request])[0].status.code == OK for request in requests[answered:])
