"""The caller's in-flight claims (docs/replicas.md), through a real server and client: they count
as in use, a stateless call keeps nothing on the replica, Reserve checks them, other callers'
reservations still count, and what a caller may send is bounded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from dra_solver.model.decode import decode_object
from dra_solver.service.client import Client
from dra_solver.service.inflight import MAX_IN_FLIGHT
from dra_solver.service.inventory import StaticSource
from tests.builders import ONE_GPU, device_class, gpu_slice, node
from tests.service.conftest import Running

NODE = "node-a"


@pytest.fixture
def server(fresh: Callable[..., Running]) -> Iterator[Running]:
    objects = [decode_object(x) for x in (device_class(), node(NODE), gpu_slice(NODE, count=2))]
    yield fresh(StaticSource(objects, name="two-gpus"))


def allocated(name: str, device: str) -> dict[str, Any]:
    return ONE_GPU.named(name).uid(f"uid-{name}").allocated(("gpu", device), node=NODE).obj()


def device_of(answer: Any) -> list[str]:
    return [d.rsplit("/", 1)[1] for d in Client.devices(answer)]


def test_in_flight_claims_count_as_in_use_and_nothing_is_kept(server: Running) -> None:
    c = server.client
    mine = allocated("earlier", "gpu-0")
    answer = c.schedule([ONE_GPU.named("next").obj()], reserve=True, in_flight=[mine])
    assert device_of(answer) == ["gpu-1"]
    assert answer.reservation.id == ""
    assert len(server.engine.reservations) == 0
    # Both devices in flight: nothing fits, and Explain says why.
    full = c.schedule([ONE_GPU.named("third").obj()], in_flight=[mine, allocated("other", "gpu-1")])
    assert not full.node
    # Without them the replica knows nothing of either.
    assert device_of(c.schedule([ONE_GPU.named("next").obj()])) == ["gpu-0"]


def test_reserve_checks_against_in_flight_claims(server: Running) -> None:
    c = server.client
    claim = ONE_GPU.named("pod-claim").uid("uid-pod-claim").obj()
    answer = c.schedule([claim], in_flight=[])
    held = Client.with_allocations([claim], answer)
    device = device_of(answer)[0]
    # Another in-flight claim of the caller holds that device: ABORTED, solve again.
    with pytest.raises(grpc.RpcError) as raised:
        c.reserve(held, NODE, in_flight=[allocated("rival", device)])
    assert raised.value.code() == grpc.StatusCode.ABORTED
    # The claim itself in flight (the caller assumed it already) is no conflict.
    ok = c.reserve(held, NODE, in_flight=held)
    assert ok.id == "" and len(server.engine.reservations) == 0


def test_other_callers_reservations_still_count(server: Running) -> None:
    c = server.client
    classic = c.schedule([ONE_GPU.named("classic").obj()], reserve=True)
    assert classic.reservation.id
    taken = device_of(classic)
    stateless = c.schedule([ONE_GPU.named("stateless").obj()], reserve=True, in_flight=[])
    assert device_of(stateless) != taken and stateless.node


def test_in_flight_is_bounded_and_must_be_allocated(server: Running) -> None:
    c = server.client
    with pytest.raises(grpc.RpcError) as raised:
        c.schedule([ONE_GPU.named("x").obj()], in_flight=[b"{}"] * (MAX_IN_FLIGHT + 1))
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.RpcError) as raised:
        c.schedule([ONE_GPU.named("x").obj()], in_flight=[ONE_GPU.named("bare").obj()])
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inFlight[0]" in (raised.value.details() or "")
