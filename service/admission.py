"""The admin-access check the API server makes when a ResourceClaim is created, made here for
claims callers send inline (they never passed an API server).

Upstream (kube-apiserver, ``pkg/registry/resource``): a claim whose request sets
``exactly.adminAccess: true``, or whose allocation result grants admin access, is only accepted
in a namespace labelled ``resource.kubernetes.io/admin-access: "true"``. The service knows
namespaces from its inventory (Namespace objects in a file inventory, list+watch of Namespaces
from Kubernetes); a claim in a namespace it does not know is refused, as the API server refuses
when it cannot read the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dra_solver.model import (
    AllocationError,
    FieldPath,
    InvalidInput,
    InvalidInputs,
    format_field_path,
)
from dra_solver.model import objects as o

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def _admin_path(claim: o.ResourceClaim) -> FieldPath | None:
    """Where the claim asks for admin access (upstream's field path), or None."""
    for i, request in enumerate(claim.spec.devices.requests or []):
        # adminAccess cannot be set on subrequests: only exactly counts.
        if request.exactly is not None and request.exactly.admin_access:
            return ("spec", "devices", "requests", i, "adminAccess")
    alloc = claim.status.allocation if claim.status else None
    for i, result in enumerate((alloc.devices.results or []) if alloc and alloc.devices else []):
        if result.admin_access:
            return ("status", "allocation", "devices", "results", i, "adminAccess")
    return None


def check_admin_access(claims: Sequence[o.ResourceClaim], namespaces: Mapping[str, Mapping[str, str]] | None, *, field_name: str = "claims") -> None:
    """Raise like the API server would for claims asking admin access outside an admin
    namespace: ``InvalidInput`` (Forbidden) when the namespace lacks the label,
    ``AllocationError`` when the namespace is unknown (upstream: an internal error reading it).
    """
    forbidden: list[InvalidInput] = []
    for i, claim in enumerate(claims):
        path = _admin_path(claim)
        if path is None:
            continue
        ns = claim.namespace or "default"
        labels = (namespaces or {}).get(ns)
        if labels is None:
            raise AllocationError(
                f"{claim.describe()}: {format_field_path(path)}: Internal error: "
                f'could not retrieve namespace to verify admin access: namespaces "{ns}" not found'
            )
        if labels.get(ADMIN_ACCESS_LABEL) != "true":
            forbidden.append(
                InvalidInput(
                    claim.describe(),
                    path,
                    f"Forbidden: admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the containing namespace",
                    source=f"{field_name}[{i}]",
                )
            )
    if len(forbidden) == 1:
        raise forbidden[0]
    if forbidden:
        raise InvalidInputs(forbidden)
