"""What the ResourceClaim controller should change, decided purely from objects.

Upstream's controller (kube-controller-manager, ``pkg/controller/resourceclaim``) does three
jobs, and so does ours, each as a function from the objects it needs to the changes it wants:

- :func:`sync_pod`: create a ResourceClaim for every template claim of a pod (generateName
  ``<pod>-<claim>-``, the pod as controlling owner, the pod-claim annotation, the template's
  labels and annotations), reuse a claim created earlier whose name never reached the pod
  status, record names in ``pod.status.resourceClaimStatuses``, and reserve allocated claims
  for pods that are already on a node (placed by someone who did not reserve them);
- :func:`sync_claim`: drop ``reservedFor`` entries of pods that are gone, replaced or done,
  and of PodGroups (scheduling.k8s.io) that are gone or replaced; when the last one goes, clear the allocation and remove the delete-protection finalizer;
  delete a generated claim whose pod will not run;
- :func:`pod_needs_work` / :func:`pod_releases_claims`: which events are worth a sync.

Nothing here calls the API: the shell (``controllers.claim_controller``) applies the plans.
Functions never mutate their arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence, Set
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers.objects import Obj

GENERATE_NAME_MAX = 57
"""A generated name is at most 63 characters; the API server appends 5 random ones (+ no dash)."""


# --- plans ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateClaim:
    """Create ``body`` for the pod claim ``pod_claim`` and record its name in the pod status."""

    pod_claim: str
    body: Obj
    admin_access: bool


@dataclass(frozen=True, slots=True)
class ReserveClaim:
    """Write ``status`` (reservedFor plus the pod) to ``claim``, preconditioned on its version."""

    claim: Obj
    status: Obj


@dataclass(frozen=True, slots=True)
class PodPlan:
    creates: tuple[CreateClaim, ...] = ()
    record: Mapping[str, str] = field(default_factory=dict)
    """Pod claim -> existing ResourceClaim to record in the pod status (found, not created)."""
    reserve: tuple[ReserveClaim, ...] = ()
    errors: tuple[str, ...] = ()
    """Problems that need a retry with backoff (missing template, ...)."""
    unallocated: tuple[str, ...] = ()
    """For a pod placed on a node without the scheduler: why it cannot start (claims nobody
    allocated); reported as Events, not retried: the claim's own change brings the pod back."""

    @property
    def empty(self) -> bool:
        return not (self.creates or self.record or self.reserve or self.errors or self.unallocated)


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    status: Obj | None = None
    """New status to write with an update (resourceVersion precondition), or None."""
    remove_finalizer: bool = False
    """After the status write: remove the delete-protection finalizer (metadata update)."""
    delete: bool = False
    """Delete the claim (UID precondition): generated for a pod that will not run."""
    notes: tuple[str, ...] = ()
    """Why, for logs."""

    @property
    def empty(self) -> bool:
        return self.status is None and not self.remove_finalizer and not self.delete


# --- pods --------------------------------------------------------------------------------------


def generate_name(pod_name: str, pod_claim: str) -> str:
    """``<pod>-<claim>-``, both parts shortened in proportion when the whole is too long.

    Shortening only at the end (what the API server would do) could cut away the claim's name
    entirely for a long pod name; shortening both keeps each recognisable.
    """
    base = f"{pod_name}-{pod_claim}-"
    if len(base) <= GENERATE_NAME_MAX:
        return base
    budget = GENERATE_NAME_MAX - 2
    pod_len = len(pod_name) * budget // (len(pod_name) + len(pod_claim))
    return f"{pod_name[:pod_len]}-{pod_claim[: budget - pod_len]}-"


def _from_template(
    owner: str, entry: str, template: Mapping[str, Any] | None, template_ref: str, make: Callable[[Mapping[str, Any]], Obj], *,
    admin_access_enabled: bool, errors: list[str],
) -> CreateClaim | None:
    """The claim ``make`` builds from ``template`` for ``owner``'s resourceClaims entry ``entry``,
    or None with the reason in ``errors`` (the template is missing, or asks for admin access
    while the feature is off)."""
    if template is None:
        errors.append(f"{owner}, resourceClaim {entry}: ResourceClaimTemplate {template_ref} not found")
        return None
    admin = needs_admin_access(template)
    if admin and not admin_access_enabled:
        errors.append(f"{owner}, resourceClaim {entry}: admin access is requested, but the feature is disabled")
        return None
    return CreateClaim(entry, make(template), admin)


def needs_admin_access(template: Mapping[str, Any]) -> bool:
    claim_spec = ob.spec(template).get("spec") or {}
    for request in (claim_spec.get("devices") or {}).get("requests") or []:
        if (request.get("exactly") or {}).get("adminAccess"):
            return True
    return False


def claim_from_template(pod: Mapping[str, Any], pod_claim: str, template: Mapping[str, Any]) -> Obj:
    """The ResourceClaim upstream creates for one template claim of ``pod``, born with the
    delete-protection finalizer.

    Upstream's controller leaves the finalizer to the scheduler, which adds it (one more claim
    update) just before it writes the allocation. Carrying it from creation spares that write
    for every pod; :func:`sync_claim` removes it when such a claim is deleted unallocated.
    """
    template_meta = ob.spec(template).get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[ob.POD_CLAIM_ANNOTATION] = pod_claim
    metadata: Obj = {
        "generateName": generate_name(ob.name(pod), pod_claim),
        "namespace": ob.namespace(pod),
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": ob.name(pod),
                "uid": ob.uid(pod),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "annotations": annotations,
        "finalizers": [ob.DELETE_PROTECTION_FINALIZER],
    }
    if template_meta.get("labels"):
        metadata["labels"] = dict(template_meta["labels"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": ob.deep_copy(dict(ob.spec(template).get("spec") or {})),
    }


def find_generated(pod: Mapping[str, Any], pod_claim: str, owned: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """A claim created earlier for this pod claim (created, but the pod status write failed).

    Only claims controlled by the pod and annotated with the pod claim's name count; with
    several (should not happen) the first by name wins and the others go with the pod.
    """
    for claim in sorted(owned, key=ob.name):
        if ob.owning_pod(claim)[1] != ob.uid(pod):
            continue
        if ob.annotations_of(claim).get(ob.POD_CLAIM_ANNOTATION) == pod_claim:
            return claim
    return None


def sync_pod(
    pod: Mapping[str, Any],
    *,
    claims: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, Mapping[str, Any]],
    owned: Sequence[Mapping[str, Any]] = (),
    admin_access_enabled: bool = True,
    group: Mapping[str, str] | None = None,
) -> PodPlan:
    """Claims to create, names to record and reservations to add for one pod.

    ``claims`` and ``templates`` are keyed ``namespace/name``; ``owned`` are the claims whose
    controlling owner is the pod (for finding a claim created before a failed status write).
    ``group``: the pod's template claims that are its PodGroup's (:func:`group_entries`), pod
    claim -> the PodGroup's claim name ("" while not made yet): recorded, never created.
    """
    if ob.deleting(pod) or ob.pod_done(pod):
        # A pod that will never run needs no claims; creating one would only have it deleted
        # again by sync_claim (claims of finished pods go), over and over.
        return PodPlan()
    ns = ob.namespace(pod)
    creates: list[CreateClaim] = []
    record: dict[str, str] = {}
    errors: list[str] = []
    for pod_claim in ob.pod_claims(pod):
        pc_name = str(pod_claim.get("name") or "")
        if group is not None and pc_name in group:
            made = group[pc_name]
            recorded = {str(s.get("name")): s.get("resourceClaimName") for s in ob.status(pod).get("resourceClaimStatuses") or []}
            if made and recorded.get(pc_name) != made:
                record[pc_name] = made
            continue
        try:
            resolved = ob.claim_name(pod, pod_claim)
        except ob.ClaimNotCreated:
            pass
        except ob.ClaimNameError as err:
            errors.append(str(err))
            continue
        else:
            if resolved.name is None:
                continue  # the pod status says this claim is not needed
            existing = claims.get(f"{ns}/{resolved.name}")
            if existing is not None and (not resolved.check_owner or ob.is_for_pod(pod, existing) is None):
                continue
            # Recorded but gone (deleted by accident) or not ours: make a new one below.
        template_name = pod_claim.get("resourceClaimTemplateName")
        if not template_name:
            continue
        found = find_generated(pod, pc_name, owned)
        if found is not None:
            record[pc_name] = ob.name(found)
            continue
        create = _from_template(f"pod {ob.key(pod)}", pc_name, templates.get(f"{ns}/{template_name}"), f"{ns}/{template_name}",
                                partial(claim_from_template, pod, pc_name), admin_access_enabled=admin_access_enabled, errors=errors)
        if create is not None:
            creates.append(create)
    reserve, unallocated = _reservations(pod, claims) if ob.pod_node(pod) else ((), ())
    return PodPlan(tuple(creates), record, reserve, tuple(errors), unallocated)


# --- PodGroups ------------------------------------------------------------------------------------

PODGROUP_CLAIM_ANNOTATION = "resource.kubernetes.io/podgroup-claim-name"
"""On a claim made from a PodGroup's template entry: the entry's name."""


@dataclass(frozen=True, slots=True)
class GroupPlan:
    creates: tuple[CreateClaim, ...] = ()
    record: Mapping[str, str] = field(default_factory=dict)
    """PodGroup claim entry -> ResourceClaim name for ``status.resourceClaimStatuses``."""
    errors: tuple[str, ...] = ()


def owning_group_uid(claim: Mapping[str, Any]) -> str:
    ref = ob.controller_ref(claim)
    if ref is not None and ref.get("kind") == "PodGroup" and str(ref.get("apiVersion") or "").startswith("scheduling.k8s.io/"):
        return str(ref.get("uid") or "")
    return ""


def claim_from_group_template(pod_group: Mapping[str, Any], entry: str, template: Mapping[str, Any]) -> Obj:
    """The ResourceClaim made for a PodGroup's template entry: ``<podgroup>-<entry>-``, owned
    by the PodGroup (so it goes with it), annotated with the entry's name."""
    body = claim_from_template(pod_group, entry, template)
    meta = body["metadata"]
    meta["ownerReferences"] = [{"apiVersion": str(pod_group.get("apiVersion") or "scheduling.k8s.io/v1beta1"), "kind": "PodGroup",
                                "name": ob.name(pod_group), "uid": ob.uid(pod_group), "controller": True, "blockOwnerDeletion": True}]
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(ob.POD_CLAIM_ANNOTATION, None)
    annotations[PODGROUP_CLAIM_ANNOTATION] = entry
    meta["annotations"] = annotations
    return body


def sync_pod_group(
    pod_group: Mapping[str, Any],
    *,
    claims: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, Mapping[str, Any]],
    owned: Sequence[Mapping[str, Any]] = (),
    admin_access_enabled: bool = True,
) -> GroupPlan:
    """Claims to make for a PodGroup's ``resourceClaimTemplateName`` entries (one each, for the
    whole group) and names to record in its status; ``owned``: claims it controls."""
    if ob.deleting(pod_group):
        return GroupPlan()
    ns = ob.namespace(pod_group)
    recorded = {str(s.get("name")): str(s.get("resourceClaimName") or "") for s in ob.status(pod_group).get("resourceClaimStatuses") or []}
    creates: list[CreateClaim] = []
    record: dict[str, str] = {}
    errors: list[str] = []
    for entry in ob.spec(pod_group).get("resourceClaims") or []:
        name, template_name = str(entry.get("name") or ""), str(entry.get("resourceClaimTemplateName") or "")
        if not template_name:
            continue
        current = claims.get(f"{ns}/{recorded.get(name, '')}")
        if current is not None and owning_group_uid(current) == ob.uid(pod_group):
            continue
        found = next((c for c in sorted(owned, key=ob.name) if owning_group_uid(c) == ob.uid(pod_group)
                      and ob.annotations_of(c).get(PODGROUP_CLAIM_ANNOTATION) == name), None)
        if found is not None:
            record[name] = ob.name(found)
            continue
        create = _from_template(f"PodGroup {ob.key(pod_group)}", name, templates.get(f"{ns}/{template_name}"), f"{ns}/{template_name}",
                                partial(claim_from_group_template, pod_group, name), admin_access_enabled=admin_access_enabled,
                                errors=errors)
        if create is not None:
            creates.append(create)
    return GroupPlan(tuple(creates), record, tuple(errors))


def group_status_patch(pod_group: Mapping[str, Any], names: Mapping[str, str]) -> Obj:
    """Merge patch of ``podgroups/status`` with the whole ``resourceClaimStatuses`` list (a merge
    patch replaces lists): the recorded entries, updated by ``names``."""
    entries = {str(s.get("name")): dict(s) for s in ob.status(pod_group).get("resourceClaimStatuses") or []}
    for entry, claim in names.items():
        entries[entry] = {"name": entry, "resourceClaimName": claim}
    return {"status": {"resourceClaimStatuses": [entries[k] for k in sorted(entries)]}}


def group_entries(pod: Mapping[str, Any], pod_group: Mapping[str, Any] | None) -> dict[str, str]:
    """The pod's template claims that are its PodGroup's (same entry name and template name as a
    PodGroup entry), pod claim -> the PodGroup's claim name from its status ("" until made)."""
    if pod_group is None:
        return {}
    recorded = {str(s.get("name")): str(s.get("resourceClaimName") or "") for s in ob.status(pod_group).get("resourceClaimStatuses") or []}
    entries = {(str(e.get("name") or ""), str(e.get("resourceClaimTemplateName") or "")) for e in ob.spec(pod_group).get("resourceClaims") or []
               if e.get("resourceClaimTemplateName")}
    out: dict[str, str] = {}
    for pod_claim in ob.pod_claims(pod):
        key = (str(pod_claim.get("name") or ""), str(pod_claim.get("resourceClaimTemplateName") or ""))
        if key in entries:
            out[key[0]] = recorded.get(key[0], "")
    return out


def unallocated_message(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> str:
    return (
        f"pod is on node {ob.pod_node(pod)} without having been scheduled, but ResourceClaim {ob.key(claim)} "
        "is not allocated: only a claim the scheduler allocated (for another pod) can be reserved for it, "
        "so the pod cannot start until that happens"
    )


def _reservations(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> tuple[tuple[ReserveClaim, ...], tuple[str, ...]]:
    # A pod on a node uses its allocated claims; someone who placed it without reserving them
    # (another scheduler, spec.nodeName set by hand) leaves that to us. Nothing allocates a
    # claim for such a pod (kube-controller-manager does not either): say so instead.
    out: list[ReserveClaim] = []
    unallocated: list[str] = []
    ns = ob.namespace(pod)
    for pod_claim in ob.pod_claims(pod):
        try:
            resolved = ob.claim_name(pod, pod_claim)
        except ob.ClaimNameError:
            continue
        if resolved.name is None:
            continue
        claim = claims.get(f"{ns}/{resolved.name}")
        if claim is None or ob.is_reserved_for_pod(pod, claim):
            continue
        if resolved.check_owner and ob.is_for_pod(pod, claim) is not None:
            continue
        if ob.allocation(claim) is None:
            unallocated.append(unallocated_message(pod, claim))
            continue
        status = ob.deep_copy(dict(ob.status(claim)))
        status["reservedFor"] = [*ob.reserved_for(claim), ob.pod_reference(pod)]
        out.append(ReserveClaim(dict(claim), status))
    return tuple(out), tuple(unallocated)


def pod_status_patch(pod: Mapping[str, Any], names: Mapping[str, str]) -> Obj:
    """Strategic-merge patch recording ``pod claim -> ResourceClaim name`` in the pod status.

    ``resourceClaimStatuses`` merges by ``name``, so only the entries given change; the UID in
    the patch makes the API server refuse it if the pod was replaced under the same name.
    """
    entries = [{"name": pc, "resourceClaimName": names[pc]} for pc in sorted(names)]
    return {"metadata": {"uid": ob.uid(pod)}, "status": {"resourceClaimStatuses": entries}}


def pod_needs_work(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> tuple[bool, str]:
    """Whether a new or changed pod needs :func:`sync_pod` (upstream ``podNeedsWork``)."""
    if ob.deleting(pod):
        return False, "pod is deleted"
    if ob.pod_terminal(pod):
        return False, "pod is done"
    ns = ob.namespace(pod)
    for pod_claim in ob.pod_claims(pod):
        try:
            resolved = ob.claim_name(pod, pod_claim)
        except ob.ClaimNameError as err:
            return True, str(err)
        if resolved.name is None:
            continue
        claim = claims.get(f"{ns}/{resolved.name}")
        if claim is None:
            if pod_claim.get("resourceClaimTemplateName"):
                return True, "must create ResourceClaim from template"
            continue  # the user must create it
        if owning_group_uid(claim):
            continue  # the PodGroup's claim: reserved for the group by the scheduler
        if resolved.check_owner and (why := ob.is_for_pod(pod, claim)) is not None:
            return False, why
        if ob.pod_node(pod) and ob.allocation(claim) is not None and not ob.is_reserved_for_pod(pod, claim):
            return True, f"need to reserve claim {ob.key(claim)} for pod"
        if ob.pod_node(pod) and ob.allocation(claim) is None and not ob.pod_terminal(pod):
            return True, f"claim {ob.key(claim)} of a pod on a node is not allocated: report it"
    return False, "nothing to do"


def pod_releases_claims(pod: Mapping[str, Any], *, deleted: bool) -> bool:
    """Whether the pod's claims should be checked for stale reservations (upstream
    ``podNeedsClaims`` negated): the pod is gone, finished, or deleted before scheduling."""
    return deleted or ob.pod_terminal(pod) or (ob.deleting(pod) and not ob.pod_node(pod))


def claim_names_of_pod(pod: Mapping[str, Any]) -> list[str]:
    """``namespace/name`` of every ResourceClaim the pod references (known names only), the
    scheduler-made extended-resource claim included."""
    return [f"{ob.namespace(pod)}/{ref.name}" for ref in ob.claim_refs(pod)]


# --- claims ------------------------------------------------------------------------------------


def pods_to_look_up(claim: Mapping[str, Any], *, cached: Container[str], deleted: Set[str]) -> list[str]:
    """Names of pods in ``reservedFor`` that must be checked with the API server first.

    A pod missing from the cache might simply not have reached it yet; dropping its
    reservation while the scheduler is binding it would be wrong, so it is looked up
    (unless its UID is known to be deleted). ``cached`` is keyed by pod name.
    """
    return _to_look_up(claim, "", "pods", cached=cached, deleted=deleted)


def groups_to_look_up(claim: Mapping[str, Any], *, cached: Container[str], deleted: Set[str]) -> list[str]:
    """Names of PodGroups in ``reservedFor`` that must be checked with the API server first,
    for the same reason as pods: dropping the reservation of a group whose pods are being
    scheduled would free devices they are about to use."""
    return _to_look_up(claim, ob.PODGROUP_API_GROUP, "podgroups", cached=cached, deleted=deleted)


def _to_look_up(claim: Mapping[str, Any], api_group: str, resource: str, *, cached: Container[str],
                deleted: Set[str]) -> list[str]:
    out: list[str] = []
    for ref in ob.reserved_for(claim):
        if (ref.get("apiGroup") or "") != api_group or ref.get("resource") != resource:
            continue
        n = str(ref.get("name") or "")
        if ref.get("uid") in deleted or n in cached:
            continue
        out.append(n)
    return sorted(set(out))


def sync_claim(
    claim: Mapping[str, Any],
    *,
    pods: Mapping[str, Mapping[str, Any] | None],
    deleted: Set[str] = frozenset(),
    groups: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> ClaimPlan:
    """Reservation cleanup, deallocation and deletion for one claim.

    ``pods`` maps pod names (the claim's namespace) to the pod, or to None when the API server
    confirmed it does not exist; a name absent from ``pods`` is unknown and its reservation is
    kept. ``groups`` does the same for PodGroups (None: PodGroups are not served, and their
    entries are kept). ``deleted`` holds UIDs of pods and PodGroups seen deleted.
    """
    notes: list[str] = []
    valid: list[Mapping[str, Any]] = []
    entries = ob.reserved_for(claim)
    for ref in entries:
        if groups is not None and ob.is_podgroup_ref(ref):
            # A PodGroup holds its shared claims for all its pods (upstream's controller drops
            # the entry only once the group is gone or replaced, never while it exists).
            reason = _group_gone(ref, groups, deleted)
            if reason:
                notes.append(reason)
            else:
                valid.append(ref)
            continue
        if ref.get("apiGroup") or ref.get("resource") != "pods":
            # Only pods and PodGroups are known consumers; anything else is left alone.
            notes.append(f"kept unsupported reservedFor entry {ref.get('apiGroup')}/{ref.get('resource')} {ref.get('name')}")
            valid.append(ref)
            continue
        n = str(ref.get("name") or "")
        ref_uid = str(ref.get("uid") or "")
        if ref_uid in deleted:
            notes.append(f"pod {n} was deleted")
            continue
        if n not in pods:
            valid.append(ref)
            continue
        pod = pods[n]
        if pod is None:
            notes.append(f"pod {n} is gone")
        elif ob.uid(pod) != ref_uid:
            notes.append(f"pod {n} was replaced by a new instance")
        elif ob.pod_done(pod):
            notes.append(f"pod {n} will not run anymore")
        else:
            valid.append(ref)
    has_finalizer = ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(claim)
    new_status: Obj | None = None
    remove_finalizer = False
    if len(valid) < len(entries):
        new_status = ob.deep_copy(dict(ob.status(claim)))
        if valid:
            new_status["reservedFor"] = [dict(r) for r in valid]
        else:
            new_status.pop("reservedFor", None)
            # The last consumer stopped: free the devices for someone else (only allocations
            # made with the finalizer are ours to clear).
            if has_finalizer:
                new_status.pop("allocation", None)
                new_status.pop("devices", None)
                notes.append("deallocate: no consumers left")
        remove_finalizer = has_finalizer and "allocation" not in new_status
    elif has_finalizer and ob.deleting(claim) and not valid:
        if ob.allocation(claim) is not None:
            new_status = ob.deep_copy(dict(ob.status(claim)))
            new_status.pop("allocation", None)
            new_status.pop("devices", None)
            notes.append("deallocate: claim is being deleted")
        remove_finalizer = True
    delete = False
    if not valid and not ob.deleting(claim):
        owner_name, owner_uid = ob.owning_pod(claim)
        owner = pods.get(owner_name) if owner_name else None
        if owner is not None and (ob.uid(owner) != owner_uid or ob.pod_done(owner)):
            delete = True
            notes.append(f"delete: generated for pod {owner_name}, which will not run")
    return ClaimPlan(new_status, remove_finalizer, delete, tuple(notes))


def _group_gone(ref: Mapping[str, Any], groups: Mapping[str, Mapping[str, Any] | None], deleted: Set[str]) -> str:
    """Why the PodGroup ``ref`` names no longer holds the claim ("" while it does)."""
    n = str(ref.get("name") or "")
    if str(ref.get("uid") or "") in deleted:
        return f"PodGroup {n} was deleted"
    if n not in groups:
        return ""
    group = groups[n]
    if group is None:
        return f"PodGroup {n} is gone"
    if ob.uid(group) != str(ref.get("uid") or ""):
        return f"PodGroup {n} was replaced by a new instance"
    return ""


def without_finalizer(claim: Mapping[str, Any]) -> Obj:
    """The claim with the delete-protection finalizer removed (for a metadata update)."""
    out = ob.deep_copy(dict(claim))
    out["metadata"]["finalizers"] = [f for f in ob.finalizers(claim) if f != ob.DELETE_PROTECTION_FINALIZER]
    return out
