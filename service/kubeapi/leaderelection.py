"""Leader election on a coordination.k8s.io/v1 Lease, so replicas never act at once (the
controllers use it; it lives here because only ``service/kubeapi`` talks to the client).

The protocol is the kubernetes client's own ``kubernetes.leaderelection`` with its
``LeaseLock`` (client-go's algorithm): a candidate takes the Lease when it does not exist, has
no holder, or has not changed for the lease duration as observed locally (clocks are never
compared); every write carries the resourceVersion it read, so of two racing candidates one
gets 409 Conflict; the leader renews every retry period and stops leading when it cannot renew
within the renew deadline (before anyone may take over, since renew deadline < lease duration).

The library as shipped (client 37.0.2) needs five things around it; each is shown by a test in
tests/controllers/test_leaderelection_library.py:

1. ``LeaseLock`` talks through the process-wide default client (``CoordinationV1Api()``), not
   the one built from ``--kubeconfig``/``--in-cluster``, and sends requests without a timeout:
   :class:`_LeaseApi` stands in for it on our client, each request bounded by the renew deadline.
2. Only ``ApiException`` counts as a failed attempt: a connection error (API server down)
   escapes ``LeaderElection.run()``, so a leader would stop renewing without ever calling
   ``onstopped_leading`` and keep acting. :class:`_LeaseApi` turns it into an ``ApiException``.
3. ``Config`` ends the process (``sys.exit``) on a bad value and refuses periods under one
   second (Go's ``< 1`` means one nanosecond); a fractional lease duration crashes the lock
   (``int("15.0")``). :class:`ElectionConfig` checks our flags with ValueError and
   :class:`_Config` hands the library a whole-second lease duration.
4. ``leaseTransitions`` is never counted: :class:`_Lock` adds one when the holder changes.
5. ``run()`` blocks for as long as it campaigns or leads and cannot be stopped or release the
   Lease: after :meth:`LeaderElector.stop` every Lease request raises :class:`_Stopped`, which
   ends the library's loop at its next retry; ``stop`` then releases the Lease itself.

Kept as the library does them (unlike client-go): a standby measures expiry with its own
``--lease-duration`` rather than the holder's ``leaseDurationSeconds``, on the wall clock.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from dra_solver.service.kubeapi import client as kube

log = logging.getLogger(__name__)

# The library logs every attempt at INFO (a standby: every retry period, for as long as it
# waits); the transitions are logged here instead.
logging.getLogger("leaderelection").setLevel(logging.WARNING)


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election: identity must not be empty")
        if not (self.lease_duration > self.renew_deadline > self.retry_period > 0):
            raise ValueError("leader election: need lease-duration > renew-deadline > retry-period > 0")


class _Stopped(Exception):
    """Raised into the library's loop once we stop: the loop has no exit of its own."""


class _LeaseApi:
    """The three calls ``LeaseLock`` makes, on our client, bounded, failing only with
    ``ApiException`` (a failed attempt), or with :class:`_Stopped` once stopped."""

    def __init__(self, api_client: Any, *, timeout: float) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.timeout = timeout
        self._gate = threading.Lock()
        self._stopped = False

    def stop(self) -> None:
        """After this returns no request is in flight and none will be sent."""
        with self._gate:
            self._stopped = True

    def read_namespaced_lease(self, name: str, namespace: str) -> Any:
        return self._call(self.api.read_namespaced_lease, name, namespace)

    def create_namespaced_lease(self, namespace: str, body: Any) -> Any:
        return self._call(self.api.create_namespaced_lease, namespace, body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any) -> Any:
        return self._call(self.api.replace_namespaced_lease, name, namespace, body)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._gate:
            if self._stopped:
                raise _Stopped
            try:
                return fn(*args, _request_timeout=self.timeout)
            except ApiException:
                raise
            except Exception as err:  # unreachable, timed out, TLS: a failed attempt, as in client-go
                raise ApiException(status=0, reason=f"{type(err).__name__}: {err}") from err


class _Lock(LeaseLock):
    """``LeaseLock`` on :class:`_LeaseApi`, counting leaseTransitions, saying whom it waits for."""

    def __init__(self, config: ElectionConfig, api: _LeaseApi) -> None:
        super().__init__(config.name, config.namespace, config.identity)  # type: ignore[no-untyped-call]
        self.api_instance = api  # type: ignore[assignment]  # duck-typed: the three calls it makes
        self._standing_by_for = ""

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        found, record = super().get(name, namespace)  # type: ignore[no-untyped-call]
        holder = (record.holder_identity or "") if found else ""
        if holder and holder != self.identity and holder != self._standing_by_for:
            log.info("%s: lease %s/%s is held by %s; standing by", self.identity, namespace, name, holder)
        self._standing_by_for = holder
        return found, record

    def get_lease_spec(self, leader_election_record: Any, current_spec: Any = None) -> Any:
        previous = current_spec.holder_identity if current_spec is not None else None
        transitions = (current_spec.lease_transitions or 0) if current_spec is not None else 0
        spec = super().get_lease_spec(leader_election_record, current_spec)  # type: ignore[no-untyped-call]
        if current_spec is not None and previous != leader_election_record.holder_identity:
            transitions += 1
        spec.lease_transitions = transitions
        return spec


class _Config(electionconfig.Config):
    """The library's settings without its checks (they ``sys.exit`` and refuse sub-second
    periods): :class:`ElectionConfig` has checked ours."""

    def __init__(self, lock: _Lock, config: ElectionConfig, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        self.jitter_factor = 1.2
        self.lock = lock
        self.lease_duration = max(1, math.ceil(config.lease_duration))  # leaseDurationSeconds is whole seconds
        self.renew_deadline = config.renew_deadline
        self.retry_period = config.retry_period
        self.onstarted_leading = on_started
        self.onstopped_leading = on_stopped


class LeaderElector:
    """Campaigns for the Lease in a thread of its own; ``on_started_leading`` runs (in another
    thread) once it leads, ``on_stopped_leading`` once it no longer does: lost or stopped."""

    def __init__(
        self,
        kube_api: kube.Kube,
        config: ElectionConfig,
        *,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
    ) -> None:
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._api = _LeaseApi(kube_api.api_client, timeout=config.renew_deadline)
        lock = _Lock(config, self._api)
        self._election = leaderelection.LeaderElection(_Config(lock, config, self._started, self._stopped_leading))  # type: ignore[no-untyped-call]
        self._leading = threading.Event()
        self._state = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; a leader stops acting, then gives the Lease up so a standby need not
        wait. The library's thread ends at its next attempt (within a retry period)."""
        with self._state:
            self._stopping = True
        self._api.stop()
        was_leading = self._leading.is_set()
        self._stopped_leading()
        if release and was_leading:
            self._release()

    def _run(self) -> None:
        cfg = self.config
        log.info("%s: attempting to acquire lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
        try:
            self._election.run()  # type: ignore[no-untyped-call]  # returns only after it led and could not renew (onstopped_leading called)
        except _Stopped:
            pass
        except Exception:
            log.exception("%s: leader election failed", cfg.identity)
            self._stopped_leading()

    def _started(self) -> None:
        with self._state:
            if self._stopping:
                return
            self._leading.set()
        log.info("%s: became leader of lease %s/%s", self.config.identity, self.config.namespace, self.config.name)
        self.on_started_leading()

    def _stopped_leading(self) -> None:
        with self._state:
            if not self._leading.is_set():
                return
            self._leading.clear()
            stopping = self._stopping
        if not stopping:
            cfg = self.config
            log.error("%s: could not renew lease %s/%s within %gs; stopping", cfg.identity, cfg.namespace, cfg.name, cfg.renew_deadline)
        self.on_stopped_leading()

    def _release(self) -> None:
        """Clear the holder (as client-go's ReleaseOnCancel does), keeping the version read."""
        cfg, api = self.config, self._api
        try:
            lease = api.api.read_namespaced_lease(cfg.name, cfg.namespace, _request_timeout=api.timeout)
            if lease.spec is None or lease.spec.holder_identity != cfg.identity:
                return
            now = datetime.now(UTC)
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.acquire_time = now
            lease.spec.renew_time = now
            api.api.replace_namespaced_lease(cfg.name, cfg.namespace, lease, _request_timeout=api.timeout)
            log.info("%s: released lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
        except Exception as err:  # the standby then waits for expiry
            log.warning("%s: could not release lease %s/%s: %s", cfg.identity, cfg.namespace, cfg.name, err)
