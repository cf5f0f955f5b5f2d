"""Runs the enabled controllers together: shared caches, leader election, metrics.

Caches start at once on every replica (a standby is warm and takes over quickly); workers
run only while this replica holds the Lease. Losing the Lease stops the workers and ends
:meth:`Manager.wait` with ``lost_leadership`` set, and the process exits so that it restarts
clean, as kube-controller-manager does: a replica that might be acting on stale beliefs must
not keep going.
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dra_solver.controllers.claim_controller import ClaimController
from dra_solver.controllers.cluster import Cluster
from dra_solver.controllers.eviction_controller import EvictionController
from dra_solver.controllers.features import KubeFeatures
from dra_solver.controllers.gangscheduler import GangScheduler
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.runtime import EVENT_SENDERS, Events
from dra_solver.controllers.scheduler import Scheduler, Solver
from dra_solver.service.api import ElectionConfig, LeaderElector, kube

log = logging.getLogger(__name__)

CONTROLLERS = ("claim", "scheduler", "eviction")

NEEDS: dict[str, tuple[str, ...]] = {
    "claim": ("pods", "claims", "templates", "podgroups"),
    "scheduler": ("pods", "claims", "nodes", "slices", "classes", "podgroups"),
    "eviction": ("pods", "claims", "slices", "rules"),
}
"""Which caches each controller reads."""


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass
class Options:
    enable: frozenset[str] = frozenset(CONTROLLERS)
    scheduler_name: str = "dra-solver"
    claim_workers: int = 32
    """Upstream's claim controller runs 50 syncs at once; each is one or two API writes. With 8,
    pods created in a burst waited seconds in its queue before their claims existed (the
    scheduler comparison's time split), which held back everything after."""
    scheduler_workers: int = 16
    """kube-scheduler's parallelism: an attempt is mostly waiting for the solver and three API
    writes, so workers overlap those waits (4 left pods queueing for seconds in a burst)."""
    scheduler_binders: int = 64
    """Binding cycles (claim writes and bind) run at once, off the scheduling workers, as
    kube-scheduler binds asynchronously (a goroutine per pod); 0 binds on the worker. A cycle is
    three API writes that take 100-200 ms each on a busy API server, so 16 capped binding at
    about 35 pods/s (the scheduler comparison, 5,000 pods: pods waited 6 s for a binder)."""
    solver_in_flight: bool = False
    """Send our in-flight claims with every Schedule (round-robin solver replicas); see
    ``--solver-in-flight``."""
    eviction_workers: int = 2
    leader_elect: bool = False
    lease_namespace: str = "kube-system"
    lease_name: str = "dra-solver-controllers"
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    solver_timeout: float = 10.0
    reservation_ttl: float = 60.0
    policy: str = ""
    explain: bool = True
    flush_interval: float = 60.0
    backoff_initial: float = 1.0
    backoff_max: float = 10.0
    admin_access: bool = True
    watch_timeout: int = 300
    sync_timeout: float = 120.0
    events: bool = True
    features: KubeFeatures = field(default_factory=KubeFeatures)
    """Kubernetes feature gates (``--feature-gates``), v1.37's defaults."""
    binding_timeout: float = 600.0
    """How long the scheduler waits for binding conditions (kube-scheduler's ``bindingTimeout``)."""
    rule_status_period: float = 10.0
    """Shortest time between DeviceTaintRule status updates while eviction is in progress."""

    def __post_init__(self) -> None:
        unknown = set(self.enable) - set(CONTROLLERS)
        if unknown:
            raise ValueError(f"--enable: unknown controller(s) {', '.join(sorted(unknown))}: choose from {', '.join(CONTROLLERS)}")
        if not self.enable:
            raise ValueError("--enable: at least one controller is required")

    def connections(self) -> int:
        """API connections the workers may hold at once (each waits on its own request), with
        room for the informers' watches, the Lease and the event senders: a smaller pool
        discards connections and the next request handshakes again."""
        watches_and_lease = 16
        workers = self.claim_workers + self.scheduler_workers + self.scheduler_binders + self.eviction_workers
        return workers + watches_and_lease + EVENT_SENDERS


def parse_enable(text: str) -> frozenset[str]:
    return frozenset(p.strip() for p in text.split(",") if p.strip())


class Manager:
    def __init__(
        self,
        kube_api: kube.Kube,
        options: Options,
        *,
        solver_client: Any = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.kube = kube_api
        self.options = options
        self.metrics = metrics or ControllerMetrics()
        resources: set[str] = set()
        for name in options.enable:
            resources.update(NEEDS[name])
        self.cluster = Cluster(kube_api, resources=sorted(resources), watch_timeout=options.watch_timeout)
        self.controllers: dict[str, Any] = {}
        if "claim" in options.enable:
            self.controllers["claim"] = ClaimController(
                kube_api, self.cluster, self.metrics, workers=options.claim_workers, admin_access_enabled=options.admin_access,
                events=self._events("resource_claim"),
            )
        if "scheduler" in options.enable:
            if solver_client is None:
                raise ValueError("the scheduler needs the solver service: give --solver ADDRESS")
            solver = Solver(solver_client, self.metrics, timeout=options.solver_timeout, reservation_ttl=options.reservation_ttl,
                            policy=options.policy, feature_gates=options.features.solver_gates())
            self.controllers["scheduler"] = Scheduler(
                kube_api, self.cluster, self.metrics, solver, scheduler_name=options.scheduler_name, workers=options.scheduler_workers,
                binders=options.scheduler_binders, send_in_flight=options.solver_in_flight,
                explain=options.explain, backoff_initial=options.backoff_initial, backoff_max=options.backoff_max,
                flush_interval=options.flush_interval, events=self._events(options.scheduler_name),
                features=options.features, binding_timeout=options.binding_timeout,
            )
            GangScheduler(self.controllers["scheduler"])  # PodGroups with a gang policy, placed whole
        if "eviction" in options.enable:
            self.controllers["eviction"] = EvictionController(
                kube_api, self.cluster, self.metrics, workers=options.eviction_workers, events=self._events("device-taint-eviction-controller"),
                rule_status_period=options.rule_status_period,
            )
        self.elector: LeaderElector | None = None
        if options.leader_elect:
            config = ElectionConfig(
                options.lease_namespace, options.lease_name, options.identity,
                lease_duration=options.lease_duration, renew_deadline=options.renew_deadline, retry_period=options.retry_period,
            )
            self.elector = LeaderElector(kube_api, config, on_started_leading=self._start_controllers, on_stopped_leading=self._stop_controllers)
        self.leading = threading.Event()
        self.lost_leadership = threading.Event()
        self.failure = ""
        """Why the manager ended on its own, when it did (caches that never synced)."""
        self._done = threading.Event()
        self._running = False
        self._lock = threading.Lock()

    def _events(self, component: str) -> Events:
        return Events(self.kube if self.options.events else None, component,
                      on_drop=self.metrics.events_dropped.labels(component=component).inc)

    @property
    def scheduler(self) -> Scheduler:
        s: Scheduler = self.controllers["scheduler"]
        return s

    def start(self) -> Manager:
        self.cluster.start()
        if self.elector is not None:
            self.elector.start()
        else:
            self._start_controllers()
        return self

    def _start_controllers(self) -> None:
        if not self.cluster.wait_synced(self.options.sync_timeout, stop=self._done):
            if not self._done.is_set():
                pending = sorted(n for n, i in self.cluster.informers.items() if not i.has_synced())
                self.failure = f"caches did not sync within {self.options.sync_timeout:g}s: {', '.join(pending)}"
                log.error("%s", self.failure)
                self._done.set()
            return
        with self._lock:
            if self._running or self._done.is_set():
                return
            self._running = True
            for name in CONTROLLERS:
                if name in self.controllers:
                    self.controllers[name].start()
        self.metrics.leader.set(1)
        self.leading.set()
        log.info("controllers running: %s", ", ".join(n for n in CONTROLLERS if n in self.controllers))

    def _stop_controllers(self) -> None:
        with self._lock:
            was_running = self._running
            self._running = False
            for c in self.controllers.values():
                c.stop()
        for c in self.controllers.values():
            # Best effort: what was decided gets recorded if the API answers in time.
            if not c.events.flush(timeout=1.0):
                log.info("%s: %d events not recorded", c.name, c.events.discard())
        self.metrics.leader.set(0)
        self.leading.clear()
        if was_running and not self._done.is_set():
            self.lost_leadership.set()
            self._done.set()

    def stop(self) -> None:
        """Stop workers, give up the Lease, stop the caches."""
        self._done.set()
        if self.elector is not None:
            self.elector.stop(release=True)
        self._stop_controllers()
        self.cluster.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped or leadership is lost; True when it ended."""
        return self._done.wait(timeout)

    def idle(self, names: Iterable[str] | None = None) -> bool:
        """No work queued or in progress (tests use this to wait for quiescence)."""
        for name in names or self.controllers:
            c = self.controllers.get(name)
            if c is not None and not (c.queue.idle() and c.events.idle()):
                return False
            if isinstance(c, Scheduler) and c.binding():
                return False
        return True
