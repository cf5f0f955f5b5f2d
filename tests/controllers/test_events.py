"""Events are sent in the background: a worker that records one never waits for the API server,
a bounded number wait to be sent, and shutdown can flush them or drop the rest."""

from __future__ import annotations

import threading
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
    events = _events(fake, max_pending=2, senders=1)
    for i in range(6):
        events.emit(b.pod(f"p{i}", uid=f"u{i}"), "Pod", type_="Normal", reason="Scheduled", message="assigned")
    # One is being sent (blocked), two wait, the rest were dropped.
    assert events.dropped in (3, 4)
    assert not events.flush(timeout=0.05)
    assert events.discard() in (1, 2)
    fake.gate.set()
    assert events.flush(timeout=30)
    assert 1 <= len(fake.sent) <= 2


def test_identical_events_within_the_dedupe_window_are_sent_once() -> None:
    fake = GatedKube()
    fake.gate.set()
    events = _events(fake)
    pod = b.pod("p", uid="u")
    for _ in range(5):
        events.emit(pod, "Pod", type_="Warning", reason="FailedScheduling", message="0/3 nodes are available")
    assert events.flush(timeout=30)
    assert len(fake.sent) == 1
