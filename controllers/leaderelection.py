"""Leader election on a coordination.k8s.io/v1 Lease, so replicas never act at once.

The protocol is client-go's ``leaderelection`` with a ``LeaseLock``:

- a candidate takes the Lease when it does not exist, is held by nobody, or its holder has
  not renewed it for ``leaseDurationSeconds`` as observed *locally* (we never compare our
  clock with the holder's: expiry is measured from when we last saw the record change);
- every write carries the resourceVersion it read, so two candidates racing for the same
  Lease cannot both win: one gets 409 Conflict;
- the leader renews every ``retry_period``; when it cannot renew within ``renew_deadline``
  it stops leading (before anyone else may take over, since renew_deadline < lease_duration);
- on a clean stop the leader releases the Lease (holder cleared) so a standby takes over at
  once instead of waiting for expiry.

The kubernetes Python client's own ``leaderelection`` only knows ConfigMap locks, hence this.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers.objects import Obj
from dra_solver.service.api import kube

log = logging.getLogger(__name__)


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


def _now_micro(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int((now % 1) * 1e6):06d}Z"


def lease_body(config: ElectionConfig, *, now: float, transitions: int, acquire_time: str | None = None, base: Obj | None = None) -> Obj:
    """The Lease we write to hold leadership (``base``: the copy read, for its version)."""
    stamp = _now_micro(now)
    metadata: Obj = {"name": config.name, "namespace": config.namespace}
    if base is not None:
        metadata = ob.deep_copy(dict(ob.meta(base)))
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": config.identity,
            "leaseDurationSeconds": max(1, round(config.lease_duration)),
            "acquireTime": acquire_time or stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        },
    }


class LeaderElector:
    def __init__(
        self,
        kube_api: kube.Kube,
        config: ElectionConfig,
        *,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube_api
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._clock = clock
        self._wall = wall
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed: Obj | None = None
        self._observed_spec: Any = None
        self._observed_at = 0.0
        self._standing_by_for = ""
        self.transitions_seen = 0

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; the leader gives the Lease up so a standby need not wait."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.renew_deadline + 5)
        if release and self._leading.is_set():
            self._release()
        if self._leading.is_set():
            self._leading.clear()
            self.on_stopped_leading()

    def _run(self) -> None:
        log.info("%s: attempting to acquire lease %s/%s", self.config.identity, self.config.namespace, self.config.name)
        while not self._stop.is_set():
            if self._try_acquire_or_renew():
                break
            self._stop.wait(self.config.retry_period)
        if self._stop.is_set():
            return
        self._leading.set()
        log.info("%s: became leader of lease %s/%s", self.config.identity, self.config.namespace, self.config.name)
        try:
            self.on_started_leading()
        except Exception:
            log.exception("starting the controllers failed")
        last_renew = self._clock()
        while not self._stop.wait(self.config.retry_period):
            if self._try_acquire_or_renew():
                last_renew = self._clock()
                continue
            if self._clock() - last_renew >= self.config.renew_deadline:
                log.error("%s: could not renew lease %s/%s within %.0fs; stopping", self.config.identity, self.config.namespace, self.config.name, self.config.renew_deadline)
                break
        if self._stop.is_set():
            return  # stop() releases and reports
        self._leading.clear()
        self.on_stopped_leading()

    def _observe(self, lease: Obj) -> None:
        spec = ob.spec(lease)
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed_spec:
            self._observed_spec = record
            self._observed_at = self._clock()
        self._observed = lease

    def _try_acquire_or_renew(self) -> bool:
        cfg = self.config
        now = self._wall()
        try:
            current = self.kube.get_lease(cfg.namespace, cfg.name)
        except kube.NotFound:
            try:
                created = self.kube.create_lease(cfg.namespace, lease_body(cfg, now=now, transitions=0))
            except kube.ApiError as err:
                log.info("%s: cannot create lease: %s", cfg.identity, err)
                return False
            self._observe(created)
            return True
        except kube.ApiError as err:
            log.info("%s: cannot read lease: %s", cfg.identity, err)
            return False
        self._observe(current)
        spec = ob.spec(current)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
        if holder and holder != cfg.identity and self._clock() - self._observed_at < duration:
            if holder != self._standing_by_for:
                self._standing_by_for = holder
                log.info("%s: lease %s/%s is held by %s; standing by", cfg.identity, cfg.namespace, cfg.name, holder)
            return False  # held, and renewed recently as far as we can tell
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire = spec.get("acquireTime") if holder == cfg.identity else None
        if holder != cfg.identity:
            transitions += 1
        try:
            updated = self.kube.update_lease(lease_body(cfg, now=now, transitions=transitions, acquire_time=acquire, base=current))
        except kube.ApiError as err:
            log.info("%s: lost the race for lease %s/%s: %s", cfg.identity, cfg.namespace, cfg.name, err)
            return False
        self._observe(updated)
        if holder != cfg.identity:
            self.transitions_seen += 1
        return True

    def _release(self) -> None:
        cfg = self.config
        try:
            current = self.kube.get_lease(cfg.namespace, cfg.name)
            if ob.spec(current).get("holderIdentity") != cfg.identity:
                return
            body = ob.deep_copy(current)
            body["spec"]["holderIdentity"] = None
            body["spec"]["leaseDurationSeconds"] = 1
            body["spec"]["renewTime"] = _now_micro(self._wall())
            self.kube.update_lease(body)
            log.info("%s: released lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
        except kube.ApiError as err:
            log.warning("%s: could not release lease: %s", cfg.identity, err)
