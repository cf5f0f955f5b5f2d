"""From Kubernetes objects to a gang placement request: PodGroup, its pods, claims, nodes.

API (objects are the API's JSON form; ResourceClaims and templates typed):
- ``gang_min_count(podgroup) -> int | None``: ``spec.schedulingPolicy.gang.minCount`` (None
  for a ``basic`` group); ``topology_key(podgroup)``; ``group_claims(podgroup)`` (the
  ``spec.resourceClaims`` entries); ``is_member(pod, podgroup)``; ``podgroup_ref(pod)``;
  ``podgroup_problems(podgroup) -> list[str]`` (what makes it unusable for gang placement).
- ``shared_entry(pod_claim, podgroup)``: the PodGroup entry a pod claim entry refers to (same
  name and same claim or template name, the way upstream links a pod to a group claim).
- ``resolve_group(podgroup, pods, *, claims, templates, generate) -> ResolvedGroup``: every
  member's own claims (still to allocate), the shared claims, and what is not there yet
  (``wait``). With ``generate`` (offline, files) a template's claim that does not exist is
  made here, named ``<pod|podgroup>-<claim>-<5 hex>`` deterministically; without it (the
  controllers) the claim controller makes it and the name is read from the status.
- ``group_request(resolved, *, index, nodes, bound, ...) -> GroupRequest``: candidate nodes
  per pod (``model.podfit``: selectors, affinity, taints, and the node selectors of claims a
  pod already has allocated), node rooms from allocatable minus bound pods, CPU and memory.

Why here: the offline CLI and the gang scheduler build the same request from the same
objects; only where generated claims come from differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.cluster import AllocatedState
from dra_solver.model.decode import PODGROUP_API_VERSION
from dra_solver.model.errors import format_field_path
from dra_solver.model.features import FeatureGates
from dra_solver.model.group_request import GroupPath, GroupPod, GroupRequest, NodeRoom
from dra_solver.model.node_index import NodeIndex
from dra_solver.model.podfit import candidate_nodes, node_room, pod_requests
from dra_solver.model.pools import NodeSelectorError, node_selector_matches
from dra_solver.model.validation import podgroup_spec_problems

Obj = Mapping[str, Any]

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
PODGROUP_CLAIM_ANNOTATION = "resource.kubernetes.io/podgroup-claim-name"


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def name_of(obj: Obj) -> str:
    return str(_meta(obj).get("name") or "")


def namespace_of(obj: Obj) -> str:
    return str(_meta(obj).get("namespace") or "")


def ref_of(obj: Obj) -> str:
    return f"{namespace_of(obj)}/{name_of(obj)}"


def gang_min_count(podgroup: Obj) -> int | None:
    gang = (_spec(podgroup).get("schedulingPolicy") or {}).get("gang")
    if not isinstance(gang, Mapping):
        return None
    value = gang.get("minCount")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def topology_key(podgroup: Obj) -> str:
    topology = (_spec(podgroup).get("schedulingConstraints") or {}).get("topology") or []
    return str(topology[0].get("key") or "") if topology else ""


def group_claims(podgroup: Obj) -> list[Obj]:
    return list(_spec(podgroup).get("resourceClaims") or [])


def podgroup_ref(pod: Obj) -> str:
    """``namespace/name`` of the PodGroup the pod belongs to ("" when none)."""
    group = (_spec(pod).get("schedulingGroup") or {}).get("podGroupName")
    return f"{namespace_of(pod)}/{group}" if group else ""


def is_member(pod: Obj, podgroup: Obj) -> bool:
    return podgroup_ref(pod) == ref_of(podgroup)


def podgroup_problems(podgroup: Obj) -> list[str]:
    """Why the PodGroup cannot be placed as a gang, one line each (empty: it can): the API
    server's checks of its spec (``model.validation.podgroup_spec_problems``, in its words),
    and a policy that is not gang. Never shows a Python value (``None``) for a missing one."""
    where = f"PodGroup {ref_of(podgroup)}"
    policy = _spec(podgroup).get("schedulingPolicy")
    out: list[str] = []
    if isinstance(policy, Mapping) and policy.get("basic") is not None and policy.get("gang") is None:
        out.append(f"{where}: spec.schedulingPolicy: the policy is not gang (only gang groups are placed whole)")
    out.extend(f"{where}: {format_field_path(path)}: {detail}" for path, detail in podgroup_spec_problems(podgroup))
    return out


def shared_entry(pod_claim: Obj, podgroup: Obj) -> Obj | None:
    for entry in group_claims(podgroup):
        if entry.get("name") != pod_claim.get("name"):
            continue
        if entry.get("resourceClaimName") and entry.get("resourceClaimName") == pod_claim.get("resourceClaimName"):
            return entry
        if entry.get("resourceClaimTemplateName") and entry.get("resourceClaimTemplateName") == pod_claim.get("resourceClaimTemplateName"):
            return entry
    return None


def generated_name(owner: str, claim: str, namespace: str) -> str:
    """``<owner>-<claim>-<5 hex>``, the hex derived from namespace, owner and claim."""
    digest = hashlib.sha256(f"{namespace}/{owner}/{claim}".encode()).hexdigest()[:5]
    base = f"{owner}-{claim}"[:57]
    return f"{base}-{digest}"


def _status_name(obj: Obj, entry: str) -> str | None:
    for status in (obj.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == entry:
            name = status.get("resourceClaimName")
            return str(name) if name else None
    return None


def claim_from_template(template: o.ResourceClaimTemplate, *, name: str, namespace: str, owner: Obj, owner_kind: str, entry: str) -> o.ResourceClaim:
    meta = template.spec.metadata or o.ObjectMeta()
    annotation = PODGROUP_CLAIM_ANNOTATION if owner_kind == "PodGroup" else POD_CLAIM_ANNOTATION
    annotations = {**(meta.annotations or {}), annotation: entry}
    api_version = PODGROUP_API_VERSION if owner_kind == "PodGroup" else "v1"
    return o.ResourceClaim(
        api_version="resource.k8s.io/v1",
        metadata=o.ObjectMeta(
            name=name,
            namespace=namespace,
            labels=dict(meta.labels) if meta.labels else None,
            annotations=annotations,
            owner_references=[
                o.OwnerReference(
                    api_version=api_version, kind=owner_kind, name=name_of(owner),
                    uid=str(_meta(owner).get("uid") or ""), controller=True, block_owner_deletion=True,
                )
            ],
        ),
        spec=template.spec.spec.model_copy(deep=True),
    )


@dataclass
class ResolvedPod:
    pod: Obj
    claims: list[o.ResourceClaim] = field(default_factory=list)
    """Its own claims still to allocate."""
    allocated: list[o.ResourceClaim] = field(default_factory=list)
    """Its own claims allocated already (their node selectors restrict its nodes)."""
    shared: list[str] = field(default_factory=list)


@dataclass
class ResolvedGroup:
    podgroup: Obj
    pods: list[ResolvedPod] = field(default_factory=list)
    shared: list[o.ResourceClaim] = field(default_factory=list)
    generated: list[o.ResourceClaim] = field(default_factory=list)
    """Claims made here from templates (``generate``)."""
    wait: list[str] = field(default_factory=list)
    """What is missing (claims not created yet, not found, templates not found)."""


def resolve_group(
    podgroup: Obj,
    pods: Sequence[Obj],
    *,
    claims: Mapping[str, o.ResourceClaim],
    templates: Mapping[str, o.ResourceClaimTemplate],
    generate: bool,
) -> ResolvedGroup:
    ns = namespace_of(podgroup)
    out = ResolvedGroup(podgroup)
    shared_by_entry: dict[str, o.ResourceClaim] = {}

    def lookup(owner: Obj, owner_kind: str, entry: Obj) -> o.ResourceClaim | None:
        entry_name = str(entry.get("name") or "")
        if entry.get("resourceClaimName"):
            found = claims.get(f"{ns}/{entry['resourceClaimName']}")
            if found is None:
                out.wait.append(f'resourceclaim "{entry["resourceClaimName"]}" not found')
            return found
        template_name = str(entry.get("resourceClaimTemplateName") or "")
        recorded = _status_name(owner, entry_name)
        if recorded:
            found = claims.get(f"{ns}/{recorded}")
            if found is not None:
                return found
        if not generate:
            out.wait.append(f'waiting for resourceclaim for {owner_kind.lower()} claim "{entry_name}" to be created')
            return None
        name = generated_name(name_of(owner), entry_name, ns)
        if f"{ns}/{name}" in claims:
            return claims[f"{ns}/{name}"]
        template = templates.get(f"{ns}/{template_name}")
        if template is None:
            out.wait.append(f"{owner_kind} {ns}/{name_of(owner)}, resourceClaim {entry_name}: ResourceClaimTemplate {ns}/{template_name} not found")
            return None
        made = claim_from_template(template, name=name, namespace=ns, owner=owner, owner_kind=owner_kind, entry=entry_name)
        out.generated.append(made)
        return made

    for entry in group_claims(podgroup):
        found = lookup(podgroup, "PodGroup", entry)
        if found is not None:
            shared_by_entry[str(entry.get("name") or "")] = found
            out.shared.append(found)
    for pod in sorted(pods, key=name_of):
        resolved = ResolvedPod(pod)
        for entry in _spec(pod).get("resourceClaims") or []:
            group_entry = shared_entry(entry, podgroup)
            if group_entry is not None:
                claim = shared_by_entry.get(str(group_entry.get("name") or ""))
                if claim is not None and claim.ref not in resolved.shared:
                    resolved.shared.append(claim.ref)
                continue
            found = lookup(pod, "Pod", entry)
            if found is None:
                continue
            (resolved.allocated if found.allocated else resolved.claims).append(found)
        out.pods.append(resolved)
    return out


def group_request(
    resolved: ResolvedGroup,
    *,
    index: NodeIndex,
    nodes: Iterable[o.Node],
    bound: Iterable[Obj] = (),
    in_flight: AllocatedState | None = None,
    gates: FeatureGates | None = None,
    policy: str = "",
    time_limit: float | None = 10.0,
    path: GroupPath = "auto",
    min_count: int | None = None,
) -> GroupRequest:
    node_list = list(nodes)
    by_node: dict[str, list[Obj]] = {}
    for pod in bound:
        node = _spec(pod).get("nodeName")
        if node:
            by_node.setdefault(str(node), []).append(pod)
    rooms: dict[str, NodeRoom] = {n.name: node_room(n, by_node.get(n.name, ())) for n in node_list}
    pods: list[GroupPod] = []
    for rp in resolved.pods:
        names, _ = candidate_nodes(rp.pod, node_list)
        allowed = set(names)
        for claim in rp.allocated:
            selector = claim.status.allocation.node_selector if claim.status and claim.status.allocation else None
            if selector is None:
                continue
            try:
                allowed = {n.name for n in node_list if n.name in allowed and node_selector_matches(selector, n)}
            except NodeSelectorError:
                allowed = set()
        need = pod_requests(rp.pod)
        pods.append(
            GroupPod(
                name=name_of(rp.pod),
                claims=tuple(rp.claims),
                shared=tuple(rp.shared),
                nodes=tuple(sorted(allowed)),
                cpu_millis=need.cpu_millis,
                memory_bytes=need.memory_bytes,
            )
        )
    count = min_count if min_count is not None else gang_min_count(resolved.podgroup) or 1
    return GroupRequest(
        name=ref_of(resolved.podgroup),
        pods=tuple(pods),
        index=index,
        shared_claims=tuple(resolved.shared),
        min_count=count,
        topology_key=topology_key(resolved.podgroup),
        rooms=rooms,
        in_flight=in_flight or AllocatedState(),
        gates=gates or FeatureGates(),
        policy=policy,
        time_limit=time_limit,
        path=path,
    )
