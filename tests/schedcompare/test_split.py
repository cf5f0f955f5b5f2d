from __future__ import annotations

import os

from prometheus_client import generate_latest

from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.service.schedcompare import split


def test_scheduler_split_reads_the_controllers_histograms() -> None:
    m = ControllerMetrics()
    for _ in range(4):
        m.solver_latency.labels(rpc="Schedule", code="OK").observe(0.010)
        m.api_write_latency.labels(operation="claim_status").observe(0.020)
        m.api_write_latency.labels(operation="bind").observe(0.030)
        m.queue_duration.labels(name="scheduler").observe(0.5)
        m.queue_duration.labels(name="resource_claim").observe(0.25)
        m.binding_wait.observe(0.001)
        m.scheduling_latency.labels(result="scheduled").observe(0.1)
        m.schedule_attempts.labels(result="scheduled").inc()
    got = split.scheduler_split(generate_latest(m.registry).decode(), bound=2)
    per = got["perBoundPodMs"]
    assert per["solver"] == 20.0
    assert per["apiWrites"] == 100.0
    assert per["apiWritesByOperation"] == {"bind": 60.0, "claim_status": 40.0}
    assert (per["schedulingQueue"], per["claimControllerQueue"], per["binderQueue"], per["attempt"]) == (1000.0, 500.0, 2.0, 200.0)
    assert got["attempts"] == {"scheduled": 4}
    assert (got["solverCalls"], got["apiWrites"]) == (4, 8)
    lines = list(split.format_split("dra-solver", got, {"kube-apiserver": 12.0, "etcd": 3.0}, 10.0))
    assert lines[0] == "  dra-solver: CPU seconds in 10 s (pods created until all settled): kube-apiserver 12, etcd 3"
    assert "solver 20, API writes 100 (bind 60, claim_status 40), scheduling queue 1000" in lines[1]


def test_scheduler_split_adds_up_several_controllers_processes() -> None:
    """A backlog run's dra-solver side runs the claim controller and the scheduler in two
    processes: their histograms are added, each series once per process."""
    claims, scheduler = ControllerMetrics(), ControllerMetrics()
    claims.queue_duration.labels(name="resource_claim").observe(0.25)
    for _ in range(2):
        scheduler.solver_latency.labels(rpc="Schedule", code="OK").observe(0.010)
        scheduler.queue_duration.labels(name="scheduler").observe(0.5)
        scheduler.schedule_attempts.labels(result="scheduled").inc()
    texts = [generate_latest(m.registry).decode() for m in (claims, scheduler)]
    got = split.scheduler_split(texts, bound=1)
    per = got["perBoundPodMs"]
    assert (per["solver"], per["schedulingQueue"], per["claimControllerQueue"]) == (20.0, 1000.0, 250.0)
    assert got["attempts"] == {"scheduled": 2}
    assert split.scheduler_split(texts[1], bound=1)["perBoundPodMs"]["claimControllerQueue"] == 0.0
    lines = list(split.format_split("dra-solver", got, {"etcd": 1.0}, 5.0, window="scheduler started until all settled"))
    assert lines[0] == "  dra-solver: CPU seconds in 5 s (scheduler started until all settled): etcd 1"


def test_cpu_meter_measures_this_process() -> None:
    meter = split.CpuMeter({"me": os.getpid(), "gone": 2**22 + 12345})
    meter.start()
    sum(i * i for i in range(200_000))
    meter.stop()
    assert set(meter.seconds) == {"me"}
    assert meter.wall >= 0.0
    assert meter.seconds["me"] >= 0.0
