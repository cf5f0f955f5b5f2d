"""Extended resources backed by DRA, the pure part (controllers/extended.py): which class serves
a resource, which node serves it how, the special claim's requests and container mappings
(upstream's own cases for ``createRequestsAndMappings``), the claim and the pod status patch.
The same behaviour on the real API server, next to kube-scheduler: tests/controllers/test_parity.py.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from dra_solver.controllers import extended as x
from dra_solver.controllers import scheduling as s
from tests import builders as b

Obj = dict[str, Any]
GPU = "example.com/gpu"


def cls(name: str, resource: str | None = None, created: str = "2026-01-01T00:00:00Z") -> Obj:
    out = b.device_class(name)
    out["metadata"]["creationTimestamp"] = created
    if resource:
        out["spec"]["extendedResourceName"] = resource
    return out


def container(name: str, requests: dict[str, str], *, sidecar: bool = False) -> Obj:
    c: Obj = {"name": name, "image": "x", "resources": {"requests": dict(requests)}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def pod(containers: list[Obj], init: list[Obj] | None = None) -> Obj:
    p = b.pod("p", uid="pod-uid")
    p["spec"]["containers"] = containers
    if init:
        p["spec"]["initContainers"] = init
    return p


def test_resource_names() -> None:
    assert x.is_extended_resource_name("example.com/gpu")
    assert not x.is_extended_resource_name("cpu")
    assert not x.is_extended_resource_name("kubernetes.io/gpu")
    assert not x.is_extended_resource_name("requests.example.com/gpu")
    assert not x.is_extended_resource_name("example.com/a/b")
    assert x.is_dra_extended_resource_name("deviceclass.resource.kubernetes.io/gpu.example.com")
    assert not x.is_dra_extended_resource_name("hugepages-2Mi")


def test_class_index_prefers_the_newer_class_then_the_lower_name() -> None:
    index = x.ClassIndex([
        cls("old", GPU, "2026-01-01T00:00:00Z"),
        cls("new", GPU, "2026-02-01T00:00:00Z"),
        cls("b-twin", "example.com/fpga"),
        cls("a-twin", "example.com/fpga"),
        cls("plain"),
    ])
    assert index.class_for(GPU) == "new"
    assert index.class_for("example.com/fpga") == "a-twin"
    assert index.class_for("deviceclass.resource.kubernetes.io/plain") == "plain"
    assert index.class_for("deviceclass.resource.kubernetes.io/old") == "old"
    assert index.class_for("example.com/other") is None


def test_pod_requests_and_which_node_serves_them_how() -> None:
    index = x.ClassIndex([cls("gpu", GPU)])
    p = pod([container("a", {GPU: "2", "example.com/unmapped": "1", "cpu": "1"})], init=[container("i", {GPU: "3"})])
    assert x.pod_dra_requests(p, index) == {GPU: Fraction(3)}  # the larger of init and containers
    plugin_node, dra_node = b.node("a"), b.node("b")
    plugin_node["status"]["allocatable"][GPU] = "4"
    assert x.dra_resources_on({GPU: Fraction(3)}, plugin_node) == frozenset()
    assert x.dra_resources_on({GPU: Fraction(3)}, dra_node) == frozenset({GPU})
    groups = x.node_groups(["b", "a", "c"], {"a": plugin_node, "b": dra_node, "c": b.node("c")}, {GPU: Fraction(3)})
    assert groups == [(frozenset(), ("a",)), (frozenset({GPU}), ("b", "c"))]


@pytest.mark.parametrize(("need", "node", "used", "why"), [
    ({GPU: "2"}, {GPU: "4"}, {}, ""),
    ({GPU: "2"}, {GPU: "4"}, {GPU: 3}, f"Insufficient {GPU}"),
    ({GPU: "2"}, {}, {}, ""),  # a class serves it: DRA decides on this node
    ({"example.com/unmapped": "1"}, {}, {}, "Insufficient example.com/unmapped"),
    ({"example.com/unmapped": "1"}, {"example.com/unmapped": "1"}, {}, ""),
    ({"hugepages-2Mi": "4Mi"}, {"hugepages-2Mi": "2Mi"}, {}, "Insufficient hugepages-2Mi"),
], ids=["plugin fits", "plugin full", "dra", "nobody serves it", "plugin serves unmapped", "hugepages"])
def test_node_filter_counts_device_plugin_resources(need: dict[str, str], node: dict[str, str], used: dict[str, int], why: str) -> None:
    p = pod([container("a", {"cpu": "100m", **need})])
    n = b.node("n")
    n["status"]["allocatable"].update(node)
    taken = s.Resources(scalars=tuple(sorted((k, Fraction(v)) for k, v in used.items())))
    assert s.node_verdict(p, n, used=taken, dra_backed=frozenset({GPU})) == why


INDEX = x.ClassIndex([cls("class", GPU), cls("class1", "example.com/gpu1"), cls("classInit", "example.com/gpuinit")])


def _requests(p: Obj, resources: set[str]) -> list[tuple[str, str, int]]:
    requests, _ = x.requests_and_mappings(p, resources, INDEX)
    return [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests]


def test_requests_follow_upstreams_cases() -> None:
    # Upstream's Test_createRequestsAndMappings_requests, case by case.
    one = pod([container("c", {GPU: "1", "example.com/gpu1": "2"})])
    assert _requests(one, set()) == []
    assert _requests(one, {GPU}) == [("container-0-request-0", "class", 1)]
    assert _requests(one, {GPU, "example.com/gpu1"}) == [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)]
    two = pod([container("c0", {GPU: "1"}), container("c1", {"example.com/gpu1": "2"})])
    assert _requests(two, {GPU, "example.com/gpu1"}) == [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)]
    init = pod([container("c", {GPU: "1"})], init=[container("i", {"example.com/gpuinit": "2"})])
    assert _requests(init, {GPU, "example.com/gpuinit"}) == [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)]
    two_inits = pod([container("c", {GPU: "1"})], init=[container("i0", {"example.com/gpuinit": "1"}), container("i1", {"example.com/gpuinit": "2"})])
    assert _requests(two_inits, {GPU, "example.com/gpuinit"}) == [
        ("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)]
    with_sidecar = pod([container("c", {GPU: "1"})], init=[
        container("i0", {"example.com/gpuinit": "1"}), container("side", {"example.com/gpuinit": "1"}, sidecar=True),
        container("i2", {"example.com/gpuinit": "2"})])
    assert _requests(with_sidecar, {GPU, "example.com/gpuinit"}) == [
        ("container-1-request-0", "classInit", 1), ("container-2-request-0", "classInit", 2), ("container-3-request-0", "class", 1)]


def test_mappings_let_init_containers_reuse_later_requests() -> None:
    p = pod([container("main", {GPU: "2"})], init=[container("setup", {GPU: "1"}), container("warm", {GPU: "3"})])
    requests, mappings = x.requests_and_mappings(p, {GPU}, INDEX)
    # setup's one GPU comes from main's two; warm needs three: one request for the larger need.
    assert [(r["name"], r["exactly"]["count"]) for r in requests] == [("container-1-request-0", 1), ("container-2-request-0", 2)]
    assert [(m.container, m.request) for m in mappings] == [
        ("main", "container-2-request-0"), ("setup", "container-2-request-0"),
        ("warm", "container-2-request-0"), ("warm", "container-1-request-0")]


def test_the_claim_the_pod_and_leftovers() -> None:
    p = pod([container("main", {"cpu": "1", GPU: "2"})])
    special = x.special_claim(p, frozenset({GPU}), INDEX, temp_name="extended-resources.pod-uid.1")
    before = copy.deepcopy(p)
    body = x.claim_to_create(p, special)
    assert p == before
    assert body["metadata"] == {
        "generateName": "p-extended-resources-", "namespace": "default",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid", "controller": True}],
        "annotations": {x.EXTENDED_CLAIM_ANNOTATION: "true"}, "finalizers": ["resource.kubernetes.io/delete-protection"],
    }
    assert body["spec"]["devices"]["requests"] == [
        {"name": "container-0-request-1", "exactly": {"deviceClassName": "class", "allocationMode": "ExactCount", "count": 2}}]
    assert special.key == "default/extended-resources.pod-uid.1"
    patch = x.pod_status_patch(p, "p-extended-resources-abcde", special.mappings)
    assert patch == {"metadata": {"uid": "pod-uid"}, "status": {"extendedResourceClaimStatus": {
        "resourceClaimName": "p-extended-resources-abcde",
        "requestMappings": [{"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-1"}]}}}
    created = dict(body, metadata={**body["metadata"], "name": "p-extended-resources-abcde"})
    assert x.find_claim(p, [created]) is not None
    assert x.find_claim(b.pod("p", uid="other"), [created]) is None
    assert x.find_claim(p, [b.ONE_GPU.named("plain").owned_by(p).obj()]) is None
