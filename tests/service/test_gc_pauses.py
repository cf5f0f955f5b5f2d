"""The serving process's garbage-collection policy (service.gc_pauses): short young
collections, full collections on a clock rather than by growth, everything put back on stop."""

from __future__ import annotations

import argparse
import gc
import threading
import time
from typing import Any

import pytest

from dra_solver.service import gc_pauses
from dra_solver.service.commands import serve
from tests.service.conftest import DEMO


def _full_collections() -> tuple[list[float], Any]:
    seen: list[float] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(time.monotonic())

    return seen, note


def _collector_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gc-full-collections"]


def test_full_collections_come_on_the_clock_and_stop_puts_the_thresholds_back() -> None:
    before = gc.get_threshold()
    seen, note = _full_collections()
    gc.callbacks.append(note)
    try:
        stop = gc_pauses.hold_full_collections(0.05, share=1.0)
        try:
            young, middle, full = gc.get_threshold()
            assert (young, middle) == (700, 1)
            assert full >= 1_000_000  # never by count
            deadline = time.monotonic() + 10
            while len(seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(seen) >= 2, "no full collection on the clock"
        finally:
            stop()
        stop()  # idempotent
        assert gc.get_threshold() == before
        assert not _collector_threads()
        count = len(seen)
        time.sleep(0.2)
        assert len(seen) == count, "full collections went on after stop"
    finally:
        gc.callbacks.remove(note)


def test_automatic_full_collections_stay_off_while_held() -> None:
    """As many new survivors as everything tracked so far: the collector's own rule (a full
    collection once survivors reach a quarter of what it keeps) would run one. Held, none comes."""
    seen, note = _full_collections()
    stop = gc_pauses.hold_full_collections(3600)
    gc.callbacks.append(note)
    kept: list[list[int]] = []
    try:
        for i in range(max(100_000, len(gc.get_objects()))):
            kept.append([i])
        assert not seen
    finally:
        gc.callbacks.remove(note)
        stop()
        del kept


def test_a_slow_full_collection_holds_the_next_one_off() -> None:
    """At most ``share`` of the time: a collection of 1 ms or more with a share of a millionth
    waits at least 1,000 s for the next, whatever the interval."""
    seen, note = _full_collections()
    gc.callbacks.append(note)
    try:
        stop = gc_pauses.hold_full_collections(0.05, share=1e-6)
        try:
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                time.sleep(0.01)
            assert seen, "no full collection on the clock"
            time.sleep(0.5)
            assert len(seen) == 1
        finally:
            stop()
    finally:
        gc.callbacks.remove(note)


@pytest.mark.parametrize(("interval", "share", "message"), [
    (0.0, 0.001, "interval: must be positive"), (-1.0, 0.001, "interval: must be positive"),
    (60.0, 0.0, "share: must be in"), (60.0, 1.5, "share: must be in"),
])
def test_bad_settings_are_refused(interval: float, share: float, message: str) -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match=message):
        gc_pauses.hold_full_collections(interval, share=share)
    assert gc.get_threshold() == before


def test_serve_holds_the_policy_once_loaded_and_lets_go_on_stop() -> None:
    before = gc.get_threshold()
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["--inventory", str(DEMO / "cluster.yaml"), "--port", "0", "--metrics-port", "-1", "--log-level", "warning"])
    service = serve.build(args)
    try:
        service.listen()
        assert gc.get_threshold() == before  # not before the inventory is loaded
        service.load()
        assert gc.get_threshold()[1:] == (1, 1_000_000_000)
        assert len(_collector_threads()) == 1
    finally:
        service.stop(0)
    assert gc.get_threshold() == before
    assert not _collector_threads()
