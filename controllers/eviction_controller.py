"""The device-taint eviction controller's shell: which pods to look at, and the eviction itself.

Work items are pod keys. A pod is looked at when it is scheduled or its claims change, when
one of its claims changes, when a ResourceSlice's NoExecute taints change on a device one of
its claims uses, or when a NoExecute DeviceTaintRule matching such a device changes. The
decision is :mod:`controllers.eviction`'s; a pod that must go later is simply requeued for
that moment, so removing the taint (or the rule) before then cancels the eviction.

Evicting is upstream's sequence: read the pod again (gone or replaced: nothing to do), add the
``DisruptionTarget`` condition, then delete with the pod's UID as precondition.

Work items ``rule:<name>`` keep each DeviceTaintRule's ``EvictionInProgress`` condition
(:mod:`controllers.rulestatus`): written at once when a rule appears or its spec changes, then
at most every ``rule_status_period`` while its pods are evicted, by server-side apply under
this controller's own field manager.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from dra_solver.controllers import eviction as logic
from dra_solver.controllers import objects as ob
from dra_solver.controllers import rulestatus
from dra_solver.controllers.cluster import POD_CLAIMS_INDEX, Cluster
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.objects import Obj
from dra_solver.controllers.runtime import Events, Requeue, Runner, UIDCache, new_queue
from dra_solver.service.api import kube

log = logging.getLogger(__name__)

RULE_PREFIX = "rule:"
FIELD_MANAGER = "dra-solver-device-taint-eviction"
"""Who owns the EvictionInProgress condition on DeviceTaintRules (server-side apply)."""
RULE_REASON = "DeviceTaintRule "


def _no_execute_taints(slice_: Obj | None) -> list[tuple[str, Any]]:
    if slice_ is None:
        return []
    out = []
    for device in ob.spec(slice_).get("devices") or []:
        for taint in device.get("taints") or []:
            if taint.get("effect") == logic.NO_EXECUTE:
                out.append((str(device.get("name")), taint))
    return out


class EvictionController:
    name = "device_taint_eviction"

    def __init__(
        self,
        kube_api: kube.Kube,
        cluster: Cluster,
        metrics: ControllerMetrics,
        *,
        workers: int = 2,
        events: Events | None = None,
        clock: Callable[[], float] = time.time,
        rule_status_period: float = rulestatus.DEFAULT_PERIOD,
    ) -> None:
        self.kube = kube_api
        self.rule_status_period = rule_status_period
        self._evicted_by_rule: dict[str, int] = {}
        """Rule UID -> pods evicted because of it since this controller started."""
        self._stats_lock = threading.Lock()
        self.cluster = cluster
        self.metrics = metrics
        self.events = events or Events(None, "device-taint-eviction-controller")
        self.clock = clock
        self.pods = cluster.informer("pods")
        self.claims = cluster.informer("claims")
        self.slices = cluster.informer("slices")
        self.rules = cluster.informers.get("rules")
        self.evicted = UIDCache(500)
        self.queue = new_queue(self.name, metrics)
        self.runner = Runner(self.name, self.queue, self.sync, workers=workers, metrics=metrics)
        self._index: logic.TaintIndex | None = None
        self._index_lock = threading.Lock()
        self.pods.add_handler(self._on_pod)
        self.claims.add_handler(self._on_claim)
        self.slices.add_handler(self._on_slice)
        if self.rules is not None:
            self.rules.add_handler(self._on_rule)

    def start(self) -> None:
        self.runner.start()

    def stop(self) -> None:
        self.runner.stop()

    # --- the taint index, rebuilt lazily after slice or rule changes ---------------------------

    def index(self) -> logic.TaintIndex:
        with self._index_lock:
            if self._index is None:
                rules = self.rules.store.objects() if self.rules is not None else []
                self._index = logic.TaintIndex(self.slices.store.objects(), rules)
            return self._index

    def _invalidate(self) -> None:
        with self._index_lock:
            self._index = None

    # --- events -------------------------------------------------------------------------------

    # While no device has a NoExecute taint, pod and claim changes evict nothing: they are not
    # looked at. A taint that appears (a slice or a rule) enqueues the users of every claim
    # with a device it covers, read from the caches then, so nothing skipped here is missed.

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        if new is None or not ob.claim_refs(new) or not ob.pod_node(new) or self.index().empty:
            return
        if (
            old is not None
            and ob.pod_node(old) == ob.pod_node(new)
            and ob.status(old).get("resourceClaimStatuses") == ob.status(new).get("resourceClaimStatuses")
            and ob.extended_claim_name(old) == ob.extended_claim_name(new)
        ):
            return  # e.g. our own DisruptionTarget condition: nothing new to decide
        self.queue.add(ob.key(new))

    def _enqueue_users(self, claim: Obj) -> None:
        for pod_key, _ in logic.pods_using(claim):
            self.queue.add(pod_key)
        for pod in self.pods.store.by_index(POD_CLAIMS_INDEX, ob.key(claim)):
            if ob.pod_node(pod):
                self.queue.add(ob.key(pod))

    def _on_claim(self, old: Obj | None, new: Obj | None) -> None:
        if self.index().empty:
            return
        for claim in (old, new):
            if claim is not None and ob.allocation(claim) is not None:
                self._enqueue_users(claim)

    def _claims_using(self, match: Callable[[str, str, str], bool]) -> None:
        for claim in self.claims.store.objects():
            if any(match(*ob.device_id(r)) for r in ob.allocated_devices(claim)):
                self._enqueue_users(claim)

    def _on_slice(self, old: Obj | None, new: Obj | None) -> None:
        before, after = _no_execute_taints(old), _no_execute_taints(new)
        generation_changed = (ob.spec(old or {}).get("pool") or {}).get("generation") != (ob.spec(new or {}).get("pool") or {}).get("generation")
        if before == after and not (generation_changed and (before or after)):
            return
        self._invalidate()
        s = ob.spec(new if new is not None else old or {})
        driver, pool = sp_driver_pool(s)
        self._claims_using(lambda d, p, _dev: d == driver and p == pool)

    def _on_rule(self, old: Obj | None, new: Obj | None) -> None:
        evicting = [r for r in (old, new) if r is not None and (ob.spec(r).get("taint") or {}).get("effect") == logic.NO_EXECUTE]
        if new is None and old is not None:
            with self._stats_lock:
                self._evicted_by_rule.pop(ob.uid(old), None)
        if old is not None and new is not None and ob.spec(old) == ob.spec(new) and ob.uid(old) == ob.uid(new):
            return
        if new is not None:
            self.queue.add(RULE_PREFIX + ob.name(new))  # report at once, before any eviction
        self._invalidate()
        if evicting:
            self._claims_using(lambda d, p, dev: any(logic.rule_matches(r, d, p, dev) for r in evicting))

    # --- sync ---------------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        if key.startswith(RULE_PREFIX):
            self.sync_rule(key[len(RULE_PREFIX):])
            return
        pod = self.pods.store.get(key)
        claims: Mapping[str, Obj] = self.cluster.view("claims")
        eviction = logic.pod_eviction(pod, claims, self.index()) if pod is not None else None
        decision = logic.decide(pod, eviction, now=self.clock())
        if decision.action != "none" and eviction is not None:
            # Eviction is in progress for these rules: report it, though not at once (more
            # pods may be on their way).
            self._rules_later(eviction)
        if decision.action == "none" or pod is None:
            return
        if decision.action == "wait":
            raise Requeue(decision.delay, f"evict at {ob.format_time(decision.eviction.when)}" if decision.eviction else "")
        if ob.uid(pod) in self.evicted:
            return
        assert decision.eviction is not None
        self._evict(pod, decision.eviction)

    def _evict(self, cached: Obj, eviction: logic.Eviction) -> None:
        ns, name, uid = ob.namespace(cached), ob.name(cached), ob.uid(cached)
        try:
            pod = self.kube.get_pod(ns, name)
        except kube.NotFound:
            return
        if ob.uid(pod) != uid or ob.deleting(pod) or ob.pod_terminal(pod):
            return  # replaced by a new pod of the same name, already on its way out, or done
        self.events.emit(pod, "Pod", type_="Normal", reason="DeviceTaintManagerEviction", message="Marking for deletion")
        patch = logic.disruption_condition_patch(pod, now=self.clock())
        try:
            if patch is not None:
                self.kube.patch_pod_status(ns, name, patch)
            self.kube.delete_pod(ns, name, uid=uid)
        except (kube.NotFound, kube.Conflict):
            return  # gone, or replaced by a new pod of the same name (UID precondition)
        self.evicted.add(uid)
        self._count_eviction(eviction)
        latency = max(0.0, self.clock() - eviction.when)
        self.metrics.pod_deletions.inc()
        self.metrics.pod_deletion_latency.observe(latency)
        log.info("evicted pod %s/%s (%s) after %.3fs", ns, name, eviction.describe(), latency)


    # --- DeviceTaintRule status ---------------------------------------------------------------

    def _rule_names(self, eviction: logic.Eviction) -> list[str]:
        return [r[len(RULE_REASON):] for r in eviction.reasons if r.startswith(RULE_REASON)]

    def _rules_later(self, eviction: logic.Eviction) -> None:
        for name in self._rule_names(eviction):
            self.queue.add_after(RULE_PREFIX + name, self.rule_status_period)

    def _count_eviction(self, eviction: logic.Eviction) -> None:
        if self.rules is None:
            return
        for name in self._rule_names(eviction):
            rule = self.rules.store.get(name)
            if rule is None:
                continue
            with self._stats_lock:
                self._evicted_by_rule[ob.uid(rule)] = self._evicted_by_rule.get(ob.uid(rule), 0) + 1
            # The informers have to show the pod gone before the count of pending pods is
            # right: report a little later, as upstream does.
            self.queue.add_after(RULE_PREFIX + name, self.rule_status_period)

    def sync_rule(self, name: str) -> None:
        rule = self.rules.store.get(name) if self.rules is not None else None
        if rule is None:
            return
        wait = rulestatus.wait_before_update(rule, now=self.clock(), period=self.rule_status_period)
        if wait > 0:
            raise Requeue(wait, f"DeviceTaintRule {name}: status updated less than {self.rule_status_period:g}s ago")
        with self._stats_lock:
            evicted = self._evicted_by_rule.get(ob.uid(rule), 0)
        counts = rulestatus.count(
            rule, pods=self.pods.store.objects(), claims=self.cluster.view("claims"), slices=self.slices.store.objects(),
            rules=self.rules.store.objects() if self.rules is not None else (), evicted=evicted,
        )
        wanted = rulestatus.condition(rule, counts)
        if not rulestatus.changed(rule, wanted):
            return
        body = rulestatus.apply_body(rule, wanted, now=self.clock(), api_version=f"resource.k8s.io/{self.kube.taint_rule_version}")
        try:
            updated = self.kube.apply_taint_rule_status(name, body, field_manager=FIELD_MANAGER)
        except (kube.NotFound, kube.Conflict):
            return  # deleted, or replaced under the same name (the UID in the request differs)
        if self.rules is not None:
            self.rules.store.assume(updated)
        log.info("DeviceTaintRule %s: %s=%s (%s) %s", name, rulestatus.CONDITION, wanted["status"], wanted["reason"], wanted["message"])


def sp_driver_pool(spec: Mapping[str, Any]) -> tuple[str, str]:
    return str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")
