"""Extended resources backed by DRA (DRAExtendedResource), decided purely from objects.

A DeviceClass serves the extended resource named in its ``spec.extendedResourceName``
(``example.com/gpu``) and, always, ``deviceclass.resource.kubernetes.io/<class name>``. A pod
that asks for such a resource in its containers' ``resources`` and names no ResourceClaim for
it gets devices anyway: the scheduler picks a node, builds one "special" ResourceClaim for all
of the pod's DRA-served extended resources on that node (one ``ExactCount`` request per
container and resource), creates it owned by the pod, allocates and reserves it, and records
it in the pod's ``status.extendedResourceClaimStatus`` with the container -> request mapping
the kubelet needs. This is upstream's ``extendeddynamicresources.go``, learnt and rewritten:

- **Which class**: the newest class naming the resource wins (ties: the lower name); the
  implicit ``deviceclass.resource.kubernetes.io/`` names are unique (:class:`ClassIndex`).
- **Node by node** (:func:`dra_resources_on`): a node whose ``status.allocatable`` lists the
  resource with a non-zero amount serves it by device plugin (the node's capacity is checked,
  no claim); a node without it serves it by DRA when a class exists; otherwise the pod does
  not fit there. The claim therefore differs between nodes.
- **Requests** (:func:`requests_and_mappings`): request ``container-<i>-request-<j>``, ``i``
  the container's index among init containers then containers, ``j`` the resource's index in
  the container's sorted request names; init containers that run to completion reuse the
  requests of the containers that outlive them where they can, and share one request sized
  for the largest of them.
- **A claim left over** from an attempt that did not finish (found by owner and annotation)
  is deleted and the pod tried again, as upstream's PostFilter does.

Nothing here does I/O or mutates its arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling
from dra_solver.controllers.objects import Obj
from dra_solver.model import QuantityError, parse_quantity, qualified_name_errors

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
"""``resourceapi.ExtendedResourceClaimAnnotation``: ``"true"`` on the special claim."""

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""``resourceapi.ResourceDeviceClassPrefix``: ``<prefix><class>`` asks for devices of that class."""

def is_extended_resource_name(name: str) -> bool:
    """core/v1 ``IsExtendedResourceName``: not native (has a ``/`` outside ``kubernetes.io/``),
    not ``requests.``-prefixed, and a qualified name once prefixed with ``requests.``."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not qualified_name_errors(f"requests.{name}")


def is_dra_extended_resource_name(name: str) -> bool:
    """Upstream ``IsDRAExtendedResourceName``: an extended resource name or a class prefix."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


class ClassIndex:
    """Extended resource name -> the DeviceClass that serves it."""

    def __init__(self, classes: Iterable[Mapping[str, Any]]) -> None:
        explicit: dict[str, tuple[float, str]] = {}
        self._by_name: dict[str, str] = {}
        for cls in sorted(classes, key=ob.name):
            name = ob.name(cls)
            self._by_name[DEVICE_CLASS_PREFIX + name] = name
            resource = ob.spec(cls).get("extendedResourceName")
            if not resource:
                continue
            created = ob.parse_time(ob.meta(cls).get("creationTimestamp")) or 0.0
            held = explicit.get(str(resource))
            # The newer class wins (a migration from one class to another); equal times: the
            # lower name, which sorted iteration met first.
            if held is None or created > held[0]:
                explicit[str(resource)] = (created, name)
        for resource, (_, name) in explicit.items():
            self._by_name[resource] = name

    def class_for(self, resource: str) -> str | None:
        return self._by_name.get(resource)

    @property
    def resources(self) -> frozenset[str]:
        """Every resource name some class serves."""
        return frozenset(self._by_name)


def pod_dra_requests(pod: Mapping[str, Any], index: ClassIndex) -> dict[str, Fraction]:
    """The pod's requests (NodeResourcesFit's sums) for resources a DeviceClass serves."""
    out: dict[str, Fraction] = {}
    for name, amount in scheduling.pod_requests(pod).scalars:
        if amount and is_dra_extended_resource_name(name) and index.class_for(name) is not None:
            out[name] = amount
    return out


def dra_resources_on(requests: Mapping[str, Fraction], node: Mapping[str, Any]) -> frozenset[str]:
    """The requested resources DRA must serve on ``node``: those its allocatable lacks (a
    node that lists a resource serves it by device plugin; the node filter checks it)."""
    have = scheduling.node_allocatable(node)
    return frozenset(name for name in requests if have.scalar(name) <= 0)


def find_claim(pod: Mapping[str, Any], claims: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The special claim made for this pod instance by an earlier attempt, if any."""
    for claim in sorted(claims, key=ob.name):
        if ob.annotations_of(claim).get(EXTENDED_CLAIM_ANNOTATION) != "true" or ob.namespace(claim) != ob.namespace(pod):
            continue
        ref = ob.controller_ref(claim)
        if ref is not None and ref.get("uid") == ob.uid(pod) and ref.get("name") == ob.name(pod):
            return claim
    return None


# --- the claim ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestMapping:
    container: str
    resource: str
    request: str

    def to_api(self) -> Obj:
        return {"containerName": self.container, "resourceName": self.resource, "requestName": self.request}


@dataclass(frozen=True, slots=True)
class _Request:
    name: str
    class_name: str
    count: int

    def to_api(self) -> Obj:
        return {"name": self.name, "exactly": {"deviceClassName": self.class_name, "allocationMode": "ExactCount", "count": self.count}}


def _whole(value: Any) -> int:
    """A container's request as a device count (extended resources are whole numbers)."""
    try:
        q = parse_quantity(str(value)).to_fraction()
    except (QuantityError, ValueError):
        return 0
    return int(q) if q.denominator == 1 and q > 0 else 0


def _container_request(
    index: int, container: Mapping[str, Any], resource: str, class_name: str, reusable: Sequence[_Request | None]
) -> tuple[_Request | None, list[RequestMapping]]:
    requests = (container.get("resources") or {}).get("requests") or {}
    wanted = _whole(requests.get(resource)) if resource in requests else 0
    if not wanted:
        return None, []
    mappings: list[RequestMapping] = []
    covered = 0
    cname = str(container.get("name") or "")
    for other in reusable:
        if other is None:
            continue
        covered += other.count
        mappings.append(RequestMapping(cname, resource, other.name))
        if covered >= wanted:
            return None, mappings
    position = sorted(str(k) for k in requests).index(resource)
    request = _Request(f"container-{index}-request-{position}", class_name, wanted - covered)
    mappings.append(RequestMapping(cname, resource, request.name))
    return request, mappings


def requests_and_mappings(pod: Mapping[str, Any], resources: Iterable[str], index: ClassIndex) -> tuple[list[Obj], list[RequestMapping]]:
    """The special claim's requests (sorted by name) and the container mappings for the
    DRA-served ``resources`` of ``pod`` (upstream ``createRequestsAndMappings``)."""
    sp = ob.spec(pod)
    inits = [c for c in sp.get("initContainers") or [] if isinstance(c, Mapping)]
    containers = inits + [c for c in sp.get("containers") or [] if isinstance(c, Mapping)]
    long_lived: list[int] = []
    short_lived: list[int] = []
    for i, c in enumerate(containers):
        sidecar = c.get("restartPolicy") == "Always"
        (short_lived if i < len(inits) and not sidecar else long_lived).append(i)
    requests: list[_Request] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(resources):
        class_name = index.class_for(resource)
        if class_name is None:
            continue
        per_container: list[_Request | None] = [None] * len(containers)
        long_maps: list[RequestMapping] = []
        for i in long_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, ())
            per_container[i] = req
            long_maps.extend(maps)
        # Init containers that finish before the others start can use devices requested by
        # the containers that come after them; what is still missing is one shared request,
        # as large as the largest need among them.
        largest: _Request | None = None
        short_names: set[str] = set()
        short_maps: list[RequestMapping] = []
        for i in short_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, per_container[i:])
            if req is not None:
                short_names.add(req.name)
                if largest is None or largest.count < req.count:
                    largest = req
            short_maps.extend(maps)
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest.name)
            short_maps = [RequestMapping(m.container, m.resource, largest.name) if m.request in short_names else m for m in short_maps]
        if largest is not None:
            requests.append(largest)
        requests.extend(r for r in per_container if r is not None)
        mappings.extend(long_maps)
        mappings.extend(short_maps)
    requests.sort(key=lambda r: r.name)
    return [r.to_api() for r in requests], mappings


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The special claim for one node: what the solver is asked to allocate (under a name of
    our own until the API server names it) and what the pod status must record."""

    claim: Obj
    """The claim as sent to the solver: ``metadata.name`` is :attr:`key`'s name."""
    mappings: tuple[RequestMapping, ...]
    resources: frozenset[str]

    @property
    def key(self) -> str:
        return ob.key(self.claim)


def special_claim(pod: Mapping[str, Any], resources: frozenset[str], index: ClassIndex, *, temp_name: str) -> ExtendedClaim:
    """The special claim for ``resources`` (the ones DRA serves on the chosen node)."""
    requests, mappings = requests_and_mappings(pod, resources, index)
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": temp_name, "namespace": ob.namespace(pod), "uid": temp_name},
        "spec": {"devices": {"requests": requests}},
    }
    return ExtendedClaim(claim, tuple(mappings), resources)


def claim_to_create(pod: Mapping[str, Any], extended: ExtendedClaim) -> Obj:
    """The ResourceClaim to create for the pod: ``generateName: <pod>-extended-resources-``,
    the pod as controlling owner, upstream's annotation, the requests; with the
    delete-protection finalizer already set (upstream adds it in a second write)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{ob.name(pod)}-extended-resources-",
            "namespace": ob.namespace(pod),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": ob.name(pod), "uid": ob.uid(pod), "controller": True}],
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "finalizers": [ob.DELETE_PROTECTION_FINALIZER],
        },
        "spec": ob.deep_copy(dict(ob.spec(extended.claim))),
    }


def pod_status_patch(pod: Mapping[str, Any], claim_name: str, mappings: Sequence[RequestMapping]) -> Obj:
    """Strategic-merge patch recording the special claim in ``status.extendedResourceClaimStatus``
    (the UID makes the API server refuse it for a replaced pod)."""
    return {
        "metadata": {"uid": ob.uid(pod)},
        "status": {"extendedResourceClaimStatus": {"resourceClaimName": claim_name, "requestMappings": [m.to_api() for m in mappings]}},
    }


def without_finalizer(claim: Mapping[str, Any]) -> Obj:
    out = ob.deep_copy(dict(claim))
    out["metadata"]["finalizers"] = [f for f in ob.finalizers(claim) if f != ob.DELETE_PROTECTION_FINALIZER]
    return out


def node_groups(
    candidates: Sequence[str], nodes: Mapping[str, Mapping[str, Any]], requests: Mapping[str, Fraction]
) -> list[tuple[frozenset[str], tuple[str, ...]]]:
    """Candidates grouped by the resources DRA must serve on them, fewest first (a node that
    serves everything by device plugin needs no claim at all), then by the names."""
    groups: dict[frozenset[str], list[str]] = {}
    for name in candidates:
        groups.setdefault(dra_resources_on(requests, nodes.get(name) or {}), []).append(name)
    return [(k, tuple(v)) for k, v in sorted(groups.items(), key=lambda kv: (len(kv[0]), sorted(kv[0])))]
