"""Prometheus metrics of the allocation service, on their own registry and HTTP endpoint.

Names start with ``dra_solver_``; label names follow upstream Kubernetes where one exists
(``driver_name``, ``status``, ``grpc_status_code``). Labels carry only enumerations (RPC,
allocator, outcome, status, kind, driver), never request contents such as claim names: a label
value a caller could choose (an unknown allocator, the driver of an inline inventory) is mapped
to a fixed value first (``invalid``, ``other``), so /metrics stays bounded whatever callers send.
``docs/metrics.md`` lists every series; a test keeps the two in step, and another runs
``promtool check metrics`` on the endpoint. Each RPC is timed by exactly one histogram:
``dra_solver_allocation_duration_seconds`` for the ones that solve (:data:`SOLVING_RPCS`),
``dra_solver_request_duration_seconds`` for the others.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dra_solver.service.httpendpoint import HttpEndpoint, Readiness, always_ready, no_created_series

PROBLEM_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "DeviceTaintRule", "Node", "Namespace")
"""Kinds an inventory problem is counted under; anything else counts as ``other``."""

SOLVING_RPCS = frozenset({"Allocate", "Schedule", "Explain", "ScheduleGroup"})
"""The RPCs that run an allocator; Reserve, Unreserve and GetInventory only keep books."""

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (0, 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
SCORE_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)
NODE_BUCKETS = (0, 1, 10, 100, 500, 1000, 2500, 5000, 10000, 50000)


class Metrics:
    """Every series the service exports. One instance per server (its own registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        no_created_series()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.allocation_duration = Histogram(
            "dra_solver_allocation_duration_seconds",
            "Wall time of an allocation question (one Allocate, Schedule or Explain call), by RPC, allocator and outcome.",
            ["rpc", "allocator", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.request_duration = Histogram(
            "dra_solver_request_duration_seconds",
            "Wall time of the calls that do not solve (Reserve, Unreserve, GetInventory), by RPC and outcome.",
            ["rpc", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.solver_status = Counter(
            "dra_solver_solves_total",
            "Solver runs by allocator and final status (OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, FOUND, EXHAUSTED, ...).",
            ["allocator", "status"],
            registry=r,
        )
        self.model_variables = Histogram(
            "dra_solver_model_variables",
            "Decision variables of each CP-SAT model built.",
            ["allocator"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.model_constraints = Histogram(
            "dra_solver_model_constraints",
            "Constraints of each CP-SAT model built.",
            ["allocator"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.first_available_score = Histogram(
            "dra_solver_first_available_score",
            "FirstAvailable score (the scheduler's) of each allocation returned.",
            ["allocator"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.optimality_gap = Histogram(
            "dra_solver_optimality_gap_ratio",
            "Relative optimality gap of anytime answers (0 = proven optimal).",
            ["allocator"],
            buckets=(0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=r,
        )
        self.cache_requests = Counter(
            "dra_solver_cache_requests_total",
            "Lookups in the service's caches by cache and result (hit, miss); hit ratio = hit / (hit + miss).",
            ["cache", "result"],
            registry=r,
        )
        self.schedule_nodes = Histogram(
            "dra_solver_schedule_nodes",
            "Nodes per Schedule call by phase: candidates, evaluated, pruned, feasible, solved.",
            ["phase"],
            buckets=NODE_BUCKETS,
            registry=r,
        )
        self.allocated_devices = Counter(
            "dra_solver_allocated_devices_total",
            "Devices handed out in answers (Allocate and the chosen node of Schedule), by driver.",
            ["driver_name"],
            registry=r,
        )
        self.inventory_objects = Gauge(
            "dra_solver_inventory_objects",
            "Objects in the current inventory snapshot, by kind.",
            ["kind"],
            registry=r,
        )
        self.inventory_devices = Gauge(
            "dra_solver_inventory_devices",
            "Devices published in the current inventory snapshot, by driver.",
            ["driver_name"],
            registry=r,
        )
        self.inventory_generation = Gauge(
            "dra_solver_inventory_generation",
            "Generation of the current inventory snapshot (increases on every change).",
            registry=r,
        )
        self.inventory_index_duration = Histogram(
            "dra_solver_inventory_index_duration_seconds",
            "Time to build the node index of each new inventory snapshot, by layout: carried (only claims changed: the nodes they touch are read again) or laid_out (from scratch).",
            ["layout"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inventory_ready = Gauge(
            "dra_solver_inventory_ready",
            "1 once the inventory has been fully loaded (the service reports SERVING).",
            registry=r,
        )
        self.inventory_updates = Counter(
            "dra_solver_inventory_updates_total",
            "Inventory reloads and relists by status (success, error, relist).",
            ["status"],
            registry=r,
        )
        self.reservations_in_flight = Gauge(
            "dra_solver_reservations_in_flight",
            "Allocations currently held by Reserve.",
            registry=r,
        )
        self.reservation_events = Counter(
            "dra_solver_reservation_events_total",
            "Reservation lifecycle events by status (reserved, conflict, limited, released, expired, allocated, deleted).",
            ["status"],
            registry=r,
        )
        self.grpc_requests = Counter(
            "dra_solver_grpc_requests_total",
            "Completed gRPC calls by method and status code.",
            ["grpc_method", "grpc_status_code"],
            registry=r,
        )
        self.inflight = Gauge(
            "dra_solver_grpc_requests_in_flight",
            "gRPC calls of the allocation service being handled now.",
            registry=r,
        )
        self.inventory_invalid_pools = Gauge(
            "dra_solver_inventory_invalid_pools",
            "Pools of the current inventory snapshot made invalid by a bad object (never allocated from).",
            registry=r,
        )
        self.inventory_problems = Gauge(
            "dra_solver_inventory_problems",
            "Objects of the current inventory snapshot that could not be used (decoding, validation), by kind.",
            ["kind"],
            registry=r,
        )
        self._known_drivers: set[str] = set()
        self._lock = threading.Lock()

    def observe_inventory(
        self,
        counts: dict[str, int],
        devices_by_driver: dict[str, int],
        *,
        generation: int,
        ready: bool,
        invalid_pools: int = 0,
        problems_by_kind: dict[str, int] | None = None,
    ) -> None:
        for kind, n in counts.items():
            self.inventory_objects.labels(kind=kind).set(n)
        self.inventory_invalid_pools.set(invalid_pools)
        problems = problems_by_kind or {}
        for kind in (*PROBLEM_KINDS, "other"):
            n = problems.get(kind, 0) if kind != "other" else sum(v for k, v in problems.items() if k not in PROBLEM_KINDS)
            self.inventory_problems.labels(kind=kind).set(n)
        with self._lock:
            for driver in self._known_drivers - set(devices_by_driver):
                self.inventory_devices.labels(driver_name=driver).set(0)
            for driver, n in devices_by_driver.items():
                self.inventory_devices.labels(driver_name=driver).set(n)
            self._known_drivers |= set(devices_by_driver)
        self.inventory_generation.set(generation)
        self.inventory_ready.set(1 if ready else 0)

    def observe_solve(self, stats: Any, *, score: int | None) -> None:
        """One core answer (``model.allocation.SolveStats``)."""
        self.solver_status.labels(allocator=stats.allocator, status=stats.status).inc()
        if stats.allocator == "cpsat":
            self.model_variables.labels(allocator=stats.allocator).observe(stats.variables)
            self.model_constraints.labels(allocator=stats.allocator).observe(stats.constraints)
        if score is not None:
            self.first_available_score.labels(allocator=stats.allocator).observe(score)
        if stats.gap is not None:
            self.optimality_gap.labels(allocator=stats.allocator).observe(stats.gap)


class MetricsServer:
    """The service's HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz`` (ready once the
    inventory is loaded, as the gRPC health status)."""

    def __init__(self, metrics: Metrics, *, address: str, port: int, readiness: Readiness = always_ready) -> None:
        self._endpoint = HttpEndpoint(metrics.registry, address=address, port=port, readiness=readiness)
        self.address = address
        self.port = self._endpoint.port

    def stop(self) -> None:
        self._endpoint.stop()
