"""The device-taint eviction decisions: tables of slices, rules, claims, pods -> eviction."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from dra_solver.controllers import eviction as e
from dra_solver.controllers import objects as ob
from tests import builders as b

T0 = "2025-01-01T00:00:00Z"
T0_S = ob.parse_time(T0) or 0.0
POD = b.pod("web", uid="pod-uid", claims={"gpu": "c1"}, node="node-a", phase="Running")


C1 = b.ONE_GPU.named("c1")


@dataclass
class Case:
    slices: list[dict[str, Any]] = field(default_factory=lambda: [b.gpu_slice("node-a")])
    rules: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=lambda: [C1.allocated("gpu-0", node="node-a").reserved_for(POD).obj()])
    pod: dict[str, Any] = field(default_factory=lambda: POD)
    when: float | None = None
    """Expected eviction time (seconds after T0), None = never."""
    reasons: list[str] = field(default_factory=list)


def tainted(*, device: str = "gpu-0", generation: int = 1, **kw: Any) -> dict[str, Any]:
    return b.gpu_slice("node-a", generation=generation, taints={device: [b.taint(**kw)]})


CASES: dict[str, Case] = {
    "no taints": Case(),
    "NoExecute on the allocated device evicts at timeAdded": Case(
        slices=[tainted()], when=0.0, reasons=["ResourceSlice node-a-gpus gpu.example.com/node-a/gpu-0 taint #0"]
    ),
    "NoExecute on another device does not": Case(slices=[tainted(device="gpu-1")]),
    "NoSchedule does not evict": Case(slices=[tainted(effect="NoSchedule")]),
    "taint without timeAdded evicts at once": Case(slices=[tainted(time_added=None)], when=-T0_S),
    "toleration without seconds tolerates forever": Case(slices=[tainted()], claims=[C1.allocated("gpu-0", node="node-a", tolerations=[b.toleration()]).reserved_for(POD).obj()]),
    "toleration seconds delay eviction": Case(slices=[tainted()], claims=[C1.allocated("gpu-0", node="node-a", tolerations=[b.toleration(seconds=30)]).reserved_for(POD).obj()], when=30.0),
    "smallest toleration seconds wins": Case(
        slices=[tainted()], claims=[C1.allocated("gpu-0", node="node-a", tolerations=[b.toleration(seconds=300), b.toleration(seconds=30)]).reserved_for(POD).obj()], when=30.0
    ),
    "negative toleration seconds count as zero": Case(slices=[tainted()], claims=[C1.allocated("gpu-0", node="node-a", tolerations=[b.toleration(seconds=-5)]).reserved_for(POD).obj()], when=0.0),
    "forever toleration beats a timed one": Case(
        slices=[tainted()], claims=[C1.allocated("gpu-0", node="node-a", tolerations=[b.toleration(seconds=30), b.toleration()]).reserved_for(POD).obj()]
    ),
    "toleration for another key does not help": Case(
        slices=[tainted()], claims=[C1.allocated("gpu-0", node="node-a", tolerations=[b.toleration("other.example.com/key")]).reserved_for(POD).obj()], when=0.0
    ),
    "toleration with empty effect does not count for eviction": Case(
        slices=[tainted()], claims=[C1.allocated("gpu-0", node="node-a", tolerations=[{"key": "example.com/broken", "operator": "Exists"}]).reserved_for(POD).obj()], when=0.0
    ),
    "older pool generation is ignored": Case(
        slices=[tainted(generation=1), b.gpu_slice("node-a", generation=2, name="node-a-gpus-v2")]
    ),
    "newest pool generation counts": Case(
        slices=[b.gpu_slice("node-a", generation=1), {**tainted(generation=2), "metadata": {"name": "node-a-gpus-v2"}}],
        when=0.0, reasons=["ResourceSlice node-a-gpus-v2 gpu.example.com/node-a/gpu-0 taint #0"],
    ),
    "DeviceTaintRule for the device evicts": Case(
        rules=[b.taint_rule("broken", device="gpu-0", pool="node-a", time_added=T0)], when=0.0, reasons=["DeviceTaintRule broken"]
    ),
    "DeviceTaintRule for the whole driver evicts": Case(rules=[b.taint_rule("all", time_added=T0)], when=0.0, reasons=["DeviceTaintRule all"]),
    "DeviceTaintRule for another pool does not": Case(rules=[b.taint_rule("other", pool="node-b", time_added=T0)]),
    "DeviceTaintRule with effect None does not": Case(rules=[b.taint_rule("none", effect="None", time_added=T0)]),
    "DeviceTaintRule without selector selects nothing": Case(
        rules=[{**b.taint_rule("nosel", time_added=T0), "spec": {"taint": b.taint()}}]
    ),
    "rule and slice taint: both reasons, rules first": Case(
        slices=[tainted()], rules=[b.taint_rule("broken", device="gpu-0", time_added="2025-01-01T00:00:10Z")], when=0.0,
        reasons=["DeviceTaintRule broken", "ResourceSlice node-a-gpus gpu.example.com/node-a/gpu-0 taint #0"],
    ),
    "unscheduled pod is not evicted": Case(slices=[tainted()], pod=b.pod("web", uid="pod-uid", claims={"gpu": "c1"})),
    "claim not reserved for the pod": Case(slices=[tainted()], claims=[b.ONE_GPU.named("c1").allocated("gpu-0", node="node-a").obj()]),
    "claim reserved for a previous instance": Case(
        slices=[tainted()], pod=b.pod("web", uid="new-uid", claims={"gpu": "c1"}, node="node-a", phase="Running")
    ),
    "unallocated claim": Case(slices=[tainted()], claims=[b.ONE_GPU.named("c1").reserved_for(POD).obj()]),
    "template claim not owned by the pod": Case(
        slices=[tainted()],
        pod=b.pod("web", uid="pod-uid", templates={"gpu": "t"}, statuses={"gpu": "c1"}, node="node-a", phase="Running"),
        claims=[C1.owned_by(b.pod("someone", uid="x")).allocated("gpu-0", node="node-a").reserved_for(POD).obj()],
    ),
    "template claim owned by the pod": Case(
        slices=[tainted()],
        pod=b.pod("web", uid="pod-uid", templates={"gpu": "t"}, statuses={"gpu": "c1"}, node="node-a", phase="Running"),
        claims=[C1.owned_by(b.pod("web", uid="pod-uid")).allocated("gpu-0", node="node-a").reserved_for(POD).obj()], when=0.0,
        reasons=["ResourceSlice node-a-gpus gpu.example.com/node-a/gpu-0 taint #0"],
    ),
    "earliest over two claims": Case(
        slices=[b.gpu_slice("node-a", taints={"gpu-0": [b.taint()], "gpu-1": [b.taint()]})],
        pod=b.pod("web", uid="pod-uid", claims={"a": "c1", "b": "c2"}, node="node-a", phase="Running"),
        claims=[C1.allocated("gpu-0", node="node-a", tolerations=[b.toleration(seconds=60)]).reserved_for(POD).obj(),
                b.ONE_GPU.named("c2").allocated("gpu-1", node="node-a", tolerations=[b.toleration(seconds=20)]).reserved_for(POD).obj()],
        when=20.0,
        reasons=["ResourceSlice node-a-gpus gpu.example.com/node-a/gpu-0 taint #0", "ResourceSlice node-a-gpus gpu.example.com/node-a/gpu-1 taint #0"],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_pod_eviction(case: Case) -> None:
    before = copy.deepcopy(case)
    index = e.TaintIndex(case.slices, case.rules)
    got = e.pod_eviction(case.pod, b.by_key(*case.claims), index)
    assert case == before, "inputs must not be mutated"
    if case.when is None:
        assert got is None
        return
    assert got is not None
    assert got.when == pytest.approx(T0_S + case.when)
    if case.reasons:
        assert list(got.reasons) == case.reasons


@pytest.mark.parametrize(
    ("pod", "when", "action", "delay"),
    [
        (None, 0.0, "none", 0.0),
        (POD, None, "none", 0.0),
        (POD, 100.0, "evict", 0.0),
        (POD, 100.0 + 50, "evict", 0.0),
        (POD, 200.0, "wait", 50.0),
        (b.pod("web", node="n", phase="Succeeded"), 0.0, "none", 0.0),
        (b.pod("web", node="n", deleting=True), 0.0, "none", 0.0),
    ],
    ids=["pod gone", "no eviction", "due now", "overdue", "later", "finished", "already deleting"],
)
def test_decide(pod: dict[str, Any] | None, when: float | None, action: str, delay: float) -> None:
    eviction = None if when is None else e.Eviction(when, ("x",))
    now = 150.0
    d = e.decide(pod, eviction, now=now)
    assert d.action == action
    assert d.delay == pytest.approx(delay)


def test_disruption_condition_patch_once() -> None:
    patch = e.disruption_condition_patch(POD, now=T0_S)
    assert patch == {
        "metadata": {"uid": "pod-uid"},
        "status": {"conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "DeletionByDeviceTaintManager",
            "message": "Device Taint manager: deleting due to NoExecute taint", "lastTransitionTime": T0,
        }]},
    }
    marked = copy.deepcopy(POD)
    marked["status"]["conditions"] = patch["status"]["conditions"]
    assert e.disruption_condition_patch(marked, now=T0_S) is None


def test_pods_using() -> None:
    other = b.pod("other", uid="o")
    c = b.ONE_GPU.named("c1").allocated("gpu-0", node="node-a").reserved_for(POD, other).obj()
    assert e.pods_using(c) == [("default/web", "pod-uid"), ("default/other", "o")]
