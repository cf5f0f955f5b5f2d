"""service.python_cpu: the interpreter's threads pinned to one CPU, threads they start later
inherit it, and the pinning is given back."""

from __future__ import annotations

import os
import threading

import pytest

from dra_solver.service.python_cpu import allowed_cpus, choose_cpu, pin_python_threads

USABLE = allowed_cpus()


def test_choose_cpu_reads_the_flag() -> None:
    assert choose_cpu("none", (0, 1)) is None
    assert choose_cpu("auto", (0, 1, 2)) == 2
    assert choose_cpu("auto", (3,)) is None  # one CPU: nothing to keep apart
    assert choose_cpu(" 1 ", (0, 1)) == 1
    assert choose_cpu("auto", ()) is None
    with pytest.raises(ValueError, match=r"CPU 5 is not one this process may run on \(0,1\)"):
        choose_cpu("5", (0, 1))
    with pytest.raises(ValueError, match="not none, auto or a CPU number: 'x'"):
        choose_cpu("x", (0, 1))
    with pytest.raises(ValueError, match="cannot pin threads"):
        choose_cpu("0", ())


@pytest.mark.skipif(len(USABLE) < 2, reason="one CPU: pinning changes nothing to observe")
def test_python_threads_are_pinned_and_threads_they_start_inherit_it_until_undone() -> None:
    cpu = USABLE[-1]
    release = threading.Event()
    started = threading.Event()
    seen: dict[str, set[int]] = {}

    def idle() -> None:
        started.set()
        release.wait(30)

    def child() -> None:
        seen["child"] = os.sched_getaffinity(0)

    before = os.sched_getaffinity(0)
    waiting = threading.Thread(target=idle)
    waiting.start()
    started.wait(10)
    undo = pin_python_threads(cpu)
    try:
        assert os.sched_getaffinity(0) == {cpu}
        assert waiting.native_id is not None and os.sched_getaffinity(waiting.native_id) == {cpu}
        later = threading.Thread(target=child)
        later.start()
        later.join()
        assert seen["child"] == {cpu}
    finally:
        undo()
        release.set()
        waiting.join()
    assert os.sched_getaffinity(0) == before
