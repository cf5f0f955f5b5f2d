"""No lost wakeups, on the real kube-apiserver: every pod that can be placed is bound because of
the event that made it fit, never because of the periodic flush (an hour away in these tests,
so a lost wakeup fails by timeout).

The issue this guards against: driven by an independent REST stand-in, pods whose claims were
created while the scheduler was looking at them stayed Pending until the flush.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from dra_solver.controllers import objects as ob
from tests import builders as b
from tests.controllers.conftest import Env, wait_for

BOUND_WITHIN = 15.0
"""Seconds a test waits for a pod it made schedulable (the flush period is 3600 s)."""


def flushed(manager: Any) -> float:
    """Pods that only the periodic flush brought back (none may be)."""
    value: float = manager.metrics.queue_incoming_pods.labels(event="UnschedulableTimeout", queue="active")._value.get()
    return value


def test_pods_created_before_their_claims_and_devices_are_bound_without_a_flush(env: Env) -> None:
    env.cluster(nodes=3, gpus=4, slices=False)
    env.create(b.template("one-gpu"))
    manager = env.manager()
    # Pods first: six with claims that do not exist yet, six with templates; no devices anywhere.
    named = [f"named-{i}" for i in range(6)]
    templated = [f"tmpl-{i}" for i in range(6)]
    for n in named:
        env.create(b.pod(n, claims={"gpu": f"claim-{n}"}))
    for n in templated:
        env.create(b.pod(n, templates={"gpu": "one-gpu"}))
    # Every pod has been tried and found wanting (claims missing, or no devices).
    wait_for(lambda: len(manager.scheduler.unschedulable_pods()) == 12, what="all twelve pods parked")
    # Now the claims and the devices arrive, interleaved, while attempts race with them.
    for i, n in enumerate(named):
        env.create(b.ONE_GPU.named(f"claim-{n}").obj())
        if i % 2 == 0:
            env.create(b.gpu_slice(f"node-{chr(ord('a') + i // 2)}", count=4))
    start = time.monotonic()
    wait_for(lambda: len(env.bound_pods()) == 12, timeout=BOUND_WITHIN, what="all twelve pods bound")
    elapsed = time.monotonic() - start
    assert elapsed < BOUND_WITHIN
    assert flushed(manager) == 0
    devices = env.allocated_devices()
    assert len(devices) == len(set(devices)) == 12


class SliceDuringAttempt:
    """The solver client, except that the first Schedule call publishes a slice right after the
    solver answered "no node fits" and returns only once the scheduler's cache has the slice and
    its scheduling queue has recorded a cluster event since: the slice's event is handled while
    the attempt is still in flight, deterministically (the cache is filled before the event
    handlers run, so waiting for the cache alone let the attempt end first under load)."""

    def __init__(self, client: Any, env: Env, node: str, seen: Any, events: Any) -> None:
        self._client = client
        self._env = env
        self._node = node
        self._seen = seen
        self._events = events
        self._lock = threading.Lock()
        self.fired = False
        self.answers: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        resp = self._client.schedule(*args, **kwargs)
        self.answers.append(resp.node)
        with self._lock:
            fire = not self.fired and not resp.node
            self.fired = self.fired or fire
        if fire:
            before = self._events()
            self._env.create(b.gpu_slice(self._node, count=2))
            wait_for(lambda: self._seen(f"{self._node}-gpus") and self._events() > before, what="the scheduler to see the slice")
        return resp


def test_a_slice_published_during_an_attempt_is_not_lost(env: Env) -> None:
    env.cluster(nodes=1, gpus=2, slices=False)
    env.create(b.template("one-gpu"))
    assert env.solver is not None
    manager = env.manager(start=False)
    slices = manager.scheduler.slices.store
    hooked = SliceDuringAttempt(env.solver.client, env, "node-a", lambda name: slices.get(name) is not None,
                                manager.scheduler.pending.cluster_events)
    manager.scheduler.solver.client = hooked
    manager.start()
    env.create(b.pod("p", templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound("p"), timeout=BOUND_WITHIN, what="the pod bound")
    assert hooked.fired, "the first attempt found no devices and the slice came during it"
    assert hooked.answers[0] == "" and hooked.answers[-1] == "node-a"
    assert flushed(manager) == 0
    # The slice's event brought the pod back: to the active queue, or to backoff when an earlier
    # event (its claim being created) had already ended one attempt (a CI run under load did).
    incoming = manager.metrics.queue_incoming_pods
    retried = sum(incoming.labels(event="ResourceSliceAdd", queue=q)._value.get() for q in ("active", "backoff"))
    assert retried >= 1, "the slice's event did not bring the pod back"


def test_a_claim_freed_during_an_attempt_is_not_lost(env: Env) -> None:
    """One device; pod ``second`` is being refused it while ``first``, its holder, is deleted.
    The freeing (claim deallocated and deleted) lands during the refused attempt."""
    env.cluster(nodes=1, gpus=1)
    env.create(b.template("one-gpu"))
    assert env.solver is not None
    manager = env.manager(start=False)
    claims = manager.scheduler.claims.store
    real = env.solver.client
    state: dict[str, Any] = {"fired": False}

    class FreeDuringAttempt:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def schedule(self, claims_: Any, *args: Any, **kwargs: Any) -> Any:
            resp = real.schedule(claims_, *args, **kwargs)
            if not resp.node and not state["fired"] and env.bound("first"):
                state["fired"] = True
                [held] = env.claims_of(env.pod("first") or {})
                env.delete("Pod", "first", force=True)
                wait_for(lambda: claims.get(ob.key(held)) is None, what="the scheduler's cache to see the claim go")
            return resp

    manager.scheduler.solver.client = FreeDuringAttempt()
    manager.start()
    env.create(b.pod("first", templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound("first"), what="first bound")
    env.create(b.pod("second", templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound("second"), timeout=BOUND_WITHIN, what="second bound once first's device is free")
    assert state["fired"]
    assert flushed(manager) == 0
