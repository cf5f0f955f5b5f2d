"""Least-privilege RBAC: each component is granted exactly the API requests its code makes.

What a component needs comes from its code (tests/deploy/apicalls.py resolves every
kubernetes-client method it references) plus the list kept next to the code for what a scan
cannot see (``<package>/rbac_calls.py``). What it has comes from the rendered manifests: the
rules of every Role and ClusterRole bound to its ServiceAccount. The two sets must be equal:
a missing grant breaks the component in a real cluster; an extra one is privilege nobody uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.deploy import apicalls
from tests.deploy.apicalls import ApiCall
from tests.deploy.manifests import OVERLAYS, ROOT, overlay


@dataclass(frozen=True)
class Component:
    name: str
    package: str
    service_account: str


COMPONENTS = (
    Component("solver", "service", "dra-solver"),
    Component("controllers", "controllers", "dra-solver-controllers"),
    Component("kubelet-plugin", "kubeletplugin", "dra-solver-kubelet-plugin"),
)
NAMESPACE = "dra-solver"


def _bound_roles(objects: Iterable[dict[str, Any]], service_account: str) -> list[dict[str, Any]]:
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
    for role in _bound_roles(objects, service_account):
        for rule in role.get("rules", []):
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard"
            assert not rule.get("resourceNames"), "resourceNames would need per-call checks"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        call = ApiCall(group, resource, verb)
                        out[call] = f"{role['kind']} {role['metadata']['name']}"
    return out


def required(component: Component) -> dict[ApiCall, list[str]]:
    """What the component's code calls, keyed without the namespaced flag."""
    needs: dict[ApiCall, list[str]] = {}
    for call, files in apicalls.calls_in_package(ROOT / component.package).items():
        key = ApiCall(call.group, call.resource, call.verb)
        needs.setdefault(key, []).extend(str(f) for f in files)
    declared = apicalls.declared_calls(f"{component.package}.rbac_calls")
    for call in declared or ():
        needs.setdefault(ApiCall(call.group, call.resource, call.verb), []).append(
            f"{component.package}/rbac_calls.py"
        )
    return needs


@pytest.mark.parametrize("overlay_name", OVERLAYS)
@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.name)
def test_rbac_grants_exactly_what_the_code_calls(component: Component, overlay_name: str) -> None:
    have = granted(overlay(overlay_name), component.service_account)
    need = required(component)
    missing = sorted(set(need) - set(have))
    unused = sorted(set(have) - set(need))
    assert not missing, f"{component.name}: RBAC lacks " + "; ".join(
        f"{c} (used in {', '.join(sorted(set(need[c])))})" for c in missing
    )
    assert not unused, f"{component.name}: RBAC grants unused " + "; ".join(
        f"{c} (by {have[c]})" for c in unused
    )


def _namespaced_resources() -> set[tuple[str, str]]:
    return {
        (call.group, call.resource)
        for method, path in apicalls.client_methods().values()
        if (call := apicalls.call_for(method, path)).namespaced
    }


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.name)
def test_roles_grant_only_namespaced_resources(component: Component) -> None:
    # A Role grants within one namespace; naming a cluster-scoped resource in it grants nothing.
    namespaced = _namespaced_resources()
    for role in _bound_roles(overlay("production"), component.service_account):
        if role["kind"] != "Role":
            continue
        assert role["metadata"]["namespace"] == NAMESPACE
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert (group, resource) in namespaced, f"{resource} is cluster-scoped"


def test_no_component_can_read_secrets() -> None:
    for component in COMPONENTS:
        for call in granted(overlay("production"), component.service_account):
            assert call.resource != "secrets", f"{component.name} may {call.verb} secrets"


def test_api_call_resolution() -> None:
    source = (
        "from kubernetes import watch\n"
        "def f(core, res):\n"
        "    for e in watch.Watch().stream(res.list_resource_slice):\n"
        "        pass\n"
        "    core.create_namespaced_pod_binding('p', 'ns', body={})\n"
        "    res.patch_namespaced_resource_claim_status('c', 'ns', body={})\n"
        "    core.read_node('n')\n"
    )
    calls = {(c.group, c.resource, c.verb) for c in apicalls.calls_in_source(source)}
    assert calls == {
        ("resource.k8s.io", "resourceslices", "list"),
        ("resource.k8s.io", "resourceslices", "watch"),
        ("", "pods/binding", "create"),
        ("resource.k8s.io", "resourceclaims/status", "patch"),
        ("", "nodes", "get"),
    }
