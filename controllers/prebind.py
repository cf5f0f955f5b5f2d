"""Pods waiting in PreBind for their devices' binding conditions, without holding a worker.

kube-scheduler binds in a goroutine of its own per pod, so a pod that waits up to ten minutes
for a fabric-attached device never stops other pods from being scheduled. Here one thread
watches every waiting pod: the claims cache's events wake it (and a one-second tick, so that
time-outs are seen without events), it asks :func:`controllers.bindingconditions.pod_state`
about each pod, and hands the ones that are decided to their ``on_done`` callback (bind, or
roll back and try again), outside its lock. Stopping drops the waiters: their claims stay
allocated and reserved, and the next scheduler finds the pod and waits again, as upstream's
does after a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dra_solver.controllers import bindingconditions as bc
from dra_solver.controllers.objects import Obj

log = logging.getLogger(__name__)

TICK = 1.0
"""Seconds between checks when no claim changes (time-outs need no event)."""


@dataclass
class _Waiter:
    key: str
    claims: tuple[str, ...]
    deadline: float
    """``clock()`` time after which the wait ends (upstream: PreBind's poll timeout)."""
    on_done: Callable[[bc.BindingState], None]


class BindingWaiter:
    def __init__(
        self,
        get_claim: Callable[[str], Obj | None],
        *,
        timeout: float = bc.DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.get_claim = get_claim
        self.timeout = timeout
        self.clock = clock
        self.wall = wall
        self._waiters: dict[str, _Waiter] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._changed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            self._stop = False
        self._thread = threading.Thread(target=self._loop, name="scheduler-prebind", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._waiters.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def add(self, key: str, claims: Sequence[str], on_done: Callable[[bc.BindingState], None]) -> None:
        """Wait for ``claims`` (keys) on behalf of pod ``key``; ``on_done`` gets the verdict."""
        with self._cond:
            self._waiters[key] = _Waiter(key, tuple(claims), self.clock() + self.timeout, on_done)
            self._changed = True
            self._cond.notify_all()

    def waiting(self) -> list[str]:
        with self._cond:
            return sorted(self._waiters)

    def is_waiting(self, key: str) -> bool:
        with self._cond:
            return key in self._waiters

    def claims_changed(self) -> None:
        """A claim changed in the cache: look again at once."""
        with self._cond:
            if self._waiters:
                self._changed = True
                self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._changed and not self._stop:
                    self._cond.wait(TICK)
                if self._stop:
                    return
                self._changed = False
                waiters = list(self._waiters.values())
            for waiter in waiters:
                state = self._decide(waiter)
                if state.kind == bc.PENDING:
                    continue
                with self._cond:
                    if self._waiters.get(waiter.key) is not waiter:
                        continue  # stopped or replaced meanwhile
                    del self._waiters[waiter.key]
                try:
                    waiter.on_done(state)
                except Exception:
                    log.exception("pod %s: finishing the binding-condition wait failed", waiter.key)

    def _decide(self, waiter: _Waiter) -> bc.BindingState:
        state = bc.pod_state([self.get_claim(k) for k in waiter.claims], now=self.wall(), timeout=self.timeout)
        if state.kind == bc.PENDING and self.clock() >= waiter.deadline:
            return bc.BindingState(bc.TIMEOUT, f"device binding timeout after {self.timeout:g}s: {state.message}")
        return state
