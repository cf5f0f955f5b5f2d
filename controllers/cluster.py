"""The shared caches every controller reads: one informer per resource, started once.

Controllers register their event handlers before :meth:`Cluster.start`; each resource is
listed and watched once no matter how many controllers read it. Indexes that several
controllers need live here too (pods by the claims they reference, claims by owning pod and
by the devices they hold).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from dra_solver.controllers import claims as claim_logic
from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling
from dra_solver.controllers.objects import Obj
from dra_solver.controllers.runtime import StoreView
from dra_solver.service.api import Informer, kube, wait_for_sync

POD_CLAIMS_INDEX = "claims"
"""Pods by ``namespace/name`` of every ResourceClaim they reference."""
CLAIM_OWNER_INDEX = "owner"
"""Claims by the UID of the Pod (or PodGroup) controlling them."""
POD_GROUP_INDEX = "podgroup"
"""Pods by the ``namespace/name`` of the PodGroup their ``spec.schedulingGroup`` names."""
CLAIM_DEVICE_INDEX = "devices"
"""Allocated claims by each device they hold exclusively (``driver/pool/device``)."""

RESOURCES = ("pods", "claims", "templates", "nodes", "slices", "rules", "classes", "podgroups")


def _pod_claims(pod: Obj) -> list[str]:
    return claim_logic.claim_names_of_pod(pod)


def _pod_group(pod: Obj) -> list[str]:
    name = ((ob.spec(pod).get("schedulingGroup") or {}).get("podGroupName")) or ""
    return [f"{ob.namespace(pod)}/{name}"] if name else []


def _claim_owner(claim: Obj) -> list[str]:
    _, owner_uid = ob.owning_pod(claim)
    group_uid = claim_logic.owning_group_uid(claim)
    return [owner_uid] if owner_uid else [group_uid] if group_uid else []


class Cluster:
    def __init__(self, kube_api: kube.Kube, *, resources: Iterable[str] = RESOURCES, watch_timeout: int = 300) -> None:
        self.kube = kube_api
        wanted = set(resources)
        unknown = wanted - set(RESOURCES)
        if unknown:
            raise ValueError(f"unknown resources {sorted(unknown)}")
        sources = {
            "pods": kube_api.pods,
            "claims": kube_api.claims,
            "templates": kube_api.templates,
            "nodes": kube_api.nodes,
            "slices": kube_api.slices,
            "rules": kube_api.taint_rules,
            "classes": kube_api.device_classes,
            "podgroups": kube_api.pod_groups,
        }
        self.informers: dict[str, Informer] = {
            name: Informer(sources[name](), watch_timeout=watch_timeout) for name in RESOURCES if name in wanted
        }
        if "pods" in self.informers:
            self.informers["pods"].store.add_index(POD_CLAIMS_INDEX, _pod_claims)
            self.informers["pods"].store.add_index(POD_GROUP_INDEX, _pod_group)
        if "claims" in self.informers:
            self.informers["claims"].store.add_index(CLAIM_OWNER_INDEX, _claim_owner)
            self.informers["claims"].store.add_index(CLAIM_DEVICE_INDEX, scheduling.claim_devices)
        self._started = False
        self._lock = threading.Lock()

    def informer(self, name: str) -> Informer:
        try:
            return self.informers[name]
        except KeyError:
            raise ValueError(f"the cluster cache was built without {name}") from None

    def view(self, name: str) -> StoreView:
        return StoreView(self.informer(name).store)

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.request_stop()  # all at once: their watches close in parallel
        for informer in self.informers.values():
            informer.stop()

    def wait_synced(self, timeout: float, *, stop: threading.Event | None = None) -> bool:
        return wait_for_sync(list(self.informers.values()), timeout=timeout, stop=stop)
