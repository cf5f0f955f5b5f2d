"""Bounded memory (issue 15): reservation limits, LRU caches, a shutdown that honours its grace.

Real gRPC on loopback with small limits, so that a few calls exceed every bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from dra_solver.model.allocation import AllocationOutcome, AllocationRequest, SolveStats
from dra_solver.model.features import GATE_NAMES
from dra_solver.service import engine as e
from dra_solver.service.reservations import ReservationStore
from tests import builders as b
from tests.service.conftest import Running


def _exhausted(call: Callable[[], Any]) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, info.value.details()
    return info.value.details() or ""


def test_reservations_per_caller_are_limited(fresh: Callable[..., Running]) -> None:
    r = fresh(reservations=ReservationStore(max_total=100, max_per_caller=2))
    first = r.client.schedule([b.SOLVER_TEST.named("a").request("gpu").obj()], reserve=True)
    second = r.client.schedule([b.SOLVER_TEST.named("b").request("gpu").obj()], reserve=True)
    assert first.reservation.id and second.reservation.id
    message = _exhausted(lambda: r.client.schedule([b.SOLVER_TEST.named("c").request("gpu").obj()], reserve=True))
    assert "for this caller: 2 held, at most 2" in message
    _exhausted(lambda: r.client.allocate([b.SOLVER_TEST.named("c").request("gpu").obj()], "node-b", reserve=True))
    # Holding the same allocation again is a refresh, not a new reservation.
    again = r.client.reserve(r.client.with_allocations([b.SOLVER_TEST.named("a").request("gpu").obj()], first), first.node)
    assert again.id == first.reservation.id
    assert r.client.unreserve(first.reservation.id) == 1
    assert r.client.schedule([b.SOLVER_TEST.named("c").request("gpu").obj()], reserve=True).reservation.id
    assert len(r.engine.reservations) == 2


def test_reservations_in_total_are_limited(fresh: Callable[..., Running]) -> None:
    r = fresh(reservations=ReservationStore(max_total=1, max_per_caller=100))
    assert r.client.schedule([b.SOLVER_TEST.named("a").request("gpu").obj()], reserve=True).reservation.id
    assert "too many reservations in flight: 1 held, at most 1" in _exhausted(lambda: r.client.schedule([b.SOLVER_TEST.named("b").request("gpu").obj()], reserve=True))
    # Answers without reserving still work.
    assert r.client.schedule([b.SOLVER_TEST.named("b").request("gpu").obj()]).node


def test_caches_stay_within_their_limits(fresh: Callable[..., Running]) -> None:
    limits = e.Limits(cel_environments=2, cache_entries=4, parsed_devices=8)
    r = fresh(limits=limits)
    names = sorted(GATE_NAMES)
    # Every combination of the gates a CEL environment depends on, and then some.
    for i in range(24):
        gates = ",".join(f"{n}={'true' if (i >> k) & 1 else 'false'}" for k, n in enumerate(names) if n != "AdminAccess")
        r.client.schedule([b.SOLVER_TEST.named(f"c{i}").request("gpu", count=1 + i % 2).obj()], feature_gates=gates)
        assert len(r.engine._cels) <= limits.cel_environments
        assert len(r.engine._cache) <= limits.cache_entries
        assert len(r.engine._devices) <= limits.parsed_devices
    # Inline inventories bring new Device objects on every call: parsed once each, bounded.
    for i in range(6):
        objects = [o.to_api() for o in r.objects]
        assert r.client.allocate([b.SOLVER_TEST.named(f"inline{i}").request("gpu").obj()], "node-b", objects=objects).allocated
        assert len(r.engine._devices) <= limits.parsed_devices
    assert len(r.engine._cels) == limits.cel_environments, "the limit was reached"


def test_shutdown_honours_grace_with_a_call_stuck(fresh: Callable[..., Running]) -> None:
    """A call stuck in Python code (decoding a huge payload, say) cannot be interrupted: stop
    returns after the grace period anyway, and says so."""
    entered = threading.Event()
    release = threading.Event()

    def stuck(request: AllocationRequest) -> AllocationOutcome:
        entered.set()
        release.wait(60)
        # Answered after the server stopped: nobody reads it (no error to log either).
        return AllocationOutcome(False, (), 0, SolveStats("stuck", "INFEASIBLE", 0.0), reason="released")

    r = fresh(allocate_fn=stuck)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            r.client.allocate([b.SOLVER_TEST.named("x").request("gpu").obj()], "node-a", timeout=60)
        except grpc.RpcError as err:
            errors.append(err)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    assert entered.wait(30)
    start = time.monotonic()
    drained = r.service.stop(0.5)
    took = time.monotonic() - start
    release.set()
    t.join(30)
    assert not drained, "the stuck call was still running"
    assert took < 0.5 + 5, f"stop took {took:.1f}s"
    assert errors and errors[0].code() == grpc.StatusCode.UNAVAILABLE, "the server is shutting down"  # type: ignore[attr-defined]


def test_device_parse_cache_forgets_the_least_recently_used() -> None:
    from dra_solver.model import objects as o
    from dra_solver.model.pools import DeviceParseCache

    cache = DeviceParseCache(2)
    a, b, c = (o.Device(name=n) for n in "abc")
    first = cache.parsed("d", a)
    second = cache.parsed("d", b)
    assert cache.parsed("d", a) is first  # a is now the most recently used
    cache.parsed("d", c)
    assert len(cache) == 2
    assert cache.parsed("d", a) is first, "a stayed"
    assert cache.parsed("d", b) is not second, "b was forgotten and parsed again"
    assert len(cache) == 2


def test_what_a_reservation_keeps_is_bounded(running: Running) -> None:
    with pytest.raises(grpc.RpcError) as info:
        running.client.schedule([b.SOLVER_TEST.named("p").request("gpu").obj()], reserve=True, pod="p" * 100_000)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pod: Too long" in (info.value.details() or "")
