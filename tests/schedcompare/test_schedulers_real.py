"""Issue 14's acceptance at a small size: upstream's kube-scheduler and the dra-solver
scheduler, each alone on a fresh real control plane, bind every schedulable pod of the same
workload and never allocate a device twice.

Real processes throughout: etcd, kube-apiserver, kube-controller-manager (with upstream's
resourceclaim-controller for the kube-scheduler run), kube-scheduler v1.37.2, and
``dra-solver serve`` + ``dra-solver controllers``. No timing assertions: speed is
benchmarks/scheduler_compare.py's business.

Workloads: the mixed 1/2/4/8-GPU stream on a partly used cluster (claims allocated before the
run must keep their devices), FirstAvailable where the preferred device runs out, and the MIG
replay with whole GPUs listed first (where upstream's first fit spends a whole GPU on every
claim). Which pods are schedulable depends on where the earlier ones went, so "every
schedulable pod is bound" is checked on the end state: a pod left pending has a verdict and
fits on no node with what that side's claims hold (our port of upstream's allocator, an
exhaustive search, asked node by node).
"""

from __future__ import annotations

import time
from html.parser import HTMLParser

import pytest

from dra_solver.service.localcluster.controlplane import Binaries, ControlPlaneError
from dra_solver.service.schedcompare import runner, workloads
from dra_solver.service.schedcompare.command import compare_workload
from dra_solver.service.schedcompare.evidence import Probe, Timeline, device_id
from dra_solver.service.schedcompare.htmlpage import render_report
from dra_solver.service.schedcompare.report import OURS, UPSTREAM
from tests.realkube import scheduler_binaries

SIZES = {"mixed": (50, 300), "first-available": (50, 300), "mig-whole-first": (10, 120)}
"""(nodes, pods): issue 14's CI size where it is cheap; MIG nodes publish 112 devices each."""
BACKLOG = {"first-available"}
"""Workloads run as a backlog (every pod and claim created before the scheduler starts; on
dra-solver's side the claim controller and the scheduler are then two processes)."""


@pytest.fixture(scope="module")
def bins() -> Binaries:
    return scheduler_binaries()


def _devices_wanted(subrequests: tuple[str, ...], size: str) -> int:
    if size.endswith("gpu"):
        return int(size.removesuffix("gpu"))
    if subrequests and subrequests[0].endswith("/a100"):
        return 2
    return 1  # one h100, one MIG device


@pytest.mark.parametrize("name", list(SIZES))
def test_both_schedulers_bind_every_schedulable_pod_and_no_device_twice(bins: Binaries, name: str) -> None:
    nodes, pods = SIZES[name]
    workload = workloads.build(name, nodes=nodes, pods=pods)
    in_use = sum(1 for c in workload.namespaced if c["kind"] == "ResourceClaim")
    backlog = name in BACKLOG
    result = compare_workload(workload, bins, timeout=300, backlog=backlog)
    probe = Probe(workload)
    for side_name in (UPSTREAM, OURS):
        side = result.sides[side_name]
        assert not side.timed_out, f"{side_name}: {side.bound}/{len(side.pods)} bound when the run timed out"
        assert side.problems == [], f"{side_name}: {side.problems[:5]}"
        assert side.backlog == backlog
        if backlog:  # nothing bound before the scheduler started, which was after every creation
            first = side.first_bound
            assert first is not None and side.last_created < side.scheduler_started < first
            assert side.seconds == side.last_bound - side.scheduler_started
            assert side.to_json()["firstBindSeconds"] == round(first - side.scheduler_started, 3)
            assert all(p.latency == p.bound_at - side.scheduler_started for p in side.pods.values() if p.bound_at)
        if side_name == OURS:  # the scheduler's own histograms were read (both processes' in a backlog run)
            canary = 0 if backlog else 1  # a live scheduler bound a canary pod before the run
            assert side.split["attempts"].get("scheduled") == side.bound + canary, side.split
        # No device in two claims at the end (the claims allocated before the run included),
        # nor in two pods' claims at any moment of the run (the claim watch's timeline).
        assert side.double_allocated == [], f"{side_name}: devices allocated twice: {side.double_allocated[:5]}"
        assert side.allocated_claims == side.bound + in_use
        timeline = Timeline(side, workload, probe.node_of_pool)
        for pod in side.pods.values():
            if pod.bound_at is None:
                assert pod.unschedulable, f"{side_name}: {pod.name} pending without a verdict"
                room = probe.room_anywhere(pod.name, timeline, None)
                assert not room, f"{side_name}: {pod.name} ({pod.size}) left pending while {room} has room for it"
                continue
            assert len(pod.devices) == _devices_wanted(pod.subrequests, pod.size), pod
            assert {timeline.node(device_id(d)) for d in pod.devices} == {pod.node}, pod
            assert len(pod.holds) == 1 and pod.holds[0].devices == pod.devices, pod
        assert side.bound > 0
        if workload.capacity is not None:
            assert side.bound == workload.capacity
        # Every bound pod's Scheduled event recorded, and no warning about claims the
        # scheduler did allocate (each side's components record their own).
        assert side.events.get("Scheduled") == side.bound, (side_name, side.events)
        assert "ResourceClaimNotAllocated" not in side.events, (side_name, side.events)
        assert side.to_json()["events"] == side.events
    # Every pod placed differently has a reason and the evidence for it.
    report = result.to_json()
    assert all(d["reason"] and d["evidence"] for d in report["differences"]["details"])
    if name == "mig-whole-first":
        # Upstream's first fit takes the whole GPU listed first for every claim; dra-solver
        # takes partitions and binds them all.
        assert result.sides[UPSTREAM].bound == nodes * workloads.GPUS_PER_NODE
        assert result.sides[OURS].bound == pods
    # The HTML report of the real run parses, with its three plots.
    page = render_report([result])
    parser = HTMLParser()
    parser.feed(page)
    parser.close()
    assert page.count("<svg") == 3 and page.count("</svg>") == 3 and page.rstrip().endswith("</html>")


def test_a_scheduler_that_exits_mid_run_ends_the_run_at_once(bins: Binaries) -> None:
    """A backlog run on dra-solver's side (claims made by one controllers process, then the
    scheduler started as another): the scheduler dies at its start, and the run stops with an
    error naming it instead of waiting out its time limit."""
    workload = workloads.build("mixed", nodes=4, pods=20)
    with runner.live_side(workload, OURS, bins, backlog=True) as side:
        assert [c.name for c in side.companions] == ["dra-solver serve", "dra-solver controllers"]

        def start_and_kill() -> None:
            side.start_scheduler()
            side.companions[-1].popen.kill()

        started = time.monotonic()
        with pytest.raises(ControlPlaneError, match=r"^dra-solver: dra-solver scheduler exited \(code -9\)"):
            runner.drive(side.client, workload, OURS, timeout=300, start_scheduler=start_and_kill,
                         exited=side.scheduler_exited)
        assert time.monotonic() - started < 120
