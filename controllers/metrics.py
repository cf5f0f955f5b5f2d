"""Prometheus metrics of the controllers, named as upstream's where upstream has them.

- ``resourceclaim_controller_creates_total{status,admin_access}``: claims created from
  templates (status ``success``/``failure``), as kube-controller-manager counts them;
- ``resourceclaim_controller_resource_claims{allocated}``: claims in the cache;
- ``device_taint_eviction_controller_pod_deletions_total`` and
  ``..._pod_deletion_duration_seconds`` (from the taint's effective time to the deletion);
- ``workqueue_depth{name}``, ``workqueue_retries_total{name}``,
  ``workqueue_queue_duration_seconds{name}`` (how long a key waited before a worker took it):
  as client-go's workqueue metrics;
- ``dra_solver_scheduler_*``: our scheduler (attempts by result, solver call latency, API
  write latency by operation, time from assume to the binding cycle's start, claim write
  conflicts, rollbacks, bindings);
- ``scheduler_queue_incoming_pods_total{event,queue}``: pods moved between the scheduler's
  queues (active, backoff, unschedulable) and the event that moved them, as kube-scheduler's;
- ``dra_solver_leader``: 1 while this replica leads;
- ``dra_solver_events_dropped_total{component}``: Events never recorded (the queue was full,
  the API server refused every try, or the process stopped with them still queued).

Each :class:`ControllerMetrics` owns its registry, so several instances (tests, two replicas in
one process) never collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dra_solver.service.api import no_created_series

LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240)
"""Upstream's buckets for the eviction latency (5 ms to 4 min)."""

WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Waits in queues: client-go's workqueue buckets stop at 10 s; a pod can queue for minutes."""


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        no_created_series()
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.claim_creates = Counter(
            "resourceclaim_controller_creates",
            "Number of ResourceClaims creation requests, categorized by creation status and admin access",
            ["status", "admin_access"],
            registry=r,
        )
        self.resource_claims = Gauge(
            "resourceclaim_controller_resource_claims",
            "Number of ResourceClaims, categorized by allocation status",
            ["allocated"],
            registry=r,
        )
        self.pod_deletions = Counter(
            "device_taint_eviction_controller_pod_deletions",
            "Total number of Pods deleted by DeviceTaintEvictionController since its start.",
            registry=r,
        )
        self.pod_deletion_latency = Histogram(
            "device_taint_eviction_controller_pod_deletion_duration_seconds",
            "Latency, in seconds, between the time when a device taint effect has been activated and a Pod's deletion via DeviceTaintEvictionController.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=r)
        self.queue_retries = Counter("workqueue_retries", "Total number of retries handled by workqueue", ["name"], registry=r)
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            ["name"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.schedule_attempts = Counter(
            "dra_solver_scheduler_schedule_attempts",
            "Scheduling attempts by result: scheduled, unschedulable, waiting (claims not ready), error.",
            ["result"],
            registry=r,
        )
        self.solver_latency = Histogram(
            "dra_solver_scheduler_solver_request_duration_seconds",
            "Latency of calls to the dra-solver service, by RPC and gRPC status code.",
            ["rpc", "code"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.scheduling_latency = Histogram(
            "dra_solver_scheduler_scheduling_attempt_duration_seconds",
            "Duration of one scheduling attempt (gather, filter, solve, write, bind), by result.",
            ["result"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.api_write_latency = Histogram(
            "dra_solver_scheduler_api_write_duration_seconds",
            "Latency of the scheduler's writes to the API server, by operation (claim_finalizer, "
            "claim_status, bind, pod_status).",
            ["operation"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.binding_wait = Histogram(
            "dra_solver_scheduler_binding_queue_duration_seconds",
            "Time from assuming a pod on its node to the start of its binding cycle (claim writes and "
            "bind), i.e. the wait for a free binder.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.claim_write_conflicts = Counter(
            "dra_solver_scheduler_claim_write_conflicts",
            "ResourceClaim writes that hit a resourceVersion conflict and were retried.",
            registry=r,
        )
        self.rollbacks = Counter(
            "dra_solver_scheduler_rollbacks",
            "Scheduling attempts rolled back after a failure (claims restored, reservation released).",
            registry=r,
        )
        self.bindings = Counter("dra_solver_scheduler_bindings", "Pods bound to a node.", registry=r)
        self.pending_pods = Gauge(
            "dra_solver_scheduler_pending_pods",
            "Pods waiting to be scheduled, by queue (active, unschedulable).",
            ["queue"],
            registry=r,
        )
        self.queue_incoming_pods = Counter(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type (as kube-scheduler counts them): "
            "UnschedulableTimeout counts pods that only the periodic flush brought back.",
            ["event", "queue"],
            registry=r,
        )
        self.leader = Gauge("dra_solver_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.events_dropped = Counter(
            "dra_solver_events_dropped",
            "Events never recorded, by reporting component: the send queue was full, every try failed, or the "
            "process stopped with them queued.",
            ["component"],
            registry=r,
        )
        for status in ("success", "failure"):
            for admin in ("false", "true"):
                self.claim_creates.labels(status=status, admin_access=admin)
        for result in ("scheduled", "unschedulable", "waiting", "error"):
            self.schedule_attempts.labels(result=result)
