"""Read-only helpers over Kubernetes objects in their JSON form (what the API server sends).

The controllers keep objects exactly as the API returns them (plain dicts), so what they write
back never loses a field the kubernetes client's models do not know, and the reconcile
functions can be tested with literal dicts. This module names the fields they read and the
few conventions they share with upstream (the pod-claim annotation, the delete-protection
finalizer, how a pod names its claims), so that every controller answers those questions the
same way. Nothing here does I/O or mutates its arguments.
"""

from __future__ import annotations

import copy
import datetime as dt
import marshal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_solver.service.api import meta as _meta

# Metadata helpers live in the shared client layer; the controllers read objects through here.
Obj = _meta.Obj
deleting = _meta.deleting
finalizers = _meta.finalizers
key = _meta.key
meta = _meta.meta
name = _meta.name
namespace = _meta.namespace
resource_version = _meta.resource_version
rv_int = _meta.rv_int
split_key = _meta.split_key
uid = _meta.uid

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""Generated ResourceClaims carry the pod.spec.resourceClaims[].name they were made for."""

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
"""Set by whoever writes an allocation; removed once the claim is deallocated."""

SCHEDULER_NAME = "dra-solver"

MAX_RESERVED_FOR = 256
"""resource.k8s.io/v1 ResourceClaimReservedForMaxSize."""


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    a = meta(obj).get("annotations")
    return a if isinstance(a, Mapping) else {}


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    s = obj.get("spec")
    return s if isinstance(s, Mapping) else {}


def status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    s = obj.get("status")
    return s if isinstance(s, Mapping) else {}


def deep_copy(obj: Obj) -> Obj:
    """A copy sharing nothing with ``obj``. API objects are decoded JSON, which ``marshal``
    copies in C (about three times faster than ``copy.deepcopy``); anything else is copied by
    ``copy.deepcopy``."""
    try:
        copied: Obj = marshal.loads(marshal.dumps(obj))
    except ValueError:  # a value marshal does not know
        return copy.deepcopy(obj)
    return copied


def parse_time(text: str | None) -> float | None:
    """RFC 3339 (as metav1.Time prints it) -> seconds since the epoch; None when unparsable."""
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def format_time(seconds: float) -> str:
    """Seconds since the epoch -> RFC 3339 with second precision, as metav1.Time does."""
    return dt.datetime.fromtimestamp(int(seconds), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- pods ---------------------------------------------------------------------------------------


def pod_phase(pod: Mapping[str, Any]) -> str:
    return str(status(pod).get("phase") or "")


def pod_terminal(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: no container will run again."""
    return pod_phase(pod) in ("Succeeded", "Failed")


def pod_done(pod: Mapping[str, Any]) -> bool:
    """Upstream ``isPodDone``: terminal, or deleted before it was ever scheduled."""
    return pod_terminal(pod) or (deleting(pod) and not spec(pod).get("nodeName"))


def pod_node(pod: Mapping[str, Any]) -> str:
    return str(spec(pod).get("nodeName") or "")


def pod_claims(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """pod.spec.resourceClaims, in spec order."""
    return [c for c in spec(pod).get("resourceClaims") or [] if isinstance(c, Mapping)]


class ClaimNameError(Exception):
    """The pod's claim entry cannot be resolved to a ResourceClaim name (yet)."""


class ClaimNotCreated(ClaimNameError):
    """A template claim whose ResourceClaim has not been recorded in the pod status yet."""


@dataclass(frozen=True, slots=True)
class ClaimName:
    """What a pod's claim entry refers to (upstream ``resourceclaim.Name``)."""

    name: str | None
    """The ResourceClaim's name; None when the pod status says no claim is needed."""
    check_owner: bool
    """True for claims generated from a template: they must be owned by the pod."""


def claim_name(pod: Mapping[str, Any], pod_claim: Mapping[str, Any]) -> ClaimName:
    """Resolve one pod.spec.resourceClaims entry; raises ClaimNameError (ClaimNotCreated)."""
    if pod_claim.get("resourceClaimName"):
        return ClaimName(str(pod_claim["resourceClaimName"]), False)
    if pod_claim.get("resourceClaimTemplateName"):
        for entry in status(pod).get("resourceClaimStatuses") or []:
            if entry.get("name") == pod_claim.get("name"):
                generated = entry.get("resourceClaimName")
                return ClaimName(str(generated) if generated else None, True)
        raise ClaimNotCreated(f"pod {key(pod)}, resourceClaim {pod_claim.get('name')}: ResourceClaim not created yet")
    raise ClaimNameError(
        f"pod {key(pod)}, spec.resourceClaims[{pod_claim.get('name')}]: none of the supported fields are set"
    )


def extended_claim_name(pod: Mapping[str, Any]) -> str:
    """The scheduler-made claim for the pod's extended resources
    (``status.extendedResourceClaimStatus.resourceClaimName``; "" when none)."""
    recorded = status(pod).get("extendedResourceClaimStatus")
    return str(recorded.get("resourceClaimName") or "") if isinstance(recorded, Mapping) else ""


def claim_refs(pod: Mapping[str, Any]) -> list[ClaimName]:
    """Every ResourceClaim the pod uses and can name now (upstream ``resourceclaim.PodClaims``):
    its spec's claims, then the extended-resource claim; unresolvable entries are skipped."""
    out: list[ClaimName] = []
    for pod_claim in pod_claims(pod):
        try:
            resolved = claim_name(pod, pod_claim)
        except ClaimNameError:
            continue
        if resolved.name:
            out.append(resolved)
    extended = extended_claim_name(pod)
    if extended:
        out.append(ClaimName(extended, True))
    return out


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def owning_pod(claim: Mapping[str, Any]) -> tuple[str, str]:
    """(name, uid) of the Pod controlling the claim, or ("", "")."""
    ref = controller_ref(claim)
    if ref is not None and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
        return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return "", ""


def is_for_pod(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> str | None:
    """None when the pod controls the claim, else why not (upstream ``IsForPod``)."""
    if namespace(claim) != namespace(pod):
        return f"ResourceClaim {key(claim)} is not in the same namespace as Pod {key(pod)}"
    ref = controller_ref(claim)
    if ref is None or ref.get("uid") != uid(pod):
        return f"ResourceClaim {key(claim)} was not created for Pod {key(pod)} (Pod is not owner)"
    return None


def reserved_for(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in status(claim).get("reservedFor") or [] if isinstance(r, Mapping)]


PODGROUP_API_GROUP = "scheduling.k8s.io"


def is_podgroup_ref(ref: Mapping[str, Any]) -> bool:
    """A ``reservedFor`` entry naming a PodGroup."""
    return ref.get("apiGroup") == PODGROUP_API_GROUP and ref.get("resource") == "podgroups"


def is_reserved_for_pod(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """The claim is reserved for the pod, or for the PodGroup its ``spec.schedulingGroup``
    names (a group's claim is reserved once for the PodGroup, as upstream's
    ``IsReservedForPod`` counts it with DRAWorkloadResourceClaims)."""
    group = spec(pod).get("schedulingGroup")
    group_name = group.get("podGroupName") if isinstance(group, Mapping) else None
    for r in reserved_for(claim):
        if r.get("uid") == uid(pod):
            return True
        if group_name and is_podgroup_ref(r) and r.get("name") == group_name:
            return True
    return False


def allocation(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    a = status(claim).get("allocation")
    return a if isinstance(a, Mapping) else None


def allocated_devices(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """status.allocation.devices.results of an allocated claim (empty otherwise)."""
    alloc = allocation(claim)
    if alloc is None:
        return []
    devices = alloc.get("devices")
    if not isinstance(devices, Mapping):
        return []
    return [r for r in devices.get("results") or [] if isinstance(r, Mapping)]


def device_id(result: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(result.get("driver") or ""), str(result.get("pool") or ""), str(result.get("device") or "")


def pod_reference(pod: Mapping[str, Any]) -> Obj:
    """The reservedFor entry naming ``pod``."""
    return {"resource": "pods", "name": name(pod), "uid": uid(pod)}
