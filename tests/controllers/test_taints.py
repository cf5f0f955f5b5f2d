"""NoExecute device taints evict on the real kube-apiserver: a taint in a ResourceSlice at once,
a DeviceTaintRule (resource.k8s.io/v1, what v1.37 serves and ``--device-taint-rule-version``
defaults to) after the claim's ``tolerationSeconds``; a claim that tolerates the taint keeps its
pod, and a rule removed before the toleration runs out cancels the eviction.

"A toleration added in time prevents eviction" cannot happen as written in resource.k8s.io/v1:
the tolerations that count are the ones copied into ``status.allocation.devices.results[]`` when
the claim is allocated, and both the claim's spec and a populated ``status.allocation`` are
immutable (the last test shows the real server refusing either change). Upstream's eviction
controller relies on the same fact: it computes a claim's eviction time once, when the
allocation appears. A pod can only keep a device it does not tolerate by the taint going away
or losing its NoExecute effect before the deadline, which is what the rule-removed and
rule-downgraded tests exercise; a new claim with the toleration means a new pod (claims in use
are never reallocated), which the scheduling tests cover.
"""

from __future__ import annotations

import json
import time
import urllib.error
from typing import Any

from dra_solver.controllers import eviction as logic
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
    env.settle()
    # No device tainted yet: the pods' and claims' changes were not looked at.
    handed = manager.metrics.queue_duration.labels(name=manager.controllers["eviction"].name)
    assert sum(bucket.get() for bucket in handed._buckets) == 0
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


def test_tolerations_are_fixed_at_allocation_and_a_rule_downgraded_in_time_cancels(env: Env) -> None:
    env.cluster(nodes=1, gpus=1)
    env.create(b.template("patient", tolerations=[b.toleration(seconds=60)]))
    manager = env.manager()
    rules = manager.cluster.informer("rules")
    env.create(b.pod("worker", templates={"gpu": "patient"}))
    wait_for(lambda: env.bound("worker"), what="the pod bound")
    [claim] = env.claims_of(env.pod("worker") or {})
    env.create(b.taint_rule("node-a-down", pool="node-a", time_added=ob.format_time(time.time())))
    wait_for(lambda: rules.store.get("node-a-down") is not None, what="the controllers to see the rule")
    eviction = manager.controllers["eviction"]

    def pending() -> logic.Eviction | None:
        pod = eviction.pods.store.get("default/worker")
        return logic.pod_eviction(pod, eviction.cluster.view("claims"), eviction.index()) if pod else None

    due = pending()
    assert due is not None and due.when - time.time() > 50, "the rule schedules the pod's eviction in ~60 s"

    # Tolerating the taint for longer (or forever) is refused: the spec is immutable, and so is
    # the allocation result the tolerations were copied into.
    forever = b.toleration()
    spec = claim["spec"]
    spec["devices"]["requests"][0]["exactly"]["tolerations"] = [forever]
    allocation = claim["status"]["allocation"]
    allocation["devices"]["results"] = [{**r, "tolerations": [forever]} for r in ob.allocated_devices(claim)]
    for subresource, field, body in (("", "spec", {"spec": spec}),
                                     ("status", "status.allocation", {"status": {"allocation": allocation}})):
        try:
            env.patch("ResourceClaim", claim["metadata"]["name"], body, subresource=subresource)
        except urllib.error.HTTPError as err:
            causes = json.loads(err.read())["details"]["causes"]
            assert err.code == 422 and [c["field"] for c in causes] == [field], causes
        else:
            raise AssertionError(f"the server accepted a toleration added to {field}")

    # What an operator can do in time: lower the rule's effect to NoSchedule (the device stays
    # out of new allocations; running pods keep it). The pending eviction is cancelled.
    rule = env.get("DeviceTaintRule", "node-a-down", ns="")
    assert rule is not None
    rule["spec"]["taint"]["effect"] = "NoSchedule"
    env.replace(rule)
    wait_for(lambda: (rules.store.get("node-a-down") or {}).get("spec", {}).get("taint", {}).get("effect") == "NoSchedule",
             what="the controllers to see the rule change")
    env.settle()
    assert pending() is None
    eviction.runner.process("default/worker")  # the re-check due at the deadline finds nothing to do
    worker = env.pod("worker")
    assert worker is not None and not ob.deleting(worker) and not _disrupted(worker)
    assert manager.metrics.pod_deletions._value.get() == 0
