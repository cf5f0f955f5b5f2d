"""NoExecute device taints evict on the real kube-apiserver: a taint in a ResourceSlice at once,
a DeviceTaintRule (resource.k8s.io/v1, what v1.37 serves and ``--device-taint-rule-version``
defaults to) after the claim's ``tolerationSeconds``; a claim that tolerates the taint keeps its
pod, and a rule removed before the toleration runs out cancels the eviction."""

from __future__ import annotations

import time
from typing import Any

from dra_solver.controllers import objects as ob
from tests import builders as b
from tests.controllers.conftest import Env, wait_for


def _device_of(env: Env, name: str) -> tuple[str, str]:
    [claim] = env.claims_of(env.pod(name) or {})
    [result] = ob.allocated_devices(claim)
    return str(result["pool"]), str(result["device"])


def _disrupted(pod: dict[str, Any] | None) -> bool:
    return any(c.get("type") == "DisruptionTarget" and c.get("reason") == "DeletionByDeviceTaintManager"
               for c in (pod or {}).get("status", {}).get("conditions") or [])


def test_slice_taint_noexecute_evicts_at_once_unless_tolerated(env: Env) -> None:
    env.cluster(nodes=1, gpus=3)
    env.create(b.template("plain"))
    env.create(b.template("tolerant", tolerations=[b.toleration()]))
    manager = env.manager()
    env.create(b.pod("victim", templates={"gpu": "plain"}))
    env.create(b.pod("survivor", templates={"gpu": "tolerant"}))
    wait_for(lambda: env.bound("victim", "survivor"), what="both pods bound")
    pool, victim_device = _device_of(env, "victim")
    _, survivor_device = _device_of(env, "survivor")
    # The driver marks both devices broken.
    slice_ = env.get("ResourceSlice", f"{pool}-gpus")
    assert slice_ is not None
    now = ob.format_time(time.time())
    for d in slice_["spec"]["devices"]:
        if d["name"] in (victim_device, survivor_device):
            d["taints"] = [b.taint(time_added=now)]
    env.replace(slice_)
    # The eviction marks the pod first, then deletes it; with no kubelet to finish a graceful
    # delete, the pod stays (terminating) with the condition that says why.
    wait_for(lambda: ob.deleting(env.pod("victim") or {"metadata": {"deletionTimestamp": "x"}}), what="the victim deleted")
    victim = env.pod("victim")
    assert victim is None or _disrupted(victim), "the DisruptionTarget condition is added before deleting"
    env.settle()
    survivor = env.pod("survivor")
    assert survivor is not None and not ob.deleting(survivor)
    assert manager.metrics.pod_deletions._value.get() == 1
    assert env.events("DeviceTaintManagerEviction")


def test_taint_rule_evicts_after_toleration_seconds_and_removal_cancels(env: Env) -> None:
    env.cluster(nodes=1, gpus=2)
    env.create(b.template("patient", tolerations=[b.toleration(seconds=2)]))
    env.create(b.template("slow", tolerations=[b.toleration(seconds=60)]))
    manager = env.manager()
    rules = manager.cluster.informer("rules")
    env.create(b.pod("quick", templates={"gpu": "patient"}))
    env.create(b.pod("slow", templates={"gpu": "slow"}))
    wait_for(lambda: env.bound("quick", "slow"), what="both pods bound")
    assert rules.served, "the real server serves DeviceTaintRules at resource.k8s.io/v1"
    start = time.monotonic()
    env.create(b.taint_rule("node-a-down", pool="node-a", time_added=ob.format_time(time.time())))
    wait_for(lambda: ob.deleting(env.pod("quick") or {"metadata": {"deletionTimestamp": "x"}}), what="quick evicted")
    # timeAdded has second precision, so the eviction comes 1 to 2 s after the rule.
    assert time.monotonic() - start >= 0.5, "tolerationSeconds delays the eviction"
    slow = env.pod("slow")
    assert slow is not None and not ob.deleting(slow)
    # Removing the rule before the slow pod's 60 s are up cancels its eviction.
    env.delete("DeviceTaintRule", "node-a-down")
    wait_for(lambda: rules.store.get("node-a-down") is None, what="the controllers to see the rule go")
    env.settle()
    # The re-check still scheduled for the slow pod's deadline finds nothing to do.
    manager.controllers["eviction"].runner.process("default/slow")
    slow = env.pod("slow")
    assert slow is not None and not ob.deleting(slow) and not _disrupted(slow)
    assert manager.metrics.pod_deletions._value.get() == 1
