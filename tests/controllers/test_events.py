"""Events are sent in the background: a worker that records one never waits for the API server,
a bounded number wait to be sent, and shutdown can flush them or drop the rest."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from dra_solver.controllers.runtime import Events
from dra_solver.service.kubeapi import client as kube
from tests import builders as b


class GatedKube:
    """``create_event`` blocks until the gate opens, as an API server that is slow to answer."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        self.gate.wait(30)
        with self.lock:
            self.sent.append((namespace, event))


def _events(fake: GatedKube, **kw: Any) -> Events:
    return Events(cast(kube.Kube, fake), "dra-solver", **kw)


def test_emit_returns_while_the_api_server_has_not_answered() -> None:
    fake = GatedKube()
    events = _events(fake)
    for i in range(3):
        events.emit(b.pod(f"p{i}", uid=f"u{i}"), "Pod", type_="Normal", reason="Scheduled", message="assigned")
    assert not events.idle() and fake.sent == []  # all three returned with nothing sent yet
    fake.gate.set()
    assert events.flush(timeout=30)
    assert sorted(e["involvedObject"]["name"] for _, e in fake.sent) == ["p0", "p1", "p2"]
    assert {e["reason"] for _, e in fake.sent} == {"Scheduled"}


def test_a_full_queue_drops_new_events_and_shutdown_discards_the_rest() -> None:
    fake = GatedKube()
    counted: list[int] = []
    events = _events(fake, max_pending=2, senders=1, on_drop=counted.append)
    for i in range(6):
        events.emit(b.pod(f"p{i}", uid=f"u{i}"), "Pod", type_="Normal", reason="Scheduled", message="assigned")
    # One is being sent (blocked), two wait, the rest were dropped.
    assert events.dropped in (3, 4)
    assert sum(counted) == events.dropped, "every drop reaches the metric"
    assert not events.flush(timeout=0.05)
    assert events.discard() in (1, 2)
    assert sum(counted) == events.dropped
    fake.gate.set()
    assert events.flush(timeout=30)
    assert 1 <= len(fake.sent) <= 2
    assert len(fake.sent) + events.dropped == 6


def test_identical_events_within_the_dedupe_window_are_sent_once() -> None:
    fake = GatedKube()
    fake.gate.set()
    events = _events(fake)
    pod = b.pod("p", uid="u")
    for _ in range(5):
        events.emit(pod, "Pod", type_="Warning", reason="FailedScheduling", message="0/3 nodes are available")
    assert events.flush(timeout=30)
    assert len(fake.sent) == 1


class FlakyKube:
    """``create_event`` fails with ``error`` for the first ``failures`` calls, as an API server
    that is restarting (connection refused) or rejects the event."""

    def __init__(self, failures: int, error: kube.ApiError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0
        self.sent: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.calls += 1
            if self.calls <= self.failures:
                raise self.error
            self.sent.append(event)


def _scheduled(events: Events, name: str = "p") -> None:
    events.emit(b.pod(name, uid=f"u-{name}"), "Pod", type_="Normal", reason="Scheduled", message="assigned")


def test_an_event_the_api_server_could_not_take_is_sent_again_until_it_is_recorded() -> None:
    fake = FlakyKube(3, kube.Transient("create event in default: ConnectionRefusedError"))
    events = Events(cast(kube.Kube, fake), "dra-solver", retry_after=0.02)
    _scheduled(events)
    assert events.flush(timeout=30)
    assert fake.calls == 4 and [e["reason"] for e in fake.sent] == ["Scheduled"]
    assert events.dropped == 0


def test_a_retry_waits_its_turn_and_counts_as_not_idle() -> None:
    fake = FlakyKube(1, kube.Transient("create event in default: 503", status=503))
    events = Events(cast(kube.Kube, fake), "dra-solver", retry_after=0.5)
    _scheduled(events)
    deadline = time.monotonic() + 30
    while fake.calls < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.1)
    assert fake.calls == 1 and not events.idle(), "the retry is not due yet, and it is still owed"
    assert events.flush(timeout=30) and fake.calls == 2 and len(fake.sent) == 1


def test_retries_stop_after_max_tries_and_a_rejected_event_is_not_retried() -> None:
    down = FlakyKube(100, kube.Transient("create event in default: timed out"))
    counted: list[int] = []
    events = Events(cast(kube.Kube, down), "dra-solver", retry_after=0.01, max_tries=3, on_drop=counted.append)
    _scheduled(events)
    assert events.flush(timeout=30)
    assert down.calls == 3 and down.sent == [] and events.dropped == 1 and counted == [1]

    rejected = FlakyKube(1, kube.Invalid("create event in default: 422 Invalid", status=422))
    events = Events(cast(kube.Kube, rejected), "dra-solver", retry_after=0.01)
    _scheduled(events)
    assert events.flush(timeout=30)
    assert rejected.calls == 1 and rejected.sent == []


def test_discard_drops_the_retries_too() -> None:
    fake = FlakyKube(1, kube.Transient("create event in default: ConnectionRefusedError"))
    events = Events(cast(kube.Kube, fake), "dra-solver", retry_after=60)
    _scheduled(events)
    assert not events.flush(timeout=0.3)
    assert events.discard() == 1 and events.idle()


def test_a_slow_api_server_gets_up_to_thirty_two_events_at_once() -> None:
    """A busy scheduler records an event per pod: with one API round trip at a time per sender,
    four senders fell behind at 150 pods/s on a loaded server and the queue dropped half the
    Scheduled events; sixteen dropped a sixth of them at 180 pods/s. Thirty-two are sent at
    once; no more."""
    fake = GatedKube()
    in_flight = 0
    most = 0
    counted = threading.Lock()
    wait = fake.create_event

    def create_event(namespace: str, event: dict[str, Any]) -> None:
        nonlocal in_flight, most
        with counted:
            in_flight += 1
            most = max(most, in_flight)
        try:
            wait(namespace, event)
        finally:
            with counted:
                in_flight -= 1

    fake.create_event = create_event  # type: ignore[method-assign]
    events = _events(fake)
    for i in range(80):
        events.emit(b.pod(f"p{i}", uid=f"u{i}"), "Pod", type_="Normal", reason="Scheduled", message="assigned")
    deadline = time.monotonic() + 10
    while most < 32 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert most == 32 and events.dropped == 0
    fake.gate.set()
    assert events.flush(timeout=30)
    assert len(fake.sent) == 80


def test_the_connection_pool_keeps_room_for_every_event_sender() -> None:
    # Senders beyond the idle pool would each handshake TLS again after every event.
    from dra_solver.controllers.manager import Options
    from dra_solver.controllers.runtime import EVENT_SENDERS

    options = Options()
    workers = options.claim_workers + options.scheduler_workers + options.scheduler_binders + options.eviction_workers
    assert options.connections() >= workers + EVENT_SENDERS
    assert Events(None, "dra-solver")._max_senders == EVENT_SENDERS
