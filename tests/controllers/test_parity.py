"""What kube-scheduler's DRA plugin and kube-controller-manager's DRA controllers do, dra-solver
does too: each scenario runs the same objects under both (see tests/controllers/parity.py) and
asserts the same outcome: which pods are bound and where, which claims are allocated, what the
pod and claim statuses record.

Scenarios: extended resources backed by DRA (by ``extendedResourceName`` and by
``deviceclass.resource.kubernetes.io/<class>``, an init container sharing its container's
devices); a cluster where one node serves the resource by device plugin and another by DRA;
binding conditions met (with ``bindsToNode``), failed and timed out; pods created with
``spec.nodeName``; device status written by a driver and kept by the schedulers' writes;
DeviceTaintRule status after an eviction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver.controllers import objects as ob
from tests.controllers import builders as b
from tests.controllers.conftest import Env, _clear_events, wait_for
from tests.controllers.parity import (
    BINDING_TIMEOUT,
    BY_CLASS,
    EXTENDED,
    SIDES,
    Side,
    device_class,
    device_plugin_node,
    extended_pod,
)

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@pytest.fixture(params=SIDES)
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "dra-solver":
        env: Env = request.getfixturevalue("env")
        env.manager(binding_timeout=BINDING_TIMEOUT, rule_status_period=1.0)
        yield Side("dra-solver", env)
        return
    kc = request.getfixturevalue("upstream_cluster")
    _clear_events(kc)
    yield Side("kube-scheduler", Env(kc, None))


def _scheduled_false(pod: dict[str, Any] | None) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in (pod or {}).get("status", {}).get("conditions") or [])


def _extended_claim(env: Env, pod: dict[str, Any]) -> dict[str, Any]:
    status = pod["status"].get("extendedResourceClaimStatus") or {}
    claim = env.get("ResourceClaim", status.get("resourceClaimName", "-"), ob.namespace(pod))
    assert claim is not None, f"pod {ob.name(pod)}: no extended-resource claim recorded: {status}"
    return claim


def test_extended_resources_by_name_and_by_class(side: Side) -> None:
    env = side.env
    env.create(device_class(extended_resource=EXTENDED))
    env.node("node-a")
    env.node("node-b")
    env.create(b.gpu_slice("node-a", count=1))
    env.create(b.gpu_slice("node-b", count=3))
    # Two GPUs by name fit node-b only; the init container's one GPU reuses the container's.
    env.create(extended_pod(side, "by-name", {EXTENDED: "2"}, init={EXTENDED: "1"}))
    wait_for(lambda: env.bound("by-name"), timeout=30, what="by-name bound")
    pod = env.pod("by-name")
    assert pod is not None and ob.pod_node(pod) == "node-b"
    claim = _extended_claim(env, pod)
    meta = claim["metadata"]
    assert meta["name"].startswith("by-name-extended-resources-")
    assert meta["annotations"][ANNOTATION] == "true"
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Pod", "by-name", ob.uid(pod), True)
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "container-1-request-1", "exactly": {"deviceClassName": b.CLASS, "allocationMode": "ExactCount", "count": 2}}]
    assert ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(claim)
    assert ob.is_reserved_for_pod(pod, claim)
    assert sorted(r["pool"] for r in ob.allocated_devices(claim)) == ["node-b", "node-b"]
    assert pod["status"]["extendedResourceClaimStatus"]["requestMappings"] == [
        {"containerName": "main", "resourceName": EXTENDED, "requestName": "container-1-request-1"},
        {"containerName": "setup", "resourceName": EXTENDED, "requestName": "container-1-request-1"},
    ]
    # One GPU by the class's implicit name: node-b has one left, node-a one.
    env.create(extended_pod(side, "by-class", {BY_CLASS: "1"}, node_selector={"kubernetes.io/hostname": "node-a"}))
    wait_for(lambda: env.bound("by-class"), timeout=30, what="by-class bound")
    pod = env.pod("by-class")
    assert pod is not None and ob.pod_node(pod) == "node-a"
    claim = _extended_claim(env, pod)
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    assert [r["pool"] for r in ob.allocated_devices(claim)] == ["node-a"]
    # Two more by name: one GPU is left on node-b, none on node-a: the pod waits, no claim.
    env.create(extended_pod(side, "too-many", {EXTENDED: "2"}))
    wait_for(lambda: _scheduled_false(env.pod("too-many")), timeout=30, what="too-many unschedulable")
    assert not ob.pod_node(env.pod("too-many") or {})
    assert not (env.pod("too-many") or {})["status"].get("extendedResourceClaimStatus")
    # The claim goes with its pod (garbage collector; the devices are freed).
    victim = ob.name(claim)
    env.delete("Pod", "by-class", force=True)
    wait_for(lambda: env.get("ResourceClaim", victim) is None, timeout=30, what="the extended claim deleted with its pod")


def test_extended_resource_served_by_device_plugin_on_one_node_and_by_dra_on_another(side: Side) -> None:
    env = side.env
    env.create(device_class(extended_resource=EXTENDED))
    device_plugin_node(env, "node-a", {EXTENDED: "4"})  # a device plugin reports 4
    env.node("node-b")
    env.create(b.gpu_slice("node-b", count=2))  # DRA serves 2
    # Three fit the device-plugin node only: no claim is created.
    env.create(extended_pod(side, "plugin", {EXTENDED: "3"}))
    # Two fit the DRA node (the device-plugin node has 1 left): a claim there.
    env.create(extended_pod(side, "dra", {EXTENDED: "2"}))
    wait_for(lambda: env.bound("plugin", "dra"), timeout=30, what="both pods bound")
    plugin, dra = env.pod("plugin"), env.pod("dra")
    assert plugin is not None and dra is not None
    assert ob.pod_node(plugin) == "node-a"
    assert not plugin["status"].get("extendedResourceClaimStatus")
    assert ob.pod_node(dra) == "node-b"
    assert sorted(r["device"] for r in ob.allocated_devices(_extended_claim(env, dra))) == ["gpu-0", "gpu-1"]
    # Neither node has two left: by plugin 1, by DRA 0.
    env.create(extended_pod(side, "none", {EXTENDED: "2"}))
    wait_for(lambda: _scheduled_false(env.pod("none")), timeout=30, what="the third pod unschedulable")
    claims = [c for c in env.objects("ResourceClaim") if ob.annotations_of(c).get(ANNOTATION)]
    assert [ob.owning_pod(c)[0] for c in claims] == ["dra"]
