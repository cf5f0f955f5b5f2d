"""The scheduler's pending-pod bookkeeping (controllers/schedqueue.py): no cluster event that
arrives during an attempt is lost, parked pods come back after the rest of their backoff, and
the solver-lag window retries a pod once per event, never in a loop."""

from __future__ import annotations

from dra_solver.controllers.schedqueue import FLUSH, Move, PendingPods, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def queue(clock: Clock, **kw: float) -> PendingPods:
    return PendingPods(backoff_initial=kw.get("initial", 1.0), backoff_max=kw.get("cap", 10.0),
                       solver_lag=kw.get("lag", 0.5), clock=clock)


def test_event_during_the_attempt_retries_at_once_instead_of_parking() -> None:
    clock = Clock()
    q = queue(clock)
    q.begin("ns/p")
    clock.now += 0.2
    assert q.cluster_event("ResourceSliceAdd") == []  # nothing parked yet: the old code lost it here
    clock.now += 0.2
    assert q.unschedulable("ns/p", by_solver=False) == Verdict(0.0, "ResourceSliceAdd")
    assert q.parked() == []


def test_without_events_the_pod_is_parked_and_the_next_event_brings_it_back() -> None:
    clock = Clock()
    q = queue(clock)
    q.begin("ns/p")
    assert q.unschedulable("ns/p", by_solver=False) == Verdict(None)
    assert q.parked() == ["ns/p"]
    clock.now += 0.25
    assert q.cluster_event("NodeAdd") == [Move("ns/p", 0.75, "NodeAdd")]  # the rest of its 1 s backoff
    assert q.parked() == []
    assert q.cluster_event("NodeAdd") == []  # moved once


def test_a_pod_parked_longer_than_its_backoff_comes_back_at_once() -> None:
    clock = Clock()
    q = queue(clock)
    q.begin("ns/p")
    q.unschedulable("ns/p", by_solver=False)
    clock.now += 5
    assert q.cluster_event("ResourceClaimDelete") == [Move("ns/p", 0.0, "ResourceClaimDelete")]


def test_backoff_doubles_per_failure_and_is_capped() -> None:
    clock = Clock()
    q = queue(clock, initial=1.0, cap=3.0)
    delays = []
    for _ in range(4):
        q.begin("ns/p")
        q.unschedulable("ns/p", by_solver=False)
        delays.append(q.cluster_event("NodeAdd")[0].delay)
    assert delays == [1.0, 2.0, 3.0, 3.0]
    q.scheduled("ns/p")
    q.begin("ns/p")
    q.unschedulable("ns/p", by_solver=False)
    assert q.cluster_event("NodeAdd")[0].delay == 1.0  # bound (or gone) resets it


def test_events_before_the_attempt_count_only_for_a_solver_verdict_and_only_once() -> None:
    clock = Clock()
    q = queue(clock, lag=0.5)
    q.cluster_event("ResourceSliceAdd")  # seen by us; the solver's own watch may lag behind
    clock.now += 0.125
    q.begin("ns/a")
    q.begin("ns/b")
    clock.now += 0.125
    assert q.unschedulable("ns/a", by_solver=False) == Verdict(None)  # our own caches had it
    assert q.unschedulable("ns/b", by_solver=True) == Verdict(0.25, "ResourceSliceAdd")  # once the window has passed
    clock.now += 0.25
    q.begin("ns/b")
    clock.now += 0.125
    assert q.unschedulable("ns/b", by_solver=True) == Verdict(None)  # the same event does not retry it again
    assert q.parked() == ["ns/a", "ns/b"]


def test_events_are_per_attempt() -> None:
    clock = Clock()
    q = queue(clock, lag=0.0)
    q.begin("ns/early")
    q.cluster_event("NodeAdd")
    q.begin("ns/late")  # started after the event: it saw the node
    assert q.unschedulable("ns/late", by_solver=True) == Verdict(None)
    assert q.unschedulable("ns/early", by_solver=True) == Verdict(0.0, "NodeAdd")


def test_events_are_kept_only_while_an_attempt_may_need_them() -> None:
    clock = Clock()
    q = queue(clock, lag=0.5)
    q.begin("ns/p")
    q.cluster_event("NodeAdd")
    clock.now += 2
    q.cluster_event("NodeAdd")
    assert q.recorded_events() == 2  # ns/p is still in flight
    q.end("ns/p")
    clock.now += 1
    q.end("ns/other")
    assert q.recorded_events() == 0
    q.cluster_event("NodeAdd")
    assert q.cluster_events() == 3, "the count of events seen never drops with those kept"


def test_wake_flush_and_forget() -> None:
    clock = Clock()
    q = queue(clock)
    for k in ("ns/a", "ns/b", "ns/c"):
        q.begin(k)
        q.unschedulable(k, by_solver=False)
    assert q.wake("ns/a") is True
    assert q.wake("ns/a") is False
    q.scheduled("ns/b")
    assert q.parked() == ["ns/c"]
    assert q.flush() == [Move("ns/c", 0.0, FLUSH)]
    assert q.parked() == []
    q.begin("ns/c")
    assert q.in_flight() == ["ns/c"]
    q.end("ns/c")
    assert q.in_flight() == []


def test_an_event_about_the_pod_during_its_attempt_is_left_to_the_outcome() -> None:
    clock = Clock()
    q = queue(clock)
    q.begin("ns/p")
    assert q.pod_event("ns/p", "ResourceClaimAdd") is False  # in flight: not queued again now
    assert q.unschedulable("ns/p", by_solver=False) == Verdict(0.0, "ResourceClaimAdd")  # no place: at once
    assert q.end("ns/p") is False  # consumed by the verdict
    q.begin("ns/p")
    assert q.pod_event("ns/p", "ResourceClaimUpdate") is False
    assert q.end("ns/p") is True  # the caller decides (a failed attempt keeps its backoff)
    q.begin("ns/p")
    assert q.unschedulable("ns/p", by_solver=False) == Verdict(None)
    assert q.pod_event("ns/p", "ResourceClaimAdd") is True  # parked: unparked, queue it now
    assert q.parked() == []
