"""Issue 14's acceptance at a small size: upstream's kube-scheduler and the dra-solver
scheduler, each alone on a fresh real control plane, bind every schedulable pod of the same
workload and never allocate a device twice (every allocated claim on the server is checked).

Real processes throughout: etcd, kube-apiserver, kube-controller-manager (with upstream's
resourceclaim-controller for the kube-scheduler run), kube-scheduler v1.37.2, and
``dra-solver serve`` + ``dra-solver controllers``. No timing assertions: speed is
benchmarks/scheduler_compare.py's business.

The workload is the mixed 1/2/4/8-GPU stream on a partly used cluster: claims allocated
before the run must keep their devices, and which pods are schedulable depends on where the
earlier ones went, so "every schedulable pod is bound" is checked on the end state: a pod left
pending asks for more GPUs than any node has free.
"""

from __future__ import annotations

from collections import Counter

import pytest

from dra_solver.service.localcluster.controlplane import Binaries, ControlPlaneError, binaries
from dra_solver.service.schedcompare import workloads
from dra_solver.service.schedcompare.command import compare_workload
from dra_solver.service.schedcompare.report import OURS, UPSTREAM

NODES, PODS = 20, 100


@pytest.fixture(scope="module")
def bins() -> Binaries:
    try:
        found = binaries()
    except ControlPlaneError as err:
        pytest.fail(f"upstream Kubernetes binaries are not available: {err}", pytrace=False)
    if not found.path("kube-scheduler").is_file():
        pytest.fail(f"{found.path('kube-scheduler')} is missing: run scripts/build-upstream.sh", pytrace=False)
    return found


def test_both_schedulers_bind_every_schedulable_pod_and_no_device_twice(bins: Binaries) -> None:
    workload = workloads.build("mixed", nodes=NODES, pods=PODS)
    in_use = Counter({c["metadata"]["name"].removeprefix("running-on-"): len(c["status"]["allocation"]["devices"]["results"])
                      for c in workload.namespaced if c["kind"] == "ResourceClaim"})
    result = compare_workload(workload, bins, timeout=300)
    for name in (UPSTREAM, OURS):
        side = result.sides[name]
        assert not side.timed_out, f"{name}: {side.bound}/{len(side.pods)} bound when the run timed out"
        assert side.problems == [], f"{name}: {side.problems[:5]}"
        # No device in two claims, the claims allocated before the run included.
        assert side.double_allocated == [], f"{name}: devices allocated twice: {side.double_allocated[:5]}"
        assert side.allocated_claims == side.bound + len(in_use)
        used = Counter(in_use)
        for pod in side.pods.values():
            if pod.bound_at is None:
                assert pod.unschedulable, f"{name}: {pod.name} pending without a verdict"
                continue
            wanted = int(pod.size.removesuffix("gpu"))
            assert len(pod.devices) == wanted, pod
            assert {d.split("/")[1] for d in pod.devices} == {pod.node}, pod
            used[pod.node] += wanted
        most_free = max(workloads.GPUS_PER_NODE - used[n["metadata"]["name"]] for n in workload.nodes)
        for pod in side.pods.values():
            if pod.bound_at is None:
                assert int(pod.size.removesuffix("gpu")) > most_free, (
                    f"{name}: {pod.name} ({pod.size}) left pending while a node has {most_free} GPUs free")
        assert side.bound > 0
    # Every pod placed differently has a reason from the report's vocabulary.
    report = result.to_json()
    assert all(d["reason"] for d in report["differences"]["details"])
