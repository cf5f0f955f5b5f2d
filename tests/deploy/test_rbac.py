"""Least-privilege RBAC, checked on the rendered manifests (no server needed).

Whether each component is granted exactly what it uses is checked on the real API server, by
running every component under its own ServiceAccount and reading the audit log
(tests/deploy/test_rbac_as_shipped.py). These checks are about the shape of the grants: no
wildcards, no per-name rules, Roles only for namespaced resources, no access to Secrets.
"""

from __future__ import annotations

import pytest

from tests.deploy import apicalls
from tests.deploy.apicalls import ApiCall
from tests.deploy.manifests import OVERLAYS, overlay
from tests.deploy.rbac import COMPONENTS, NAMESPACE, Component, bound_roles, granted


@pytest.mark.parametrize("overlay_name", OVERLAYS)
@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.name)
def test_every_component_is_bound_to_roles_without_wildcards(component: Component, overlay_name: str) -> None:
    # granted() refuses wildcards and resourceNames; a component bound to nothing is a typo.
    assert granted(overlay(overlay_name), component.service_account)


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
    for role in bound_roles(overlay("production"), component.service_account):
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
    assert apicalls.call_for("POST", "/api/v1/namespaces/{namespace}/pods/{name}/binding") == ApiCall(
        "", "pods/binding", "create")
    assert apicalls.call_for("GET", "/apis/resource.k8s.io/v1/watch/resourceslices") == ApiCall(
        "resource.k8s.io", "resourceslices", "watch", namespaced=False)
    assert apicalls.call_for("PATCH", "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status") \
        == ApiCall("resource.k8s.io", "resourceclaims/status", "patch")
    assert apicalls.call_for("DELETE", "/api/v1/namespaces/{namespace}/pods") == ApiCall("", "pods", "deletecollection")
