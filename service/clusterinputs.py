"""What ``explain`` and ``compare`` need of a live cluster to answer for one pod or claim.

API:
- ``parse_target(text) -> Target | None``: ``pod/NAME`` or ``resourceclaim/NAME`` in kubectl's
  spellings (``pod``, ``pods``, ``po``; ``resourceclaim``, ``resourceclaims``); None for any
  other text (a file name).
- ``default_namespace(*, kubeconfig, in_cluster) -> str``: the namespace kubectl would use:
  the current context's (or the pod's, in a cluster), else ``default``.
- ``read_live(kube, target, *, namespace) -> Live``: one consistent read (lists, no watches) of
  the target, its claims (and the templates of claims not created yet), DeviceClasses,
  ResourceSlices, DeviceTaintRules, every ResourceClaim (the allocated ones hold devices) and
  Nodes. Raises ``kube.NotFound`` for a missing target, other ``kube.ApiError`` for failed
  reads.
- ``Live``: the claims to allocate, what was found out about the others (``notes``), why the
  pod cannot be tried yet (``wait``), the inventory as the service would hold it
  (``snapshot``: undecodable or invalid slices make their pools invalid, as in ``serve``), and
  the candidate nodes with why the others are not (``nodes``, ``service.nodefilter``);
  ``alike(nodes)`` groups nodes whose answer is the same, ``request_for(node, ...)`` is the
  core's request for one node, ``holders()`` who holds each device in use.
- ``pod_claims(pod, claims, templates) -> PodClaims``: the pure part for a pod: resolve its
  ``spec.resourceClaims`` as the scheduler does (a generated claim is found through
  ``status.resourceClaimStatuses``); a claim whose template has no ResourceClaim yet is made
  from the template, as the claim controller will make it.

Objects come from an API server, which validated them: they are decoded without strict field
checks (``--validate=ignore``), so a newer server's fields do not make them unreadable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dra_solver.model import (
    AllocationRequest,
    DeviceID,
    FeatureGates,
    InvalidInput,
    InvalidInputs,
    dns1123_subdomain_errors,
)
from dra_solver.model import objects as o
from dra_solver.service.inventory import (
    InventoryProblem,
    ObjectDecoder,
    Snapshot,
    problem_of,
    screen_objects,
)
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi import meta as km
from dra_solver.service.nodefilter import NodeFilter, candidate_nodes
from dra_solver.service.quoting import shown

TargetKind = Literal["pod", "resourceclaim"]

_KINDS: dict[str, TargetKind] = {
    "pod": "pod",
    "pods": "pod",
    "po": "pod",
    "resourceclaim": "resourceclaim",
    "resourceclaims": "resourceclaim",
}

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
RESOURCE = "resource.k8s.io/v1"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True, slots=True)
class Target:
    kind: TargetKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def parse_target(text: str) -> Target | None:
    kind, slash, name = text.partition("/")
    if not slash or kind.lower() not in _KINDS:
        return None
    problems = dns1123_subdomain_errors(name)
    if problems:
        raise InvalidInput("", (), f"Invalid value: {shown(text)}: {kind} name: {problems[0]}")
    return Target(_KINDS[kind.lower()], name)


def default_namespace(*, kubeconfig: str | None, in_cluster: bool) -> str:
    if in_cluster:
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    try:
        _, active = kube.k8s().config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:  # no kubeconfig, or unreadable: connecting will say what is wrong
        return "default"
    context = (active or {}).get("context") or {}
    return str(context.get("namespace") or "default")


@dataclass(frozen=True, slots=True)
class PodClaims:
    to_allocate: tuple[o.ResourceClaim, ...] = ()
    """Claims not allocated yet, in the pod's order (made from templates where not created)."""
    allocated: tuple[o.ResourceClaim, ...] = ()
    notes: tuple[str, ...] = ()
    """One line per claim that is not simply an existing unallocated claim."""
    wait: str = ""
    """Why the scheduler would not try the pod yet (a claim not found, being deleted); ""."""


@dataclass(frozen=True)
class Live:
    subject: str
    """``pod NS/NAME`` or ``resourceclaim NS/NAME``."""
    claims: PodClaims
    snapshot: Snapshot
    nodes: NodeFilter
    bound_to: str = ""
    """The node a pod is bound to already ("" when pending)."""
    raw_nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def alike(self, nodes: Sequence[str]) -> list[tuple[str, ...]]:
        """``nodes`` grouped by what allocating on them depends on: the same devices in the same
        state, by the node index's fingerprints (as Schedule shares one solve among such nodes);
        groups and their members in ``nodes``' order."""
        index = self.snapshot.index
        groups: dict[tuple[bytes, bytes], list[str]] = {}
        for name in nodes:
            view = index.view(name)
            groups.setdefault((view.shape if view else b"", index.inuse_key(name)), []).append(name)
        return [tuple(g) for g in groups.values()]

    def request_for(self, node: str, *, gates: FeatureGates, time_limit: float) -> AllocationRequest:
        """The claims to allocate on ``node``, with the inventory the core needs for it."""
        index = self.snapshot.index
        return AllocationRequest(
            claims=self.claims.to_allocate,
            node=index.nodes_by_name.get(node) or self.snapshot.inventory.node(node),
            inventory=index.node_inventory(node),
            gates=gates,
            time_limit=time_limit,
        )

    def holders(self) -> dict[DeviceID, str]:
        """Who holds each device in use, as the service words it."""
        return {dev: f"claim {ref}" for dev, ref in self.snapshot.index.holders().items()}


def _field(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}


def _claim(doc: Mapping[str, Any], source: str) -> o.ResourceClaim:
    obj = ObjectDecoder(validate="ignore").decode({"apiVersion": RESOURCE, "kind": "ResourceClaim", **doc}, source=source)
    assert isinstance(obj, o.ResourceClaim)
    return obj


def _from_template(pod: Mapping[str, Any], pod_claim: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """The claim the claim controller will make (its name gets a random suffix there)."""
    spec = _field(template, "spec")
    meta = _field(spec, "metadata")
    annotations = {**(meta.get("annotations") or {}), POD_CLAIM_ANNOTATION: pod_claim}
    return {
        "metadata": {
            "name": f"{km.name(pod)}-{pod_claim}",
            "namespace": km.namespace(pod),
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
        },
        "spec": dict(spec.get("spec") or {}),
    }


def pod_claims(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, Mapping[str, Any]],
) -> PodClaims:
    """``claims`` and ``templates`` by ``namespace/name``."""
    ns = km.namespace(pod)
    spec = _field(pod, "spec")
    status = _field(pod, "status")
    generated = {str(s.get("name")): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    to_allocate: list[o.ResourceClaim] = []
    allocated: list[o.ResourceClaim] = []
    notes: list[str] = []
    seen: set[str] = set()
    for entry in spec.get("resourceClaims") or []:
        pod_claim = str(entry.get("name") or "")
        if entry.get("resourceClaimName"):
            name = str(entry["resourceClaimName"])
        elif entry.get("resourceClaimTemplateName"):
            template_name = str(entry["resourceClaimTemplateName"])
            if pod_claim in generated:
                if not generated[pod_claim]:
                    continue  # the claim controller decided no claim is needed
                name = str(generated[pod_claim])
            else:
                template = templates.get(f"{ns}/{template_name}")
                if template is None:
                    return PodClaims(wait=f'resourceclaimtemplate "{template_name}" not found')
                made = _claim(_from_template(pod, pod_claim, template), f"resourceclaimtemplate {ns}/{template_name}")
                notes.append(f"claim {made.ref}: not created yet; as ResourceClaimTemplate {template_name} will make it")
                to_allocate.append(made)
                continue
        else:
            return PodClaims(wait=f"spec.resourceClaims[{pod_claim}]: none of the supported fields are set")
        key = f"{ns}/{name}"
        if key in seen:
            continue
        seen.add(key)
        doc = claims.get(key)
        if doc is None:
            return PodClaims(wait=f'resourceclaim "{name}" not found')
        if km.deleting(doc):
            return PodClaims(wait=f'resourceclaim "{name}" is being deleted')
        claim = _claim(doc, f"resourceclaim {key}")
        if claim.allocated:
            allocated.append(claim)
            notes.append(f"claim {key}: allocated already")
        else:
            to_allocate.append(claim)
    return PodClaims(tuple(to_allocate), tuple(allocated), tuple(notes))


def _items(kube_api: kube.Kube, what: str, fn: Any, kind: str, api_version: str, *, optional: bool = False) -> list[dict[str, Any]]:
    try:
        listed = kube_api.read(f"list {what}", fn)
    except kube.NotFound:
        if optional:
            return []  # an API version this server does not serve: none of them
        raise
    # Items of a list carry no kind or apiVersion: the list's type says them.
    return [{"kind": kind, "apiVersion": api_version, **item} for item in listed.get("items") or []]


def _snapshot(docs: list[dict[str, Any]]) -> Snapshot:
    """Decode and screen as ``serve --kubeconfig`` does: an undecodable slice makes its pool
    invalid instead of failing the read."""
    decoder = ObjectDecoder(validate="ignore")
    objects: list[o.TypedObject] = []
    problems: list[tuple[InventoryProblem, str]] = []
    for doc in docs:
        try:
            objects.append(decoder.decode(doc, source="kubernetes"))
        except (InvalidInput, InvalidInputs) as err:
            first = err.errors[0] if isinstance(err, InvalidInputs) else err
            spec = _field(doc, "spec")
            problems.append((problem_of(first, doc, source="kubernetes"), str(spec.get("nodeName") or "")))
    screened = screen_objects(objects, problems=problems)
    return Snapshot(screened.inventory, generation=1, source="kubernetes", screened=screened)


def read_live(kube_api: kube.Kube, target: Target, *, namespace: str) -> Live:
    r, core = kube_api.resource, kube_api.core
    if target.kind == "pod":
        pod = kube_api.get_pod(namespace, target.name)
    else:
        pod = {}
        claim = kube_api.get_claim(namespace, target.name)
    classes = _items(kube_api, "deviceclasses", r.list_device_class, "DeviceClass", RESOURCE)
    slices = _items(kube_api, "resourceslices", r.list_resource_slice, "ResourceSlice", RESOURCE)
    claims = _items(kube_api, "resourceclaims", r.list_resource_claim_for_all_namespaces, "ResourceClaim", RESOURCE)
    rules = _items(kube_api, "devicetaintrules", kube_api.rules.list_device_taint_rule, "DeviceTaintRule",
                   f"resource.k8s.io/{kube_api.taint_rule_version}", optional=True)
    nodes = _items(kube_api, "nodes", core.list_node, "Node", "v1")
    by_key = {km.key(c): c for c in claims}
    if target.kind == "pod":
        templates: dict[str, Mapping[str, Any]] = {}
        recorded = {s.get("name") for s in _field(pod, "status").get("resourceClaimStatuses") or []}
        for entry in _field(pod, "spec").get("resourceClaims") or []:
            name = entry.get("resourceClaimTemplateName")
            if name and entry.get("name") not in recorded:
                with contextlib.suppress(kube.NotFound):  # pod_claims says the pod waits for it
                    templates[f"{namespace}/{name}"] = kube_api.read(
                        f"get resourceclaimtemplate {namespace}/{name}", r.read_namespaced_resource_claim_template, name, namespace)
        found = pod_claims(pod, by_key, templates)
        subject = f"pod {namespace}/{target.name}"
    else:
        decoded = _claim(claim, f"resourceclaim {namespace}/{target.name}")
        found = PodClaims(allocated=(decoded,), notes=(f"claim {decoded.ref}: allocated already",)) if decoded.allocated \
            else PodClaims(to_allocate=(decoded,))
        subject = f"resourceclaim {namespace}/{target.name}"
    # The claims to allocate are the question, not the inventory: leave them out of it.
    asked = {c.ref for c in found.to_allocate}
    snapshot = _snapshot([*classes, *slices, *rules, *nodes, *(c for c in claims if km.key(c) not in asked)])
    bound = str(_field(pod, "spec").get("nodeName") or "")
    selectors = [c.status.allocation.node_selector.to_api() for c in found.allocated
                 if c.status and c.status.allocation and c.status.allocation.node_selector]
    if bound:
        on = [n for n in nodes if km.name(n) == bound]
        node_filter = NodeFilter((bound,) if on else (), {} if on else {bound: "node not found"})
    else:
        node_filter = candidate_nodes(pod if target.kind == "pod" else None, nodes, claim_selectors=selectors)
    return Live(subject, found, snapshot, node_filter, bound, {km.name(n): n for n in nodes})
