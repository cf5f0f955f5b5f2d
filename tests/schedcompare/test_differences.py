"""Why a pod was placed differently, from evidence: one small hand-made run pair per reason.

Each case is the outcome of two runs as the runner records it (per pod: node, devices,
FirstAvailable subrequests, verdict, and the claim watch's holds with their times) on a real
workload's objects; the report must check the evidence (was the other side's node, device or
subrequest free on this side when it placed the pod?) and name the reason.
"""

from __future__ import annotations

import dataclasses

from dra_solver.service.schedcompare import workloads
from dra_solver.service.schedcompare.report import (
    CAPACITY,
    DEVICE_CHOICE,
    FIRST_AVAILABLE,
    NODE_CHOICE,
    ORDER,
    PENDING_WITH_ROOM,
    TIMEOUT,
    WorkloadComparison,
    differences,
    format_table,
    reason_summary,
)
from dra_solver.service.schedcompare.runner import PodOutcome, SideResult, overlapping_holds
from dra_solver.service.schedcompare.workloads import GPU_DRIVER, PodSpec, Workload
from tests.schedcompare.builders import N0, N1, bound, gpu_workload, gpus, pending


def _compare(w: Workload, up: dict[str, PodOutcome], us: dict[str, PodOutcome]) -> dict[str, tuple[str, str]]:
    diffs = differences(w, SideResult("kube-scheduler", w.name, up, None), SideResult("dra-solver", w.name, us, None))
    return {d.pod: (d.reason, d.evidence) for d in diffs}


def test_node_choice_when_the_other_node_had_room() -> None:
    w = gpu_workload({"a": "1gpu"})
    got = _compare(w, {"a": bound("a", "1gpu", N0, gpus(N0, 0), 1)}, {"a": bound("a", "1gpu", N1, gpus(N1, 0), 1)})
    reason, evidence = got["a"]
    assert reason == NODE_CHOICE
    assert "each node had room for it on both sides" in evidence


def test_capacity_when_neither_side_could_use_the_others_node() -> None:
    # Both nodes full of 8-GPU pods, placed the other way round: for b, the node the other
    # side used was already taken (by a) on this side.
    w = gpu_workload({"a": "8gpu", "b": "8gpu"})
    up = {"a": bound("a", "8gpu", N0, gpus(N0, *range(8)), 1), "b": bound("b", "8gpu", N1, gpus(N1, *range(8)), 2)}
    us = {"a": bound("a", "8gpu", N1, gpus(N1, *range(8)), 1), "b": bound("b", "8gpu", N0, gpus(N0, *range(8)), 2)}
    got = _compare(w, up, us)
    assert got["a"][0] == NODE_CHOICE
    assert got["b"] == (CAPACITY, f"kube-scheduler chose {N1}, dra-solver {N0}; "
                                  "neither node had room for it on the other side by then")


def test_released_devices_count_as_free_again() -> None:
    # Steady state: a held node-000 from 1 to 2 on kube-scheduler's side, so at 3 node-000
    # was free there; on dra-solver's side a held node-000 until 5, so when b came (at 2)
    # node-000 was full: dra-solver could not have followed, kube-scheduler could have.
    w = gpu_workload({"a": "8gpu", "b": "8gpu"})
    up = {"a": bound("a", "8gpu", N0, gpus(N0, *range(8)), 1, end=2), "b": bound("b", "8gpu", N0, gpus(N0, *range(8)), 3)}
    us = {"a": bound("a", "8gpu", N0, gpus(N0, *range(8)), 1, end=5), "b": bound("b", "8gpu", N1, gpus(N1, *range(8)), 2)}
    reason, evidence = _compare(w, up, us)["b"]
    assert reason == NODE_CHOICE
    assert evidence.endswith(f"{N1} had room on kube-scheduler's side too; {N0} was full on dra-solver's side")


def test_device_choice_on_the_same_node() -> None:
    w = gpu_workload({"a": "1gpu"})
    reason, evidence = _compare(w, {"a": bound("a", "1gpu", N0, gpus(N0, 0), 1)},
                                {"a": bound("a", "1gpu", N0, gpus(N0, 5), 1)})["a"]
    assert reason == DEVICE_CHOICE
    assert evidence == (f"on {N0} kube-scheduler took gpu-0, dra-solver gpu-5; "
                        "free too: gpu-0 on dra-solver's side, gpu-5 on kube-scheduler's side")


def test_device_choice_is_capacity_when_the_devices_were_taken() -> None:
    # x took gpu-0 on dra-solver's side before a came, and gpu-5 on kube-scheduler's side.
    w = gpu_workload({"x": "1gpu", "a": "1gpu"})
    up = {"x": bound("x", "1gpu", N1, gpus(N1, 0), 0.5), "a": bound("a", "1gpu", N0, gpus(N0, 0), 1)}
    us = {"x": bound("x", "1gpu", N1, gpus(N1, 0), 0.5), "a": bound("a", "1gpu", N0, gpus(N0, 5), 1)}
    up["y"], us["y"] = bound("y", "1gpu", N0, gpus(N0, 5), 0.7), bound("y", "1gpu", N0, gpus(N0, 0), 0.7)
    w = dataclasses.replace(w, pods=[*w.pods, PodSpec("y", "gpu-1", "1gpu")])
    got = _compare(w, up, us)
    assert got["a"][0] == CAPACITY and "in use on the other side" in got["a"][1]


def test_first_available_when_the_preferred_device_was_left_elsewhere() -> None:
    # kube-scheduler put h1, h2 on node-000's two h100s, then x on node-000's a100s while
    # node-001 still had h100s; dra-solver gave x an h100 on node-001.
    w = workloads.build("first-available", nodes=2, pods=3)
    names = [p.name for p in w.pods]
    h1, h2, x = names
    h100 = ("gpu/h100",)
    a100 = ("gpu/a100", "gpu/a100")
    same = {h1: bound(h1, "h100-or-2xa100", N0, gpus(N0, 0), 1, subrequests=h100),
            h2: bound(h2, "h100-or-2xa100", N0, gpus(N0, 1), 2, subrequests=h100)}
    up = {**same, x: bound(x, "h100-or-2xa100", N0, gpus(N0, 2, 3), 3, subrequests=a100)}
    us = {**same, x: bound(x, "h100-or-2xa100", N1, gpus(N1, 0), 3, subrequests=h100)}
    reason, evidence = _compare(w, up, us)[x]
    assert reason == FIRST_AVAILABLE
    assert evidence == (f"kube-scheduler took a100 on {N0}, dra-solver h100 on {N1}; "
                        f"{N0} had no h100 left on kube-scheduler's side, {N1} had")
    # Had node-001's h100s been taken too, only capacity explains it.
    up |= {"y1": bound("y1", "h100-or-2xa100", N1, gpus(N1, 0), 0.5, subrequests=h100),
           "y2": bound("y2", "h100-or-2xa100", N1, gpus(N1, 1), 0.6, subrequests=h100)}
    w = dataclasses.replace(w, pods=[*w.pods, PodSpec("y1", "h100-else-2xa100", "h100-or-2xa100"),
                                     PodSpec("y2", "h100-else-2xa100", "h100-or-2xa100")])
    us |= {"y1": up["y1"], "y2": up["y2"]}
    us[x] = bound(x, "h100-or-2xa100", N1, gpus(N1, 0), 0.4, subrequests=h100)
    us["y1"] = bound("y1", "h100-or-2xa100", N1, gpus(N1, 1), 0.5, subrequests=h100)
    us["y2"] = bound("y2", "h100-or-2xa100", N1, gpus(N1, 2, 3), 0.6, subrequests=a100)
    assert _compare(w, up, us)[x][0] == CAPACITY


def test_pending_pods_order_capacity_timeout_and_room() -> None:
    w = gpu_workload({"a": "8gpu", "b": "8gpu", "c": "8gpu", "s": "1gpu", "t": "1gpu"})
    # kube-scheduler: a, b fill both nodes; c and s fit nowhere; t never got a verdict.
    up = {"a": bound("a", "8gpu", N0, gpus(N0, *range(8)), 1), "b": bound("b", "8gpu", N1, gpus(N1, *range(8)), 2),
          "c": pending("c", "8gpu"), "s": pending("s", "1gpu"), "t": pending("t", "1gpu", verdict="")}
    # dra-solver: a and c (as many 8-GPU pods, other ones); s and t fit nowhere either.
    us = {"a": bound("a", "8gpu", N0, gpus(N0, *range(8)), 1), "b": pending("b", "8gpu"),
          "c": bound("c", "8gpu", N1, gpus(N1, *range(8)), 2), "s": pending("s", "1gpu"), "t": pending("t", "1gpu")}
    got = _compare(w, up, us)
    assert got["b"][0] == ORDER and "(both placed 2 8gpu pods)" in got["b"][1]
    assert got["c"][0] == ORDER
    assert "s" not in got and "t" not in got  # pending on both sides
    # dra-solver binds t instead of c: kube-scheduler gave t no verdict (timeout), and b is
    # capacity now (one 8-GPU pod here, two there); with a verdict t is capacity too.
    us["t"] = bound("t", "1gpu", N1, gpus(N1, 0), 3)
    us["c"] = pending("c", "8gpu")
    got = _compare(w, up, us)
    assert got["t"] == (TIMEOUT, f"dra-solver placed it on {N1}; kube-scheduler left it pending without a verdict "
                                 "when the run ended")
    assert got["b"][0] == CAPACITY  # 2 8-GPU pods upstream, 1 here: no node had room left
    up["t"] = pending("t", "1gpu")
    assert _compare(w, up, us)["t"][0] == CAPACITY
    # A verdict of "unschedulable" while a node had room at the end.
    up["b"] = pending("b", "8gpu")
    got = _compare(w, up, us)
    assert got["t"][0] == PENDING_WITH_ROOM and f"{N1} had room for it at the end" in got["t"][1]


def test_an_upstream_deviation_in_the_pods_inputs() -> None:
    # Claims allocated before the run overdraw GPU 0's counters on node-000 (the whole GPU and
    # one of its partitions): upstream v0.37.2 then refuses every counter-consuming device of
    # the node (README deviation 7), which the documented semantics do not.
    w = workloads.build("mig-partitions-first", nodes=1, pods=1)
    overdrawn = workloads.allocated_claim("overdrawn", N0, GPU_DRIVER, ["gpu-0", "gpu-0-1g-10gb-0"])
    w = dataclasses.replace(w, namespaced=[*w.namespaced, overdrawn])
    pod = w.pods[0]
    up = {pod.name: pending(pod.name, pod.size)}
    us = {pod.name: bound(pod.name, pod.size, N0, (f"{GPU_DRIVER}/{N0}/gpu-1",), 1)}
    reason, evidence = _compare(w, up, us)[pod.name]
    assert reason.startswith("upstream deviation 7 ("), reason
    assert "with kube-scheduler's devices in use its claim reaches it" in evidence
    # Without the overdrawn counters, the same outcome is a pod left pending with room.
    w = dataclasses.replace(w, namespaced=[o for o in w.namespaced if o is not overdrawn])
    assert _compare(w, up, us)[pod.name][0] == PENDING_WITH_ROOM


def test_summary_table_and_json_carry_reason_and_evidence() -> None:
    w = gpu_workload({"a": "1gpu", "b": "1gpu"})
    up = SideResult("kube-scheduler", w.name, {"a": bound("a", "1gpu", N0, gpus(N0, 0), 1),
                                                 "b": bound("b", "1gpu", N0, gpus(N0, 1), 2)}, None)
    us = SideResult("dra-solver", w.name, {"a": bound("a", "1gpu", N1, gpus(N1, 0), 1),
                                             "b": bound("b", "1gpu", N0, gpus(N0, 1), 2)}, None)
    c = WorkloadComparison(w, {"kube-scheduler": up, "dra-solver": us})
    doc = c.to_json()
    assert doc["differences"]["byReason"] == {NODE_CHOICE: 1}
    (detail,) = doc["differences"]["details"]
    assert detail["pod"] == "a" and detail["reason"] == NODE_CHOICE and "room" in detail["evidence"]
    assert f"      1  {NODE_CHOICE}  (e.g. a: kube-scheduler chose {N0}" in format_table([c])
    assert reason_summary(c.diffs) == {NODE_CHOICE: 1}
    # The events each side recorded about the pods, by reason.
    assert "Events recorded" not in format_table([c])
    up.events, us.events = {"Scheduled": 2}, {"FailedScheduling": 1, "Scheduled": 1234}
    table = format_table([c])
    assert "  kube-scheduler: 2 Scheduled\n  dra-solver: 1 FailedScheduling, 1,234 Scheduled" in table
    assert c.to_json()["sides"]["dra-solver"]["events"] == {"FailedScheduling": 1, "Scheduled": 1234}


def test_overlapping_holds_are_devices_placed_twice() -> None:
    dev = gpus(N0, 0)
    pods = [bound("a", "1gpu", N0, dev, 1, end=3), bound("b", "1gpu", N0, dev, 3), bound("c", "1gpu", N0, dev, 4)]
    assert overlapping_holds(pods) == [f"{dev[0]} held by b and c at the same time"]
    assert overlapping_holds(pods[:2]) == []


def test_a_backlog_run_counts_from_the_scheduler_s_start() -> None:
    """Pods/s, bind latency and the footer of a backlog run start at the scheduler's start (its
    start-up included), not at the first creation; a side that bound nothing says so."""
    w = gpu_workload({"a": "1gpu", "b": "1gpu"})
    pods = {"a": bound("a", "1gpu", N0, gpus(N0, 0), 10), "b": bound("b", "1gpu", N0, gpus(N0, 1), 12)}
    for pod in pods.values():
        pod.queued = 8.0
    ours = SideResult("dra-solver", w.name, pods, None, first_created=0.0, last_created=1.0, last_bound=12.01,
                      scheduler_started=8.0)
    idle = SideResult("kube-scheduler", w.name, {"a": pending("a", "1gpu"), "b": pending("b", "1gpu")}, None,
                      first_created=0.0, last_created=1.0, scheduler_started=5.0)
    assert ours.backlog and ours.seconds == 12.01 - 8.0 and ours.pods_per_second == 2 / (12.01 - 8.0)
    assert [p.latency for p in pods.values()] == [10.01 - 8.0, 12.01 - 8.0]
    doc = ours.to_json()
    assert (doc["backlog"], doc["schedulerStartedSeconds"], doc["firstBindSeconds"]) == (True, 8.0, 2.01)
    assert idle.to_json()["firstBindSeconds"] is None
    table = format_table([WorkloadComparison(w, {"kube-scheduler": idle, "dra-solver": ours})])
    assert f"{w.name}: backlog run: every pod and its claims existed before the scheduler started" in table
    assert "  kube-scheduler: started 5 s after the first creation; no pod bound\n" in table
    assert "  dra-solver: started 8 s after the first creation; first bind 2.0 s after its start; last bind after 4.0 s" in table
    plain = SideResult("dra-solver", w.name, dict(pods), None, first_created=0.0, last_bound=12.01)
    assert not plain.backlog and plain.seconds == 12.01 and plain.to_json()["schedulerStartedSeconds"] is None
