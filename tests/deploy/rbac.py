"""RBAC as deploy/ ships it, and as the API server's audit log shows it used.

``granted`` reads the rendered manifests: every (apiGroup, resource[/subresource], verb) the
Roles and ClusterRoles bound to a component's ServiceAccount allow. ``used`` and ``refused``
read audit events (``ControlPlane(audit_log=True)``): what that ServiceAccount actually asked
for, and what the server refused it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.deploy.apicalls import ApiCall

NAMESPACE = "dra-solver"

RBAC_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})

SYNTHETIC = frozenset({"resourceclaims/binding", "resourceclaims/driver"})
"""Permissions the API server checks inside a ResourceClaim status write, never requests of
their own (DRAResourceClaimGranularStatusAuthorization)."""


@dataclass(frozen=True)
class Component:
    name: str
    package: str
    service_account: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{NAMESPACE}:{self.service_account}"


COMPONENTS = (
    Component("solver", "service", "dra-solver"),
    Component("controllers", "controllers", "dra-solver-controllers"),
    Component("kubelet-plugin", "kubeletplugin", "dra-solver-kubelet-plugin"),
)


def bound_roles(objects: Iterable[dict[str, Any]], service_account: str) -> list[dict[str, Any]]:
    """The Roles and ClusterRoles bound to ``dra-solver/<service_account>``."""
    objects = list(objects)
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
             for o in objects if o["kind"] in {"Role", "ClusterRole"}}
    out = []
    for binding in objects:
        if binding["kind"] not in {"RoleBinding", "ClusterRoleBinding"}:
            continue
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == service_account
            and s.get("namespace") == NAMESPACE
            for s in binding.get("subjects", [])
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], namespace, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} binds missing {ref}"
        out.append(role)
    return out


def granted(objects: Iterable[dict[str, Any]], service_account: str) -> dict[ApiCall, str]:
    """Every (group, resource, verb) granted to the ServiceAccount, with the granting role."""
    out: dict[ApiCall, str] = {}
    for role in bound_roles(objects, service_account):
        for rule in role.get("rules", []):
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard"
            # A name restricts who may be changed inside a request (resourceclaims/driver: which
            # driver's device status); on a real request it would need per-call checks.
            assert not rule.get("resourceNames") or set(rule["resources"]) <= SYNTHETIC, "resourceNames would need per-call checks"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out[ApiCall(group, resource, verb)] = f"{role['kind']} {role['metadata']['name']}"
    return out


def _call(event: dict[str, Any]) -> ApiCall | None:
    ref = event.get("objectRef")
    if not ref or "resource" not in ref:
        return None  # discovery and other non-resource URLs: granted to every user by default
    resource = ref["resource"]
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    return ApiCall(ref.get("apiGroup", ""), resource, event["verb"])


def _forbidden(event: dict[str, Any]) -> bool:
    return bool(event.get("annotations", {}).get("authorization.k8s.io/decision") == "forbid")


def used(events: Iterable[dict[str, Any]], username: str) -> dict[ApiCall, int]:
    """Requests the server allowed this user, counted once per request (audit ID)."""
    seen: dict[ApiCall, set[str]] = {}
    for event in events:
        if event.get("user", {}).get("username") != username or _forbidden(event):
            continue
        call = _call(event)
        if call is not None:
            seen.setdefault(call, set()).add(event["auditID"])
    return {call: len(ids) for call, ids in seen.items()}


_REQUIRES = re.compile(r'requires resource="([^"]+)", verb="\[?([^"\]\s]+)[^"]*" permission')


def refused(events: Iterable[dict[str, Any]], username: str) -> dict[ApiCall, str]:
    """Permissions this user lacked, with the request URI of one request that needed each.

    Two kinds: RBAC refusing the request itself (audit decision ``forbid``), and the API
    server refusing a change inside a request it allowed because the user lacks a finer
    permission (a ResourceClaim status update that sets an allocation needs update on
    ``resourceclaims/binding``): the response message names that permission.
    """
    out: dict[ApiCall, str] = {}
    for event in events:
        if event.get("user", {}).get("username") != username:
            continue
        uri = event.get("requestURI", "")
        if _forbidden(event):
            call = _call(event)
            if call is not None:
                out.setdefault(call, uri)
        message = event.get("responseStatus", {}).get("message", "")
        for resource, verb in _REQUIRES.findall(message):
            group = event.get("objectRef", {}).get("apiGroup", "")
            out.setdefault(ApiCall(group, resource, verb), uri)
    return out
