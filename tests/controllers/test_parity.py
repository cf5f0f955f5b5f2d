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

import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver.controllers import objects as ob
from tests import builders as b
from tests.controllers.conftest import Env, _clear_events, wait_for
from tests.controllers.parity import (
    BINDING_TIMEOUT,
    BY_CLASS,
    EXTENDED,
    PLUGIN_NODE,
    SIDES,
    KubePluginDirs,
    Side,
    binding_slice,
    device_class,
    device_conditions,
    device_plugin_node,
    extended_pod,
    nic_class,
    set_device_condition,
    slot_claim,
)
from tests.kubeletplugin.helpers import PluginProcess, short_tmpdir

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
    # A special claim an earlier attempt left behind (allocated elsewhere, say) is deleted.
    gated = extended_pod(side, "leftover", {BY_CLASS: "1"})
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    held = env.create(gated)
    stale = b.ONE_GPU.named("leftover-extended-resources-old").owned_by(held).obj()
    stale["metadata"]["annotations"] = {ANNOTATION: "true"}
    env.create(stale)
    env.patch("Pod", "leftover", {"spec": {"schedulingGates": None}})
    wait_for(lambda: env.get("ResourceClaim", "leftover-extended-resources-old") is None, timeout=30, what="the leftover claim deleted")
    if side.ours:
        # dra-solver tries again at once, with a fresh claim.
        wait_for(lambda: env.bound("leftover"), timeout=30, what="the pod bound after its leftover claim went")
        assert ob.name(_extended_claim(env, env.pod("leftover") or {})) != "leftover-extended-resources-old"
    else:
        # kube-scheduler parks the pod until some later cluster event (at most 5 minutes).
        wait_for(lambda: "deletion of ResourceClaim completed" in str((env.pod("leftover") or {}).get("status")), timeout=30,
                 what="kube-scheduler's verdict")


def test_extended_resource_served_by_device_plugin_on_one_node_and_by_dra_on_another(side: Side) -> None:
    env = side.env
    env.create(device_class(extended_resource=EXTENDED))
    # Node names no other test uses: one kube-scheduler serves the module's tests, and in
    # full-suite runs it found node-b's two GPUs unallocatable here ("cannot allocate all
    # claims") three times, right after the test before, which used node-a and node-b.
    device_plugin_node(env, "plugin-node", {EXTENDED: "4"})  # a device plugin reports 4
    env.node("dra-node")
    env.create(b.gpu_slice("dra-node", count=2))  # DRA serves 2
    # Three fit the device-plugin node only: no claim is created. Bound before the next pod
    # comes: a scheduler that saw both at once could put the two on the device-plugin node
    # first (both fit there), and then the three would fit nowhere, whichever scheduler.
    env.create(extended_pod(side, "plugin", {EXTENDED: "3"}))
    wait_for(lambda: env.bound("plugin"), timeout=30, what="the device-plugin pod bound")
    # Two fit the DRA node (the device-plugin node has 1 left): a claim there.
    env.create(extended_pod(side, "dra", {EXTENDED: "2"}))
    try:
        wait_for(lambda: env.bound("plugin", "dra"), timeout=30, what="both pods bound")
    except AssertionError:
        pod = env.pod("dra") or {}
        raise AssertionError(f"dra pod not bound; its status: {json.dumps(pod.get('status'))}") from None
    plugin, dra = env.pod("plugin"), env.pod("dra")
    assert plugin is not None and dra is not None
    assert ob.pod_node(plugin) == "plugin-node"
    assert not plugin["status"].get("extendedResourceClaimStatus")
    assert ob.pod_node(dra) == "dra-node"
    assert sorted(r["device"] for r in ob.allocated_devices(_extended_claim(env, dra))) == ["gpu-0", "gpu-1"]
    # Neither node has two left: by plugin 1, by DRA 0.
    env.create(extended_pod(side, "none", {EXTENDED: "2"}))
    wait_for(lambda: _scheduled_false(env.pod("none")), timeout=30, what="the third pod unschedulable")
    claims = [c for c in env.objects("ResourceClaim") if ob.annotations_of(c).get(ANNOTATION)]
    assert [ob.owning_pod(c)[0] for c in claims] == ["dra"]


ATTACHED, FAILED = "example.com/attached", "example.com/attach-failed"


def _waiting_for_binding(env: Env, pod: str, claim: str) -> dict[str, Any] | None:
    """The claim once it is allocated and reserved while its pod is not bound yet."""
    current, p = env.get("ResourceClaim", claim), env.pod(pod)
    if current is None or p is None or ob.allocation(current) is None or not ob.is_reserved_for_pod(p, current):
        return None
    assert not ob.pod_node(p), f"pod {pod} bound before its binding conditions were met"
    return current


def test_binding_conditions_met_and_binds_to_node(side: Side) -> None:
    env = side.env
    env.create(device_class())
    env.node("node-a")
    env.node("node-b")
    # A fabric-attached device any node can reach, attached to the chosen node on demand.
    env.create(binding_slice("fabric", ["fpga-0"], all_nodes=True, binds_to_node=True, conditions=[ATTACHED], failure=[FAILED]))
    env.create(slot_claim("attach", 0))
    env.create(side.pod("p", claims={"dev": "attach"}, node_selector={"kubernetes.io/hostname": "node-b"}))
    claim = wait_for(lambda: _waiting_for_binding(env, "p", "attach"), timeout=30, what="the claim allocated, the pod waiting")
    allocation = ob.allocation(claim)
    assert allocation is not None
    # bindsToNode: the allocation names the node the scheduler chose.
    assert allocation["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]}
    [result] = allocation["devices"]["results"]
    assert (result["bindingConditions"], result["bindingFailureConditions"]) == ([ATTACHED], [FAILED])
    assert allocation.get("allocationTimestamp")
    wait_for(lambda: env.events("BindingConditionsPending"), timeout=20, what="the BindingConditionsPending event")
    set_device_condition(env, claim, ATTACHED)
    wait_for(lambda: env.bound("p"), timeout=30, what="the pod bound once the device is attached")
    assert ob.pod_node(env.pod("p") or {}) == "node-b"
    assert ATTACHED in device_conditions(env.get("ResourceClaim", "attach"))


def test_binding_conditions_failed_or_timed_out_clear_the_allocation(side: Side) -> None:
    env = side.env
    env.create(device_class())
    env.node("node-a")
    env.create(binding_slice("fabric", ["fpga-0", "fpga-1"], all_nodes=True, conditions=[ATTACHED], failure=[FAILED]))
    env.create(slot_claim("fails", 0))
    env.create(slot_claim("slow", 1))
    env.create(side.pod("fail", claims={"dev": "fails"}))
    env.create(side.pod("wait", claims={"dev": "slow"}))
    failing = wait_for(lambda: _waiting_for_binding(env, "fail", "fails"), timeout=30, what="fails allocated, its pod waiting")
    slow = wait_for(lambda: _waiting_for_binding(env, "wait", "slow"), timeout=30, what="slow allocated, its pod waiting")
    first_stamp = (ob.allocation(slow) or {})["allocationTimestamp"]
    # The attachment fails: the scheduler gives up, clears the allocation (and the device
    # status with it) and schedules the pod again.
    set_device_condition(env, failing, FAILED)

    def failure_cleared() -> bool:
        return FAILED not in device_conditions(env.get("ResourceClaim", "fails"))

    wait_for(failure_cleared, timeout=30, what="the failed allocation cleared")
    # Nothing ever attaches the other device: after the timeout the same happens to it.
    def timed_out() -> bool:
        current = env.get("ResourceClaim", "slow")
        allocation = ob.allocation(current or {})
        return allocation is None or allocation.get("allocationTimestamp") != first_stamp

    wait_for(timed_out, timeout=BINDING_TIMEOUT + 30, what="the timed-out allocation cleared")
    assert not env.bound("fail") and not env.bound("wait")

    def messages() -> str:
        return " | ".join(e["message"] for e in env.events("FailedScheduling"))

    # The scheduler clears the allocation before it posts the event (as upstream's
    # PostFilter runs before the failure handler records it), so the event may trail.
    wait_for(lambda: "device binding timeout" in messages(), timeout=20, what="the binding-timeout event")
    assert "device binding failed: claim=fails" in messages(), messages()


def test_pods_that_skip_the_scheduler(side: Side) -> None:
    env = side.env
    env.cluster(nodes=1, gpus=2)
    env.create(b.ONE_GPU.named("shared").obj())
    env.create(b.ONE_GPU.named("lonely").obj())
    env.create(side.pod("first", claims={"gpu": "shared"}))
    wait_for(lambda: env.bound("first"), timeout=30, what="first bound")
    # Created straight onto the node: its claim is allocated already (for "first"), so the
    # claim controller reserves it for this pod too.
    env.create(side.pod("late", claims={"gpu": "shared"}, node="node-a"))
    # Its claim is allocated for nobody: nothing allocates it, the pod cannot start.
    env.create(side.pod("stuck", claims={"gpu": "lonely"}, node="node-a"))

    def late_reserved() -> bool:
        claim, late = env.get("ResourceClaim", "shared"), env.pod("late")
        return claim is not None and late is not None and ob.is_reserved_for_pod(late, claim)

    wait_for(late_reserved, timeout=30, what="the shared claim reserved for the late pod")
    if side.ours:
        # kube-controller-manager says nothing (the kubelet would, when it fails to start the
        # pod); dra-solver's claim controller says why once the claim stayed unallocated for 5 s.
        [event] = wait_for(lambda: env.events("ResourceClaimNotAllocated"), timeout=20, what="the ResourceClaimNotAllocated event")
        assert event["involvedObject"]["name"] == "stuck"
        assert "ResourceClaim default/lonely is not allocated" in event["message"]
    lonely, stuck = env.get("ResourceClaim", "lonely"), env.pod("stuck")
    assert lonely is not None and stuck is not None
    assert ob.allocation(lonely) is None and not ob.reserved_for(lonely)
    assert ob.pod_node(stuck) == "node-a"
    shared = env.get("ResourceClaim", "shared")
    assert shared is not None and sorted(r["name"] for r in ob.reserved_for(shared)) == ["first", "late"]


def _rule_condition(env: Env, name: str) -> dict[str, Any] | None:
    rule = env.get("DeviceTaintRule", name)
    for cond in ((rule or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "EvictionInProgress":
            return dict(cond)
    return None


def test_device_taint_rule_status(side: Side) -> None:
    env = side.env
    env.cluster(nodes=1, gpus=2)
    env.create(b.ONE_GPU.named("c").obj())
    env.create(side.pod("victim", claims={"gpu": "c"}))
    wait_for(lambda: env.bound("victim"), timeout=30, what="victim bound")
    claim = env.get("ResourceClaim", "c")
    assert claim is not None
    [result] = ob.allocated_devices(claim)
    # A dry run first: effect None says what NoExecute would do, and evicts nobody.
    env.create(b.taint_rule("dry-run", pool="node-a", effect="None"))
    cond = wait_for(lambda: _rule_condition(env, "dry-run"), timeout=30, what="the dry run's condition")
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == ("False", "NoEffect", 1)
    assert cond["message"] == (
        "2 published devices selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace "
        "if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update.")
    assert not ob.deleting(env.pod("victim") or {})
    # The real thing: the pod is evicted, and the rule says the eviction is complete.
    env.create(b.taint_rule("broken", device=result["device"]))
    wait_for(lambda: ob.deleting(env.pod("victim") or {"metadata": {"deletionTimestamp": "gone"}}), timeout=30, what="victim evicted")

    def completed() -> dict[str, Any] | None:
        cond = _rule_condition(env, "broken")
        return cond if cond and cond["reason"] == "Completed" else None

    cond = wait_for(completed, timeout=40, what="the rule's eviction reported complete")
    assert (cond["status"], cond["observedGeneration"]) == ("False", 1)
    assert cond["message"] == "1 pod evicted since starting the controller."


def test_device_status_written_by_the_plugin_and_kept(side: Side) -> None:
    env = side.env
    env.create(nic_class())
    env.node(PLUGIN_NODE)
    root = short_tmpdir()
    config = root / "devices.yaml"
    config.write_text("gpus: 1\nnics: 2\n")
    plugin = PluginProcess(KubePluginDirs(root, config=config, kubeconfig=env.kc.kubeconfig)).start()
    kubelet = plugin.kubelet()
    try:
        wait_for(lambda: [s for s in env.objects("ResourceSlice") if s["spec"].get("nodeName") == PLUGIN_NODE],
                 timeout=30, what="the plugin's slices")
        claim = b.ONE_GPU.named("net").obj()
        claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nic.sim.dra-solver.dev"
        env.create(claim)
        env.create(side.pod("first", claims={"nic": "net"}))
        wait_for(lambda: env.bound("first"), timeout=30, what="first bound")
        allocated = env.get("ResourceClaim", "net")
        assert allocated is not None
        [device] = ob.allocated_devices(allocated)
        # The kubelet prepares the claim: the plugin reports the NIC in status.devices.
        prepared = kubelet.prepare(allocated).claims[ob.uid(allocated)]
        assert not prepared.error, prepared.error

        def entry() -> dict[str, Any] | None:
            current = env.get("ResourceClaim", "net") or {}
            found = [e for e in current.get("status", {}).get("devices") or [] if e["device"] == device["device"]]
            return found[0] if found else None

        written = wait_for(entry, timeout=20, what="the plugin's device status")
        assert (written["driver"], written["pool"], written.get("shareID")) == (device["driver"], device["pool"], device.get("shareID"))
        network = written["networkData"]
        assert network["interfaceName"] == f"simnet{device['device'].removeprefix('nic-')}"
        assert len(network["ips"]) == 1 and network["hardwareAddress"].startswith("02:")
        assert [c["type"] for c in written["conditions"]] == ["Ready"]
        # Someone else reports on the same device, then the scheduler reserves the claim for a
        # second pod and the kubelet prepares it again: nobody's entries are lost.
        set_device_condition(env, allocated, "example.com/linked", manager="link-monitor")
        env.create(side.pod("second", claims={"nic": "net"}))
        wait_for(lambda: env.bound("second"), timeout=30, what="second bound")
        assert not kubelet.prepare(env.get("ResourceClaim", "net") or {}).claims[ob.uid(allocated)].error
        final = env.get("ResourceClaim", "net")
        assert final is not None
        assert sorted(r["name"] for r in ob.reserved_for(final)) == ["first", "second"]
        kept = entry()
        assert kept is not None and kept["networkData"] == network
        assert {c["type"] for c in kept["conditions"]} == {"Ready", "example.com/linked"}
    finally:
        kubelet.close()
        plugin.terminate()
        shutil.rmtree(root, ignore_errors=True)
