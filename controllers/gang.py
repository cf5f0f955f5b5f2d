"""Gang scheduling decisions for PodGroups (scheduling.k8s.io/v1beta1), as pure functions.

API:
- :func:`group_key` / :func:`parse_group_key`: the scheduler's work-queue key of a PodGroup,
  ``podgroup:namespace/name`` (pod keys never contain a colon).
- :func:`pod_group_name`: ``spec.schedulingGroup.podGroupName`` of a pod ("" = none).
- :func:`min_count`: the gang quorum, or None for a ``basic`` policy (pods go one at a time).
- :func:`gate`: whether the group may be tried now (the PodGroup exists, at least ``minCount``
  member pods exist and are not gated, all of them ours) and which members to place.
- :func:`shared_claims`: the PodGroup's own claims (``spec.resourceClaims``) by pod claim
  entry, so a pod's entry that names the same claim is the group's, not the pod's.
- :func:`podgroup_reference`: the ``reservedFor`` entry naming a PodGroup (kube-scheduler
  v1.37 reserves a group claim for the PodGroup, not for each pod).
- :func:`condition_patch`: the merge patch of ``podgroups/status`` that sets
  ``PodGroupInitiallyScheduled`` (None when it already says that).
- :func:`rooms`: the CPU, memory and pod count each node has left for the group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling as logic
from dra_solver.controllers.objects import Obj

KEY_PREFIX = "podgroup:"
API_GROUP = ob.PODGROUP_API_GROUP
API_VERSION = f"{API_GROUP}/v1beta1"
CONDITION = "PodGroupInitiallyScheduled"
"""The PodGroup condition kube-scheduler v1.37 sets: True/Scheduled once the gang is placed
(terminal), False/Unschedulable or False/SchedulerError otherwise."""
SCHEDULED = "Scheduled"
UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"


def group_key(namespace: str, name: str) -> str:
    return f"{KEY_PREFIX}{namespace}/{name}"


def parse_group_key(key: str) -> tuple[str, str] | None:
    """(namespace, name) of a PodGroup key; None for a pod key."""
    if not key.startswith(KEY_PREFIX):
        return None
    ns, _, name = key[len(KEY_PREFIX):].partition("/")
    return ns, name


def pod_group_name(pod: Mapping[str, Any]) -> str:
    group = ob.spec(pod).get("schedulingGroup")
    return str(group.get("podGroupName") or "") if isinstance(group, Mapping) else ""


def pod_group_key(pod: Mapping[str, Any]) -> str:
    """The PodGroup key of a member pod ("" when it names no group)."""
    name = pod_group_name(pod)
    return group_key(ob.namespace(pod), name) if name else ""


def min_count(pod_group: Mapping[str, Any]) -> int | None:
    policy = ob.spec(pod_group).get("schedulingPolicy") or {}
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    if not isinstance(gang, Mapping):
        return None
    return int(gang.get("minCount") or 0)


def topology_key(pod_group: Mapping[str, Any]) -> str:
    constraints = ob.spec(pod_group).get("schedulingConstraints") or {}
    topology = constraints.get("topology") or [] if isinstance(constraints, Mapping) else []
    return str(topology[0].get("key") or "") if topology else ""


def podgroup_reference(pod_group: Mapping[str, Any]) -> Obj:
    return {"apiGroup": API_GROUP, "resource": "podgroups", "name": ob.name(pod_group), "uid": ob.uid(pod_group)}


# --- members ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gate:
    ready: bool
    pending: tuple[Obj, ...] = ()
    """Members to place now (ours, unbound, not gated), in name order."""
    bound: tuple[Obj, ...] = ()
    """Members already on a node (an earlier attempt bound them; they count toward the quorum)."""
    wait: str = ""
    """Why the group cannot be tried yet (ready is False)."""
    error: str = ""
    """Invalid input (a SchedulerError condition): the group cannot be placed as it is."""
    quorum: int = 0
    """How many of ``pending`` must be placed together (minCount less the bound members)."""


def members(pods: Iterable[Mapping[str, Any]], namespace: str, name: str) -> list[Obj]:
    """The group's live pods (not being deleted, not finished), in name order."""
    out = [
        dict(p) for p in pods
        if ob.namespace(p) == namespace and pod_group_name(p) == name and not ob.deleting(p) and not ob.pod_terminal(p)
    ]
    return sorted(out, key=ob.name)


def gate(pod_group: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], *, scheduler_name: str, name: str = "") -> Gate:
    """Upstream's PreEnqueue for a gang: the PodGroup must exist and ``minCount`` member pods
    must exist without scheduling gates; pods beyond the quorum are placed too, as many as fit."""
    if pod_group is None:
        return Gate(False, wait=f'waiting for PodGroup "{name}" to be created')
    if ob.deleting(pod_group):
        return Gate(False, wait=f"PodGroup {ob.key(pod_group)} is being deleted")
    need = min_count(pod_group)
    if need is None:
        return Gate(False, wait=f"PodGroup {ob.key(pod_group)} has a basic policy: its pods are scheduled one at a time")
    ungated = [p for p in pods if not ob.spec(p).get("schedulingGates")]
    names = sorted({str(ob.spec(p).get("schedulerName") or "default-scheduler") for p in ungated})
    if len(names) > 1:
        return Gate(False, error=f"pods of PodGroup {ob.key(pod_group)} name different schedulers: {', '.join(names)}")
    if names and names[0] != scheduler_name:
        return Gate(False, wait=f"PodGroup {ob.key(pod_group)} belongs to scheduler {names[0]}")
    if len(ungated) < need:
        return Gate(False, wait=f"waiting for minCount pods of PodGroup {ob.key(pod_group)}: {len(ungated)} of {need} exist")
    bound = tuple(dict(p) for p in ungated if ob.pod_node(p))
    pending = tuple(dict(p) for p in ungated if not ob.pod_node(p))
    if not pending:
        return Gate(False, bound=bound, wait="every member is bound", quorum=0)
    return Gate(True, pending, bound, quorum=max(1, need - len(bound)))


# --- claims -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SharedClaims:
    by_entry: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(entry name, claim name) of a PodGroup ``resourceClaims`` entry -> claim key."""
    keys: tuple[str, ...] = ()
    """Claim keys, in the PodGroup's entry order."""
    wait: str = ""
    error: str = ""


def shared_claims(pod_group: Mapping[str, Any]) -> SharedClaims:
    """The PodGroup's claims: an entry naming a claim directly, or one made from a template
    and recorded in ``status.resourceClaimStatuses`` (until then the group waits)."""
    ns = ob.namespace(pod_group)
    made = {str(s.get("name")): str(s.get("resourceClaimName") or "")
            for s in ob.status(pod_group).get("resourceClaimStatuses") or [] if isinstance(s, Mapping)}
    by_entry: dict[tuple[str, str], str] = {}
    keys: list[str] = []
    for i, entry in enumerate(ob.spec(pod_group).get("resourceClaims") or []):
        entry_name = str(entry.get("name") or "")
        claim = str(entry.get("resourceClaimName") or "")
        if not claim:
            template = str(entry.get("resourceClaimTemplateName") or "")
            claim = made.get(entry_name, "")
            if not claim:
                return SharedClaims(wait=f'waiting for the claim of PodGroup {ob.key(pod_group)} spec.resourceClaims[{i}] '
                                         f'(template "{template}") to be created')
            by_entry[(entry_name, template)] = f"{ns}/{claim}"
        else:
            by_entry[(entry_name, claim)] = f"{ns}/{claim}"
        k = f"{ns}/{claim}"
        if k not in keys:
            keys.append(k)
    return SharedClaims(by_entry, tuple(keys))


def pod_shared_entries(pod: Mapping[str, Any], shared: SharedClaims) -> dict[str, str]:
    """The pod's ``spec.resourceClaims`` entries that are the group's: entry name -> claim key.
    An entry matches when its name and its claim (or template) name equal a PodGroup entry's."""
    out: dict[str, str] = {}
    for entry in ob.pod_claims(pod):
        name = str(entry.get("name") or "")
        ref = str(entry.get("resourceClaimName") or entry.get("resourceClaimTemplateName") or "")
        k = shared.by_entry.get((name, ref))
        if k is not None:
            out[name] = k
    return out


def without_entries(pod: Mapping[str, Any], names: Iterable[str]) -> Obj:
    """The pod with some ``spec.resourceClaims`` entries dropped (to gather its own claims)."""
    drop = set(names)
    copy = ob.deep_copy(dict(pod))
    spec = copy.setdefault("spec", {})
    spec["resourceClaims"] = [e for e in spec.get("resourceClaims") or [] if e.get("name") not in drop]
    return copy


# --- nodes ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Room:
    node: str
    cpu_millis: int | None
    memory_bytes: int | None
    pods: int | None


def rooms(nodes: Iterable[Mapping[str, Any]], used: Mapping[str, logic.Resources]) -> list[Room]:
    """What each node has left (allocatable less what bound and assumed pods take)."""
    out = []
    for node in sorted(nodes, key=ob.name):
        alloc = logic.node_allocatable(node)
        taken = used.get(ob.name(node), logic.Resources())
        cpu = None if alloc.cpu is None else max(0, int((alloc.cpu - (taken.cpu or Fraction(0))) * 1000))
        memory = None if alloc.memory is None else max(0, int(alloc.memory - (taken.memory or Fraction(0))))
        pods = None if alloc.pods is None else max(0, alloc.pods - (taken.pods or 0))
        out.append(Room(ob.name(node), cpu, memory, pods))
    return out


def cpu_millis(requests: logic.Resources) -> int:
    return int(-((-(requests.cpu or Fraction(0)) * 1000) // 1))


def memory_bytes(requests: logic.Resources) -> int:
    return int(-((-(requests.memory or Fraction(0))) // 1))


def domain_nodes(nodes: Iterable[Mapping[str, Any]], key: str, bound: Sequence[Mapping[str, Any]]) -> set[str] | None:
    """The nodes the rest of a partly bound gang may use: those in its bound members' domain
    (None when nothing restricts them)."""
    if not key or not bound:
        return None
    by_name = {ob.name(n): n for n in nodes}
    values = {str(ob.meta(by_name[ob.pod_node(p)]).get("labels", {}).get(key, "")) for p in bound if ob.pod_node(p) in by_name}
    return {name for name, n in by_name.items() if str((ob.meta(n).get("labels") or {}).get(key, "")) in values and values != {""}}


# --- status -------------------------------------------------------------------------------------


def condition(pod_group: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in ob.status(pod_group).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == CONDITION:
            return c
    return None


def scheduled(pod_group: Mapping[str, Any]) -> bool:
    c = condition(pod_group)
    return c is not None and c.get("status") == "True"


def condition_patch(pod_group: Mapping[str, Any], *, reason: str, message: str, now: float) -> Obj | None:
    """Merge patch of ``podgroups/status`` setting ``PodGroupInitiallyScheduled`` (True for
    ``Scheduled``, else False with ``message``); None when it already says that. The whole
    conditions list is sent (a merge patch replaces lists), other conditions kept; no
    resourceVersion precondition: the scheduler is the only writer of this condition."""
    status = "True" if reason == SCHEDULED else "False"
    generation = ob.meta(pod_group).get("generation")
    current = condition(pod_group)
    if current is not None and current.get("status") == "True":
        return None  # terminal once True, as upstream treats it
    if (current is not None and current.get("status") == status and current.get("reason") == reason
            and current.get("message") == message and current.get("observedGeneration") == generation):
        return None
    new = {"type": CONDITION, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": current.get("lastTransitionTime") if current is not None and current.get("status") == status else ob.format_time(now)}
    if generation is not None:
        new["observedGeneration"] = generation
    others = [dict(c) for c in ob.status(pod_group).get("conditions") or [] if isinstance(c, Mapping) and c.get("type") != CONDITION]
    return {"status": {"conditions": [*others, new]}}
