"""The ResourceClaim controller's shell: events in, :mod:`controllers.claims` decides, API out.

Keys are ``pod:<ns>/<name>`` (create claims from templates, record them in the pod status,
reserve allocated claims for pods on a node) and ``claim:<ns>/<name>`` (drop stale
reservations, deallocate, delete claims of finished pods), as upstream's controller uses them.
Every write is either a create, a status/metadata update preconditioned on the
resourceVersion read, a patch carrying the pod UID, or a delete with a UID precondition: a
conflict only means "read again", so syncs are idempotent and safe across restarts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence, Set

from dra_solver.controllers import claims as logic
from dra_solver.controllers import objects as ob
from dra_solver.controllers.cluster import (
    CLAIM_OWNER_INDEX,
    POD_CLAIMS_INDEX,
    POD_GROUP_INDEX,
    Cluster,
)
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.objects import Obj
from dra_solver.controllers.runtime import Events, Retry, Runner, UIDCache, new_queue
from dra_solver.service.api import kube

log = logging.getLogger(__name__)

POD_PREFIX = "pod:"
CLAIM_PREFIX = "claim:"
GROUP_PREFIX = "podgroup:"

UNALLOCATED_GRACE = 5.0
"""Seconds a pod may be seen on its node with an unallocated claim before that is reported. A
scheduler allocates and reserves a pod's claims before it binds the pod, but the two changes
come on different watches: the pod on its node may show here before its claims' allocation
does, and reporting then would be a false alarm on a pod that is fine."""


class ClaimController:
    name = "resource_claim"

    def __init__(
        self,
        kube_api: kube.Kube,
        cluster: Cluster,
        metrics: ControllerMetrics,
        *,
        workers: int = 2,
        admin_access_enabled: bool = True,
        events: Events | None = None,
        unallocated_grace: float = UNALLOCATED_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube_api
        self.cluster = cluster
        self.metrics = metrics
        self.admin_access_enabled = admin_access_enabled
        self.events = events or Events(None, "resource_claim")
        self.pods = cluster.informer("pods")
        self.claims = cluster.informer("claims")
        self.templates = cluster.informer("templates")
        self.deleted = UIDCache(500)
        self.unallocated_grace = unallocated_grace
        self._clock = clock
        self._unallocated_since: dict[str, float] = {}
        """Pod UID -> when it was first seen on its node with a claim not allocated."""
        self._unallocated_lock = threading.Lock()
        self.queue = new_queue(self.name, metrics)
        self.runner = Runner(self.name, self.queue, self.sync, workers=workers, metrics=metrics)
        self.pods.add_handler(self._on_pod)
        self.claims.add_handler(self._on_claim)
        self.groups = cluster.informers.get("podgroups")
        """PodGroups, whose template claims are made once for the group (None: not cached)."""
        if self.groups is not None:
            self.groups.add_handler(self._on_group)

    def start(self) -> None:
        self.runner.start()

    def stop(self) -> None:
        self.runner.stop()

    # --- events -------------------------------------------------------------------------------

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        pod = new if new is not None else old
        assert pod is not None
        if new is None:
            self._settled(pod)
        self._enqueue_pod(pod, deleted=new is None)

    def _on_group(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            assert old is not None
            # Its claims' reservations for it go (a template claim it owns could not be
            # deleted while reserved).
            self.deleted.add(ob.uid(old))
            for claim in _claims_of_group(old):
                self.queue.add(CLAIM_PREFIX + claim)
            return
        if any(e.get("resourceClaimTemplateName") for e in ob.spec(new).get("resourceClaims") or []):
            self.queue.add(GROUP_PREFIX + ob.key(new))
        if old is None or ob.status(old).get("resourceClaimStatuses") != ob.status(new).get("resourceClaimStatuses"):
            for pod in self.pods.store.by_index(POD_GROUP_INDEX, ob.key(new)):
                self._enqueue_pod(pod, deleted=False)

    def _group_of(self, pod: Obj) -> Obj | None:
        name = ((ob.spec(pod).get("schedulingGroup") or {}).get("podGroupName")) or ""
        if not name or self.groups is None:
            return None
        return self.groups.store.get(f"{ob.namespace(pod)}/{name}")

    def _enqueue_pod(self, pod: Obj, *, deleted: bool) -> None:
        if not ob.pod_claims(pod) and not ob.extended_claim_name(pod):
            return
        if deleted:
            self.deleted.add(ob.uid(pod))
        if logic.pod_releases_claims(pod, deleted=deleted):
            for k in logic.claim_names_of_pod(pod):
                self.queue.add(CLAIM_PREFIX + k)
        if not deleted:
            needed, _ = logic.pod_needs_work(pod, self.cluster.view("claims"))
            if needed:
                self.queue.add(POD_PREFIX + ob.key(pod))

    def _on_claim(self, old: Obj | None, new: Obj | None) -> None:
        was = old is not None and ob.allocation(old) is not None
        now = new is not None and ob.allocation(new) is not None
        if old is None:
            self.metrics.resource_claims.labels(allocated=str(now).lower()).inc()
        elif new is None:
            self.metrics.resource_claims.labels(allocated=str(was).lower()).dec()
        elif was != now:
            self.metrics.resource_claims.labels(allocated=str(was).lower()).dec()
            self.metrics.resource_claims.labels(allocated=str(now).lower()).inc()
        claim = new if new is not None else old
        assert claim is not None
        if new is not None:
            # On start every claim passes here: stale reservations from before are found too.
            self.queue.add(CLAIM_PREFIX + ob.key(claim))
        for pod in self.pods.store.by_index(POD_CLAIMS_INDEX, ob.key(claim)):
            self._enqueue_pod(pod, deleted=False)

    # --- syncs --------------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        if key.startswith(POD_PREFIX):
            self.sync_pod(key[len(POD_PREFIX) :])
        elif key.startswith(GROUP_PREFIX):
            self.sync_pod_group(key[len(GROUP_PREFIX) :])
        elif key.startswith(CLAIM_PREFIX):
            self.sync_claim(key[len(CLAIM_PREFIX) :])
        else:
            log.error("%s: unexpected key %r", self.name, key)

    def sync_pod(self, key: str) -> None:
        pod = self.pods.store.get(key)
        if pod is None or ob.deleting(pod):
            if pod is not None:
                self._settled(pod)
            return
        ns = ob.namespace(pod)
        plan = logic.sync_pod(
            pod,
            claims=self.cluster.view("claims"),
            templates=self.cluster.view("templates"),
            owned=self.claims.store.by_index(CLAIM_OWNER_INDEX, ob.uid(pod)),
            admin_access_enabled=self.admin_access_enabled,
            group=logic.group_entries(pod, self._group_of(pod)),
        )
        names = {**plan.record, **self._create_claims(pod, "Pod", plan.creates)}
        if names:
            try:
                patched = self.kube.patch_pod_status(ns, ob.name(pod), logic.pod_status_patch(pod, names))
            except kube.NotFound:
                return  # the pod is gone; its claims go with it (owner reference)
            self.pods.store.assume(patched)
        for reserve in plan.reserve:
            body = ob.deep_copy(reserve.claim)
            body["status"] = reserve.status
            updated = self.kube.update_claim_status(body)
            self.claims.store.assume(updated)
            log.info("reserved ResourceClaim %s for pod %s", ob.key(updated), key)
        if not plan.unallocated:
            self._settled(pod)
        elif self._unallocated_for_long(pod, key):
            for problem in plan.unallocated:
                self.events.emit(pod, "Pod", type_="Warning", reason="ResourceClaimNotAllocated", message=problem)
                log.info("pod %s: %s", key, problem)
        if plan.errors:
            for problem in plan.errors:
                self.events.emit(pod, "Pod", type_="Warning", reason="FailedResourceClaimCreation", message=problem)
            raise Retry("; ".join(plan.errors))

    def _unallocated_for_long(self, pod: Obj, key: str) -> bool:
        """Whether ``pod`` has been seen on its node with an unallocated claim for
        ``unallocated_grace`` seconds; if not yet, it is looked at again when they are up."""
        now = self._clock()
        with self._unallocated_lock:
            since = self._unallocated_since.setdefault(ob.uid(pod), now)
        left = since + self.unallocated_grace - now
        if left <= 0:
            return True
        self.queue.add_after(POD_PREFIX + key, left)
        return False

    def _settled(self, pod: Obj) -> None:
        with self._unallocated_lock:
            self._unallocated_since.pop(ob.uid(pod), None)

    def _create_claims(self, owner: Obj, kind: str, creates: Sequence[logic.CreateClaim]) -> dict[str, str]:
        """Create ``creates`` for ``owner`` (a Pod or a PodGroup): each entry's claim name. A
        failure is counted and said in an event on the owner, then raised (the sync retries)."""
        ns = ob.namespace(owner)
        names: dict[str, str] = {}
        for create in creates:
            admin = str(create.admin_access).lower()
            try:
                created = self.kube.create_claim(ns, create.body)
            except kube.ApiError as err:
                self.metrics.claim_creates.labels(status="failure", admin_access=admin).inc()
                entry = f"PodResourceClaim {create.pod_claim}" if kind == "Pod" else f"resourceClaims entry {create.pod_claim}"
                self.events.emit(owner, kind, type_="Warning", reason="FailedResourceClaimCreation", message=f"{entry}: {err}")
                raise
            self.metrics.claim_creates.labels(status="success", admin_access=admin).inc()
            # Remember it at once: if the status patch that records it fails, the retry must
            # find this claim instead of creating a second one.
            self.claims.store.assume(created)
            names[create.pod_claim] = ob.name(created)
            log.info("created ResourceClaim %s/%s for %s %s", ns, ob.name(created), "pod" if kind == "Pod" else kind, ob.key(owner))
        return names

    def sync_pod_group(self, key: str) -> None:
        """Make the claims of a PodGroup's template entries (one per entry, owned by the group)
        and record them in its ``status.resourceClaimStatuses``."""
        assert self.groups is not None
        group = self.groups.store.get(key)
        if group is None:
            return
        ns = ob.namespace(group)
        plan = logic.sync_pod_group(
            group, claims=self.cluster.view("claims"), templates=self.cluster.view("templates"),
            owned=self.claims.store.by_index(CLAIM_OWNER_INDEX, ob.uid(group)), admin_access_enabled=self.admin_access_enabled,
        )
        names = {**plan.record, **self._create_claims(group, "PodGroup", plan.creates)}
        if names:
            try:
                patched = self.kube.patch_pod_group_status(ns, ob.name(group), logic.group_status_patch(group, names))
            except kube.NotFound:
                return
            self.groups.store.assume(patched)
        if plan.errors:
            for problem in plan.errors:
                self.events.emit(group, "PodGroup", type_="Warning", reason="FailedResourceClaimCreation", message=problem)
            raise Retry("; ".join(plan.errors))

    def sync_claim(self, key: str) -> None:
        claim = self.claims.store.get(key)
        if claim is None:
            return
        ns = ob.namespace(claim)
        names = {str(r.get("name") or "") for r in ob.reserved_for(claim) if not ob.is_podgroup_ref(r)}
        owner_name, _ = ob.owning_pod(claim)
        if owner_name:
            names.add(owner_name)
        deleted = self.deleted.snapshot()
        pods = _known(claim, names, self.pods.store.get, logic.pods_to_look_up, self.kube.get_pod, deleted)
        groups: dict[str, Obj | None] | None = None
        if self.groups is not None:
            group_names = {str(r.get("name") or "") for r in ob.reserved_for(claim) if ob.is_podgroup_ref(r)}
            groups = _known(claim, group_names, self.groups.store.get, logic.groups_to_look_up, self.kube.get_pod_group, deleted)
        plan = logic.sync_claim(claim, pods=pods, deleted=deleted, groups=groups)
        if plan.empty:
            return
        log.info("claim %s: %s", key, "; ".join(plan.notes) or "update")
        if plan.status is not None:
            body = ob.deep_copy(claim)
            body["status"] = plan.status
            claim = self.kube.update_claim_status(body)
            self.claims.store.assume(claim)
        if plan.remove_finalizer and ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(claim):
            claim = self.kube.update_claim(logic.without_finalizer(claim))
            self.claims.store.assume(claim)
        if plan.delete:
            with contextlib.suppress(kube.NotFound):
                self.kube.delete_claim(ns, ob.name(claim), uid=ob.uid(claim))


def _claims_of_group(group: Obj) -> list[str]:
    """``namespace/name`` of the claims a PodGroup names: its standalone entries and the claims
    made from its template entries (recorded in its status)."""
    ns = ob.namespace(group)
    names = {str(e.get("resourceClaimName")) for e in ob.spec(group).get("resourceClaims") or [] if e.get("resourceClaimName")}
    names |= {str(s.get("resourceClaimName")) for s in ob.status(group).get("resourceClaimStatuses") or [] if s.get("resourceClaimName")}
    return [f"{ns}/{n}" for n in sorted(names)]


def _known(
    claim: Obj,
    names: Iterable[str],
    cached: Callable[[str], Obj | None],
    to_look_up: Callable[..., list[str]],
    get: Callable[[str, str], Obj],
    deleted: Set[str],
) -> dict[str, Obj | None]:
    """The objects ``names`` (in the claim's namespace) as the cache has them, plus those
    ``to_look_up`` says to read from the API server (None: gone)."""
    ns = ob.namespace(claim)
    known: dict[str, Obj | None] = {}
    for n in sorted(names):
        found = cached(f"{ns}/{n}")
        if found is not None:
            known[n] = found
    for n in to_look_up(claim, cached=known, deleted=deleted):
        try:
            known[n] = get(ns, n)
        except kube.NotFound:
            known[n] = None
    return known
