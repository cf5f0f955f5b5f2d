"""Builders for the API objects the controller tests use (plain dicts, the API's JSON form)."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

Obj = dict[str, Any]

NS = "default"
DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"


def pod(
    name: str,
    *,
    ns: str = NS,
    uid: str | None = None,
    templates: dict[str, str] | None = None,
    claims: dict[str, str] | None = None,
    statuses: dict[str, str | None] | None = None,
    node: str = "",
    scheduler: str = "dra-solver",
    cpu: str = "100m",
    memory: str = "128Mi",
    phase: str = "Pending",
    deleting: bool = False,
    node_selector: dict[str, str] | None = None,
    tolerations: list[Obj] | None = None,
) -> Obj:
    """A pod; ``templates``: pod claim -> template, ``claims``: pod claim -> claim name,
    ``statuses``: pod claim -> generated claim name recorded in the status."""
    resource_claims = [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    resource_claims += [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if resource_claims:
        spec["resourceClaims"] = resource_claims
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    meta: Obj = {"name": name, "namespace": ns}
    if uid is not None:
        meta["uid"] = uid
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    status: Obj = {"phase": phase}
    if statuses is not None:
        status["resourceClaimStatuses"] = [{"name": k, **({"resourceClaimName": v} if v else {})} for k, v in statuses.items()]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def template(name: str, *, ns: str = NS, count: int = 1, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             admin: bool = False, tolerations: list[Obj] | None = None) -> Obj:
    exactly: Obj = {"deviceClassName": CLASS, "count": count}
    if admin:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = tolerations
    meta: Obj = {}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    spec: Obj = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}
    if meta:
        spec["metadata"] = meta
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def claim(
    name: str,
    *,
    ns: str = NS,
    uid: str | None = None,
    count: int = 1,
    owner: Obj | None = None,
    pod_claim: str | None = None,
    devices: list[str] | None = None,
    node: str = "node-a",
    reserved: list[Obj] | None = None,
    finalizer: bool = False,
    deleting: bool = False,
    tolerations: list[Obj] | None = None,
    rv: str | None = None,
) -> Obj:
    """A claim; ``devices`` (device names in pool ``node``) makes it allocated; ``reserved``
    lists pods (objects) in reservedFor; ``owner`` a pod that controls it."""
    meta: Obj = {"name": name, "namespace": ns}
    if uid is not None:
        meta["uid"] = uid
    if rv is not None:
        meta["resourceVersion"] = rv
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"], "uid": owner["metadata"].get("uid", ""), "controller": True, "blockOwnerDeletion": True}
        ]
    if pod_claim is not None:
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim}
    if finalizer:
        meta["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    out: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": count}}]}},
    }
    status: Obj = {}
    if devices is not None:
        results = []
        for d in devices:
            r: Obj = {"request": "gpu", "driver": DRIVER, "pool": node, "device": d}
            if tolerations:
                r["tolerations"] = copy.deepcopy(tolerations)
            results.append(r)
        status["allocation"] = {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"].get("uid", "")} for p in reserved]
    if status:
        out["status"] = status
    return out


def node(name: str, *, cpu: str = "8", memory: str = "32Gi", pods: str = "110", labels: dict[str, str] | None = None,
         taints: list[Obj] | None = None, unschedulable: bool = False) -> Obj:
    spec: Obj = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}, "capacity": {"cpu": cpu, "memory": memory, "pods": pods}},
    }


def gpu_slice(node_name: str, *, count: int = 4, generation: int = 1, taints: dict[str, list[Obj]] | None = None, name: str | None = None) -> Obj:
    devices = []
    for i in range(count):
        d: Obj = {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}}, "capacity": {"memory": {"value": "80Gi"}}}
        if taints and f"gpu-{i}" in taints:
            d["taints"] = copy.deepcopy(taints[f"gpu-{i}"])
        devices.append(d)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(name: str = CLASS) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


def taint_rule(name: str, *, device: str | None = None, pool: str | None = None, effect: str = "NoExecute", time_added: str | None = None,
               key: str = "example.com/broken") -> Obj:
    selector: Obj = {"driver": DRIVER}
    if pool is not None:
        selector["pool"] = pool
    if device is not None:
        selector["device"] = device
    taint: Obj = {"key": key, "value": "true", "effect": effect}
    if time_added:
        taint["timeAdded"] = time_added
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": {"deviceSelector": selector, "taint": taint}}


def micro_time(seconds: float) -> str:
    """Seconds since the epoch -> RFC 3339 with microseconds, as metav1.MicroTime (a Lease's renewTime)."""
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def taint(key: str = "example.com/broken", *, effect: str = "NoExecute", time_added: str | None = "2025-01-01T00:00:00Z") -> Obj:
    out: Obj = {"key": key, "value": "true", "effect": effect}
    if time_added:
        out["timeAdded"] = time_added
    return out


def toleration(key: str = "example.com/broken", *, seconds: int | None = None, effect: str = "NoExecute", operator: str = "Exists") -> Obj:
    out: Obj = {"key": key, "operator": operator, "effect": effect}
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    return out


def by_key(*objs: Obj) -> dict[str, Obj]:
    out = {}
    for o in objs:
        meta = o["metadata"]
        out[f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]] = o
    return out
