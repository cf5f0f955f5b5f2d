"""Running one scenario under both schedulers: dra-solver's companions, or upstream's own.

A :class:`Side` is a real control plane plus whoever schedules and reconciles on it:

- ``dra-solver``: the shared test control plane (``kube_cluster``), the real solver service
  watching it and dra-solver's controllers (claim, scheduler, eviction) in this process;
- ``kube-scheduler``: the upstream control plane (``upstream_cluster``) with kube-scheduler
  v1.37.2 and kube-controller-manager's resourceclaim and device-taint-eviction controllers.

Both run v1.37's default feature gates (DRAExtendedResource, DRADeviceBindingConditions and
DRAResourceClaimDeviceStatus are on) and the same binding-condition timeout. A scenario creates
the same objects through :attr:`Side.env` (pods carry :attr:`Side.scheduler_name`) and asserts
the same outcome on either side.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tests import builders as b
from tests.controllers.conftest import RESOURCE, Env
from tests.kubeletplugin.helpers import DRIVER as PLUGIN_DRIVER
from tests.kubeletplugin.helpers import NODE as PLUGIN_NODE
from tests.kubeletplugin.helpers import PluginDirs
from tests.realkube import UPSTREAM_BINDING_TIMEOUT

Obj = dict[str, Any]

SIDES = ("dra-solver", "kube-scheduler")
BINDING_TIMEOUT = UPSTREAM_BINDING_TIMEOUT
"""Both schedulers give up on binding conditions after this many seconds."""

EXTENDED = "example.com/gpu"
BY_CLASS = f"deviceclass.resource.kubernetes.io/{b.CLASS}"


@dataclass
class Side:
    name: str
    env: Env

    @property
    def scheduler_name(self) -> str:
        return "dra-solver" if self.name == "dra-solver" else "default-scheduler"

    @property
    def ours(self) -> bool:
        return self.name == "dra-solver"

    def pod(self, name: str, **kw: Any) -> Obj:
        """``builders.pod`` for this side's scheduler."""
        return b.pod(name, scheduler=self.scheduler_name, **kw)


def extended_pod(side: Side, name: str, resources: dict[str, str], *, node_selector: dict[str, str] | None = None,
                 init: dict[str, str] | None = None) -> Obj:
    """A pod asking ``resources`` (extended resource -> count) in its limits only (the API
    server copies them into requests), with no ResourceClaim; ``init`` the same for an init
    container that runs before it."""
    pod = side.pod(name, node_selector=node_selector)
    pod["spec"]["containers"][0]["resources"]["limits"] = dict(resources)
    if init:
        pod["spec"]["initContainers"] = [{"name": "setup", "image": "busybox", "resources": {"limits": dict(init)}}]
    return pod


def device_class(*, extended_resource: str | None = None) -> Obj:
    cls = b.device_class()
    if extended_resource:
        cls["spec"]["extendedResourceName"] = extended_resource
    return cls


def device_plugin_node(env: Env, name: str, resources: dict[str, str]) -> None:
    """A node whose kubelet reports ``resources`` (a device plugin's) in capacity and allocatable."""
    env.node(name)
    node = env.get("Node", name)
    assert node is not None
    status = copy.deepcopy(node["status"])
    for field in ("capacity", "allocatable"):
        status[field] = {**status.get(field, {}), **resources}
    env.patch("Node", name, {"status": {"capacity": status["capacity"], "allocatable": status["allocatable"]}}, subresource="status")


def binding_slice(name: str, devices: list[str], *, node: str | None = None, all_nodes: bool = False, binds_to_node: bool = False,
                  conditions: list[str] | None = None, failure: list[str] | None = None) -> Obj:
    """A slice of devices that need binding conditions (and/or bind to the chosen node)."""
    spec: Obj = {"driver": b.DRIVER, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}, "devices": []}
    if all_nodes:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    for i, d in enumerate(devices):
        device: Obj = {"name": d, "attributes": {"model": {"string": "a100"}, "slot": {"int": i}}}
        if binds_to_node:
            device["bindsToNode"] = True
        if conditions:
            device["bindingConditions"] = list(conditions)
            device["bindingFailureConditions"] = list(failure or [])
        spec["devices"].append(device)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def slot_claim(name: str, slot: int) -> Obj:
    """A claim for the device in ``slot`` of a :func:`binding_slice`."""
    claim = b.ONE_GPU.named(name).obj()
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": f"device.attributes['{b.DRIVER}'].slot == {slot}"}}]
    return claim


def set_device_condition(env: Env, claim: Obj, condition: str, *, manager: str = "fabric-controller") -> None:
    """What an external controller does: mark each allocated device's ``condition`` True in the
    claim's status.devices, by server-side apply under its own field manager."""
    devices = [{"driver": r["driver"], "pool": r["pool"], "device": r["device"],
                **({"shareID": r["shareID"]} if r.get("shareID") else {}),
                "conditions": [{"type": condition, "status": "True", "reason": "Test", "message": "",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
               for r in claim["status"]["allocation"]["devices"]["results"]]
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim["metadata"]["name"], "namespace": claim["metadata"]["namespace"]},
            "status": {"devices": devices}}
    env.kc.request("PATCH", f"{RESOURCE}/namespaces/{claim['metadata']['namespace']}/resourceclaims/{claim['metadata']['name']}"
                   f"/status?fieldManager={manager}&force=true", body, content_type="application/apply-patch+yaml")


def device_conditions(claim: Obj | None) -> set[str]:
    """The condition types that are True in the claim's status.devices."""
    out: set[str] = set()
    for entry in ((claim or {}).get("status") or {}).get("devices") or []:
        out.update(c["type"] for c in entry.get("conditions") or [] if c.get("status") == "True")
    return out


@dataclass
class KubePluginDirs(PluginDirs):
    """The plugin's directories, with slices published and claims read through the API."""

    kubeconfig: str = ""

    def args(self) -> list[str]:
        out = ["--driver", PLUGIN_DRIVER, "--node", PLUGIN_NODE, "--plugin-dir", str(self.plugin),
               "--registry-dir", str(self.registry), "--cdi-dir", str(self.cdi), "--checkpoint-dir", str(self.checkpoint),
               "--kubeconfig", self.kubeconfig]
        if self.config is not None:
            out += ["--config", str(self.config)]
        return out


def nic_class() -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "nic.sim.dra-solver.dev"},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{PLUGIN_DRIVER}' && "
                                                          f"device.attributes['{PLUGIN_DRIVER}'].type == 'nic'"}}]}}
