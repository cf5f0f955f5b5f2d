"""Builders for the API objects tests use, in upstream's test-table style.

Objects are the API's JSON form (what kubectl shows and the API server takes); ``.decode()``
gives the typed object the allocators read. A claim is built by chaining, each step returning a
new builder (as upstream's ``wrapResourceClaim`` methods return copies), so a builder can serve
as a named starting point::

    claim("c", cls=GPU_CLASS).request("gpu", count=2).constraint(match="gpu.example.com/numa").obj()
    ONE_GPU.named("shared").allocated("gpu-0", node="node-a").reserved_for(pod).finalizer().obj()
    claim("c", request(count=2), first_available("r", sub("big"), sub("small"))).decode()

The other kinds (pods, templates, nodes, slices, classes, taint rules, tolerations) are plain
functions returning JSON.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object

Obj = dict[str, Any]

RESOURCE_V1: Final = "resource.k8s.io/v1"
NS: Final = "default"

# Upstream's allocator-test names (the model tests).
DRIVER_A: Final = "driver-a"
DRIVER_B: Final = "driver-b"
CLASS_A: Final = "class-a"
CLASS_B: Final = "class-b"
NODE_1: Final = "node-1"
NODE_2: Final = "node-2"
POOL_1: Final = "pool-1"

# An example GPU driver (the controller and service tests; its class has the driver's name).
DRIVER: Final = "gpu.example.com"
CLASS: Final = "gpu.example.com"

# The kubelet plugin's simulated GPUs.
SIM_DRIVER: Final = "gpu.sim.dra-solver.dev"
SIM_CLASS: Final = "gpu.sim.dra-solver.dev"

DELETE_PROTECTION: Final = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME: Final = "resource.kubernetes.io/pod-claim-name"
T0: Final = "2025-01-01T00:00:00Z"


class DerivedUID:
    """``uid=`` a UID computed from the claim's namespace and name when it is built."""

    def __init__(self, name: str, derive: Callable[[str, str], str]) -> None:
        self._name = name
        self._derive = derive

    def __call__(self, namespace: str, name: str) -> str:
        return self._derive(namespace, name)

    def __repr__(self) -> str:
        return self._name

    def __deepcopy__(self, memo: dict[int, Any]) -> DerivedUID:
        return self  # a marker, however often a builder is copied


NAME_UID: Final = DerivedUID("NAME_UID", lambda ns, name: str(uuid.uuid5(uuid.NAMESPACE_URL, f"claim/{ns}/{name}")))
"""A UUID derived from namespace and name (stable across runs)."""

PREFIXED_UID: Final = DerivedUID("PREFIXED_UID", lambda ns, name: f"uid-{ns}-{name}")
"""``uid-<namespace>-<name>``."""


# --- requests and results ----------------------------------------------------------------------


def request(name: str = "req-0", cls: str = CLASS_A, count: int | None = 1, **exactly: Any) -> Obj:
    """A request for ``count`` devices of class ``cls`` (``count=None`` leaves it to the
    default); other ``exactly`` fields as given (``selectors=``, ``adminAccess=``...)."""
    body: Obj = {"deviceClassName": cls}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": {**body, **exactly}}


def sub(name: str, cls: str = CLASS_A, count: int | None = 1, **fields: Any) -> Obj:
    """One alternative of a FirstAvailable request."""
    body: Obj = {"name": name, "deviceClassName": cls}
    if count is not None:
        body["count"] = count
    return {**body, **fields}


def first_available(name: str, *subs: Obj) -> Obj:
    return {"name": name, "firstAvailable": list(subs)}


def selector(expression: str) -> Obj:
    return {"cel": {"expression": expression}}


def result(request: str, device: str, *, driver: str = DRIVER_A, pool: str = POOL_1, share_id: str | None = None,
           consumed: dict[str, str] | None = None, **fields: Any) -> Obj:
    """One ``status.allocation.devices.results[]`` entry."""
    out: Obj = {"request": request, "driver": driver, "pool": pool, "device": device}
    if share_id:
        out["shareID"] = share_id
    if consumed:
        out["consumedCapacity"] = consumed
    return {**out, **copy.deepcopy(fields)}


# --- claims -------------------------------------------------------------------------------------


class Claim:
    """A ResourceClaim being built. ``cls``, ``driver`` and ``pool`` are defaults for the
    requests and results added later; they are not part of the object."""

    __slots__ = ("_cls", "_doc", "_driver", "_pool")

    def __init__(self, doc: Obj, *, cls: str, driver: str, pool: str) -> None:
        self._doc = doc
        self._cls = cls
        self._driver = driver
        self._pool = pool

    def _with(self, change: Any) -> Claim:
        doc = copy.deepcopy(self._doc)
        change(doc)
        return Claim(doc, cls=self._cls, driver=self._driver, pool=self._pool)

    def _devices(self, doc: Obj) -> Obj:
        devices: Obj = doc["spec"]["devices"]
        return devices

    # -- identity --

    def named(self, name: str, *, ns: str | None = None) -> Claim:
        def change(doc: Obj) -> None:
            doc["metadata"]["name"] = name
            if ns is not None:
                doc["metadata"]["namespace"] = ns
        return self._with(change)

    def meta(self, **fields: Any) -> Claim:
        """Metadata fields as given (``labels=``, ``resourceVersion=``, ``generateName=``...)."""
        return self._with(lambda doc: doc["metadata"].update(copy.deepcopy(fields)))

    def uid(self, uid: str) -> Claim:
        return self.meta(uid=uid)

    def rv(self, version: str) -> Claim:
        return self.meta(resourceVersion=version)

    def annotate(self, **annotations: str) -> Claim:
        return self._with(lambda doc: doc["metadata"].setdefault("annotations", {}).update(annotations))

    def pod_claim(self, name: str) -> Claim:
        """Annotated as generated for the pod's claim ``name`` (as the claim controller does)."""
        return self.annotate(**{POD_CLAIM_NAME: name})

    def owned_by(self, pod: Obj) -> Claim:
        """Controlled by ``pod`` (a claim generated from a template)."""
        ref = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"].get("uid", ""),
               "controller": True, "blockOwnerDeletion": True}
        return self.meta(ownerReferences=[ref])

    def finalizer(self, name: str = DELETE_PROTECTION) -> Claim:
        return self._with(lambda doc: doc["metadata"].setdefault("finalizers", []).append(name))

    def deleting(self, at: str = T0) -> Claim:
        return self.meta(deletionTimestamp=at)

    # -- spec --

    def request(self, name: str = "req-0", cls: str | None = None, count: int | None = 1, **exactly: Any) -> Claim:
        body = request(name, self._cls if cls is None else cls, count, **copy.deepcopy(exactly))
        return self._with(lambda doc: self._devices(doc)["requests"].append(body))

    def first_available(self, name: str, *subs: Obj) -> Claim:
        body = first_available(name, *copy.deepcopy(subs))
        return self._with(lambda doc: self._devices(doc)["requests"].append(body))

    def constraint(self, *requests: str, match: str | None = None, distinct: str | None = None) -> Claim:
        """A matchAttribute or distinctAttribute constraint, over ``requests`` (all when none)."""
        body: Obj = {"requests": list(requests)} if requests else {}
        if match is not None:
            body["matchAttribute"] = match
        if distinct is not None:
            body["distinctAttribute"] = distinct
        return self._with(lambda doc: self._devices(doc).setdefault("constraints", []).append(body))

    def devices(self, **fields: Any) -> Claim:
        """``spec.devices`` fields as given (``config=``, ``constraints=``)."""
        return self._with(lambda doc: self._devices(doc).update(copy.deepcopy(fields)))

    # -- status --

    def allocated(self, *picks: str | tuple[str, str] | Obj, node: str | None = None, config: Sequence[Obj] | None = None,
                  **fields: Any) -> Claim:
        """``status.allocation``: each pick is a device name (for the claim's only request), a
        (request, device) pair, or a whole :func:`result`; names use the claim's driver and
        pool (``node``'s pool when given), ``fields`` go into each of those results. ``node``
        also pins the claim to that node, as an allocation of node-local devices does."""
        pool = node if node is not None else self._pool

        def change(doc: Obj) -> None:
            results: list[Obj] = []
            for pick in picks:
                if isinstance(pick, dict):
                    results.append(copy.deepcopy(pick))
                    continue
                if isinstance(pick, tuple):
                    req, device = pick
                else:
                    (only,) = self._devices(doc)["requests"]
                    req, device = only["name"], pick
                results.append(result(req, device, driver=self._driver, pool=pool, **fields))
            devices: Obj = {"results": results}
            if config:
                devices["config"] = copy.deepcopy(list(config))
            allocation: Obj = {"devices": devices}
            if node is not None:
                allocation["nodeSelector"] = {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
            doc.setdefault("status", {})["allocation"] = allocation

        return self._with(change)

    def reserved_for(self, *pods: Obj) -> Claim:
        refs = [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"].get("uid", "")} for p in pods]
        return self._with(lambda doc: doc.setdefault("status", {}).update(reservedFor=refs))

    def status(self, **fields: Any) -> Claim:
        return self._with(lambda doc: doc.setdefault("status", {}).update(copy.deepcopy(fields)))

    # -- out --

    def obj(self) -> Obj:
        """The claim (a fresh copy each time)."""
        doc = copy.deepcopy(self._doc)
        meta = doc["metadata"]
        if isinstance(meta.get("uid"), DerivedUID):
            meta["uid"] = meta["uid"](meta.get("namespace", ""), meta["name"])
        return doc

    def decode(self) -> o.ResourceClaim:
        """The typed claim, decoded strictly with the API server's defaults."""
        out = decode_object(self.obj())
        assert isinstance(out, o.ResourceClaim)
        return out

    def template(self, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Obj:
        """A ResourceClaimTemplate with this claim's name, namespace and spec."""
        doc = self.obj()
        spec: Obj = {"spec": doc["spec"]}
        meta: Obj = {}
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        if meta:
            spec["metadata"] = meta
        return {"apiVersion": RESOURCE_V1, "kind": "ResourceClaimTemplate",
                "metadata": {k: v for k, v in doc["metadata"].items() if k in ("name", "namespace")}, "spec": spec}


def claim(name: str, *requests: Obj, ns: str | None = NS, uid: str | DerivedUID | None = None, cls: str = CLASS_A,
          driver: str = DRIVER_A, pool: str = POOL_1, **devices: Any) -> Claim:
    """A claim with ``requests`` (see :func:`request`) and other ``spec.devices`` fields;
    ``ns=None`` leaves the namespace out. ``cls``, ``driver`` and ``pool``: defaults for what
    is added by chaining."""
    meta: Obj = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    if uid is not None:
        meta["uid"] = uid
    doc: Obj = {"apiVersion": RESOURCE_V1, "kind": "ResourceClaim", "metadata": meta,
                "spec": {"devices": {"requests": copy.deepcopy(list(requests)), **copy.deepcopy(devices)}}}
    return Claim(doc, cls=cls, driver=driver, pool=pool)


ONE_GPU: Final = claim("gpu-claim", cls=CLASS, driver=DRIVER, pool="node-a").request("gpu")
"""One GPU of the example driver (request ``gpu``): the claim of the controller tests."""

SOLVER_TEST: Final = claim("solver-claim", ns="test", uid=PREFIXED_UID, cls=CLASS)
"""A claim in the service tests' namespace ``test`` (add the requests)."""

SIM_GPU: Final = claim("sim-claim", uid=NAME_UID, cls=SIM_CLASS, driver=SIM_DRIVER, pool=NODE_1)
"""A claim for the kubelet plugin's simulated devices on node-1, with a stable UID (add the
requests)."""


# --- other kinds --------------------------------------------------------------------------------


def template(name: str, *, ns: str = NS, count: int = 1, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             admin: bool = False, tolerations: list[Obj] | None = None) -> Obj:
    """A ResourceClaimTemplate for ``count`` GPUs of the example driver (request ``gpu``)."""
    exactly: Obj = {}
    if admin:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = tolerations
    return claim(name, ns=ns, cls=CLASS).request("gpu", count=count, **exactly).template(labels=labels, annotations=annotations)


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
        meta["deletionTimestamp"] = T0
    status: Obj = {"phase": phase}
    if statuses is not None:
        status["resourceClaimStatuses"] = [{"name": k, **({"resourceClaimName": v} if v else {})} for k, v in statuses.items()]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node(name: str, *, cpu: str = "8", memory: str = "32Gi", pods: str = "110", labels: dict[str, str] | None = None,
         taints: list[Obj] | None = None, unschedulable: bool = False) -> Obj:
    """A node as the kubelet registers it (hostname label, allocatable resources)."""
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
    """The example driver's slice of ``count`` GPUs (gpu-0...) in the pool named after the node."""
    devices = []
    for i in range(count):
        d: Obj = {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}}, "capacity": {"memory": {"value": "80Gi"}}}
        if taints and f"gpu-{i}" in taints:
            d["taints"] = copy.deepcopy(taints[f"gpu-{i}"])
        devices.append(d)
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(name: str = CLASS, *, driver: str = DRIVER) -> Obj:
    """A class of all devices of ``driver``."""
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [selector(f"device.driver == '{driver}'")]},
    }


def taint_rule(name: str, *, device: str | None = None, pool: str | None = None, effect: str = "NoExecute", time_added: str | None = None,
               key: str = "example.com/broken") -> Obj:
    selector_: Obj = {"driver": DRIVER}
    if pool is not None:
        selector_["pool"] = pool
    if device is not None:
        selector_["device"] = device
    taint_: Obj = {"key": key, "value": "true", "effect": effect}
    if time_added:
        taint_["timeAdded"] = time_added
    return {"apiVersion": RESOURCE_V1, "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": {"deviceSelector": selector_, "taint": taint_}}


def taint(key: str = "example.com/broken", *, effect: str = "NoExecute", time_added: str | None = T0) -> Obj:
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
    for obj in objs:
        meta = obj["metadata"]
        out[f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]] = obj
    return out


def micro_time(seconds: float) -> str:
    """Seconds since the epoch -> RFC 3339 with microseconds, as metav1.MicroTime (a Lease's renewTime)."""
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
