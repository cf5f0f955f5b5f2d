"""Prometheus metrics of the kubelet plugin, served on ``--metrics-port`` (service/httpendpoint).

- ``dra_solver_kubelet_plugin_claims_total{operation,outcome}``: claims the kubelet asked to
  prepare or unprepare (``operation``), by ``outcome`` (``success``, ``error``): one per claim,
  so a batch with one bad claim counts one error and the rest as successes;
- ``dra_solver_kubelet_plugin_operation_duration_seconds{operation,outcome}``: wall time of
  each NodePrepareResources / NodeUnprepareResources call (``error`` when any claim failed);
- ``dra_solver_kubelet_plugin_prepared_claims``: claims prepared on this node now (the
  checkpoint's PrepareCompleted entries);
- ``dra_solver_kubelet_plugin_checkpoint_writes_total{outcome}``: checkpoint writes;
- ``dra_solver_kubelet_plugin_device_health_events_total{health}``: device health changes
  (``Healthy``, ``Unhealthy``, ``Unknown``), each also a device taint on the published slices.

Each :class:`Metrics` owns its registry (several plugins in one test process never collide).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dra_solver.service.api import no_created_series

OPERATIONS = ("prepare", "unprepare")
OUTCOMES = ("success", "error")
HEALTH_STATES = ("Healthy", "Unhealthy", "Unknown")
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        no_created_series()
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.claims = Counter(
            "dra_solver_kubelet_plugin_claims_total",
            "Claims the kubelet asked to prepare or unprepare, by operation and outcome (one per claim).",
            ["operation", "outcome"],
            registry=r,
        )
        self.operation_duration = Histogram(
            "dra_solver_kubelet_plugin_operation_duration_seconds",
            "Wall time of NodePrepareResources and NodeUnprepareResources calls, by operation and outcome "
            "(error when any claim of the call failed).",
            ["operation", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.prepared_claims = Gauge(
            "dra_solver_kubelet_plugin_prepared_claims",
            "Claims prepared on this node now (PrepareCompleted in the checkpoint).",
            registry=r,
        )
        self.checkpoint_writes = Counter(
            "dra_solver_kubelet_plugin_checkpoint_writes_total",
            "Checkpoint writes by outcome (success, error).",
            ["outcome"],
            registry=r,
        )
        self.health_events = Counter(
            "dra_solver_kubelet_plugin_device_health_events_total",
            "Device health changes by the new health (Healthy, Unhealthy, Unknown).",
            ["health"],
            registry=r,
        )
        for operation in OPERATIONS:
            for outcome in OUTCOMES:
                self.claims.labels(operation=operation, outcome=outcome)
        for outcome in OUTCOMES:
            self.checkpoint_writes.labels(outcome=outcome)
        for health in HEALTH_STATES:
            self.health_events.labels(health=health)

    def observe_operation(self, operation: str, *, errors: int, total: int, seconds: float) -> None:
        """One call: ``total`` claims of which ``errors`` failed."""
        self.claims.labels(operation=operation, outcome="success").inc(total - errors)
        self.claims.labels(operation=operation, outcome="error").inc(errors)
        outcome = "error" if errors else "success"
        self.operation_duration.labels(operation=operation, outcome=outcome).observe(seconds)

    def checkpoint_written(self, ok: bool) -> None:
        self.checkpoint_writes.labels(outcome="success" if ok else "error").inc()

    def health_changed(self, health: str) -> None:
        self.health_events.labels(health=health if health in HEALTH_STATES else "Unknown").inc()
