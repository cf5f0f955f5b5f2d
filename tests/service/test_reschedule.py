"""Scheduling a claim again: the caller's own earlier reservation for it is superseded, not
counted against it; another caller's still wins."""

from __future__ import annotations

import json
from collections.abc import Callable

import grpc
import pytest

from tests.builders import ONE_GPU
from tests.service.conftest import Running
from tests.service.test_schedule_batch import devices, gpus_on_one_node


@pytest.fixture
def one_gpu(fresh: Callable[..., Running]) -> Running:
    return gpus_on_one_node(fresh, 1)


def test_the_same_caller_scheduling_a_claim_again_gets_it_again(one_gpu: Running) -> None:
    c = one_gpu.client
    claim = ONE_GPU.named("again").uid("uid-again").obj()
    first = c.schedule([claim], reserve=True, ttl=600)
    assert first.node == "node-a" and first.reservation.id
    # The only GPU is held for this very claim: asking again must not find it taken.
    second = c.schedule([claim], reserve=True, ttl=600)
    assert second.node == "node-a" and devices(second) == devices(first)
    assert second.reservation.id != first.reservation.id
    assert len(one_gpu.engine.reservations) == 1
    with pytest.raises(grpc.RpcError) as gone:
        c.unreserve(first.reservation.id)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND, "the earlier hold was superseded"
    other = ONE_GPU.named("other").uid("uid-other").obj()
    assert not c.schedule([other], reserve=True).node, "another claim still finds the GPU held"


def test_another_callers_hold_on_the_claim_still_wins(one_gpu: Running) -> None:
    engine = one_gpu.engine
    blob = json.dumps(ONE_GPU.named("contended").uid("uid-contended").obj()).encode()
    held = engine.schedule([blob], reserve=True, ttl=600, caller="scheduler-a")
    assert held.node == "node-a" and held.reservation is not None
    assert not engine.schedule([blob], reserve=True, ttl=600, caller="scheduler-b").node, "scheduler-a holds the only GPU"
    assert [r.id for r in engine.reservations.all()] == [held.reservation.id], "scheduler-a's hold is untouched"
    engine.schedule([blob], caller="scheduler-a")  # without reserve: a question, nothing superseded
    assert [r.id for r in engine.reservations.all()] == [held.reservation.id]


def test_a_hold_for_another_pod_is_not_superseded(one_gpu: Running) -> None:
    """Callers without TLS are told apart by their host only: a second scheduler on the same
    host asking for a claim another pod holds does not release that pod's hold."""
    engine = one_gpu.engine
    blob = json.dumps(ONE_GPU.named("shared").uid("uid-shared").obj()).encode()
    held = engine.schedule([blob], reserve=True, ttl=600, caller="ipv4:10.0.0.1", pod="team/a")
    assert held.node == "node-a" and held.reservation is not None
    assert not engine.schedule([blob], reserve=True, ttl=600, caller="ipv4:10.0.0.1", pod="team/b").node
    assert [r.id for r in engine.reservations.all()] == [held.reservation.id], "team/a's hold is untouched"
    again = engine.schedule([blob], reserve=True, ttl=600, caller="ipv4:10.0.0.1", pod="team/a")
    assert again.node == "node-a" and again.reservation is not None and again.reservation.id != held.reservation.id
