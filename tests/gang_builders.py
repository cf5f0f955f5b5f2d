"""Clusters and PodGroups for the gang tests: racks of GPU nodes, rack fabric devices, gangs.

``Rack(name, nodes=[Node(gpus=8, busy=2, cpu="64")...])`` describes a rack; ``cluster(racks)``
gives the API objects (JSON) of the nodes, their GPU slices (pool named after the node), one
fabric slice per rack (``fabric.example.com``, devices reachable from the rack's nodes through a
node selector on the rack label) and claims holding the busy GPUs; ``inventory(objs)`` and
``index(objs)`` give the core's view. ``gang(...)`` builds a PodGroup with its pods (JSON) and
``group_request(...)`` a ``GroupRequest`` straight from specs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_solver import model
from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from tests import builders as b

Obj = dict[str, Any]

RACK_LABEL = "topology.example.com/rack"
FABRIC_DRIVER = "fabric.example.com"
FABRIC_CLASS = "fabric.example.com"
PODGROUP_API = "scheduling.k8s.io/v1beta1"


@dataclass(frozen=True)
class Node:
    gpus: int = 8
    busy: int = 0
    """GPUs already allocated (gpu-0.. of the node)."""
    cpu: str = "64"
    memory: str = "256Gi"


@dataclass(frozen=True)
class Rack:
    name: str
    nodes: Sequence[Node] = field(default_factory=lambda: [Node()])
    fabric: int = 0
    """Fabric devices of the rack (0: no fabric slice)."""


def node_name(rack: str, i: int) -> str:
    return f"{rack}-n{i}"


def fabric_slice(rack: str, count: int) -> Obj:
    return {
        "apiVersion": b.RESOURCE_V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{rack}-fabric"},
        "spec": {
            "driver": FABRIC_DRIVER,
            "pool": {"name": f"{rack}-fabric", "generation": 1, "resourceSliceCount": 1},
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": RACK_LABEL, "operator": "In", "values": [rack]}]}]},
            "devices": [{"name": f"link-{i}", "attributes": {"rack": {"string": rack}}} for i in range(count)],
        },
    }


def busy_claim(node: str, gpus: int) -> Obj:
    doc = b.claim(f"busy-{node}", cls=b.CLASS).request("gpu", count=gpus).obj()
    doc["status"] = {
        "allocation": {
            "devices": {"results": [b.result("gpu", f"gpu-{i}", driver=b.DRIVER, pool=node) for i in range(gpus)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }
    }
    return doc


def cluster(racks: Sequence[Rack]) -> list[Obj]:
    objs: list[Obj] = [b.device_class(), b.device_class(FABRIC_CLASS, driver=FABRIC_DRIVER)]
    for rack in racks:
        for i, spec in enumerate(rack.nodes):
            name = node_name(rack.name, i)
            objs.append(b.node(name, cpu=spec.cpu, memory=spec.memory, labels={RACK_LABEL: rack.name}))
            if spec.gpus:
                objs.append(b.gpu_slice(name, count=spec.gpus))
            if spec.busy:
                objs.append(busy_claim(name, spec.busy))
        if rack.fabric:
            objs.append(fabric_slice(rack.name, rack.fabric))
    return objs


def decode(objs: Sequence[Obj]) -> list[o.TypedObject]:
    return [decode_object(x) for x in objs]


def inventory(objs: Sequence[Obj]) -> model.Inventory:
    return model.Inventory.from_objects(decode(objs))


def index(objs: Sequence[Obj]) -> model.NodeIndex:
    return model.NodeIndex(inventory(objs))


def gpu_claim(name: str, count: int, *, ns: str = b.NS) -> o.ResourceClaim:
    claim = decode_object(b.claim(name, ns=ns, cls=b.CLASS).request("gpu", count=count).obj())
    assert isinstance(claim, o.ResourceClaim)
    return claim


def fabric_claim(name: str, *, ns: str = b.NS, count: int = 1) -> o.ResourceClaim:
    claim = decode_object(b.claim(name, ns=ns, cls=FABRIC_CLASS).request("link", count=count).obj())
    assert isinstance(claim, o.ResourceClaim)
    return claim


def group_request(
    objs: Sequence[Obj],
    gpus: Sequence[int],
    *,
    min_count: int | None = None,
    key: str = RACK_LABEL,
    shared: bool = False,
    path: model.GroupPath = "auto",
    policy: str = "",
    cpu_millis: int = 0,
    rooms: bool = True,
    time_limit: float | None = 30.0,
    name: str = "default/train",
) -> model.GroupRequest:
    """A group of pods ``worker-<i>`` each with a claim for ``gpus[i]`` GPUs (none for 0),
    optionally all sharing one fabric claim ``train-fabric``."""
    typed = decode(objs)
    inv = model.Inventory.from_objects(typed)
    idx = model.NodeIndex(inv)
    fabric = fabric_claim("train-fabric") if shared else None
    pods = tuple(
        model.GroupPod(
            name=f"worker-{i}",
            claims=(gpu_claim(f"worker-{i}-gpu", n),) if n else (),
            shared=(fabric.ref,) if fabric is not None else (),
            cpu_millis=cpu_millis,
        )
        for i, n in enumerate(gpus)
    )
    room = {n.name: model.node_room(n.to_api()) for n in inv.nodes} if rooms else {}
    return model.GroupRequest(
        name=name,
        pods=pods,
        index=idx,
        shared_claims=(fabric,) if fabric is not None else (),
        min_count=len(gpus) if min_count is None else min_count,
        topology_key=key,
        rooms=room,
        policy=policy,
        path=path,
        time_limit=time_limit,
    )


def podgroup(name: str, min_count: int, *, ns: str = b.NS, key: str = "", claims: Sequence[Obj] = ()) -> Obj:
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    if claims:
        spec["resourceClaims"] = list(claims)
    return {"apiVersion": PODGROUP_API, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def member(name: str, group: str, *, gpus_template: str = "", shared: Sequence[Obj] = (), cpu: str = "1", ns: str = b.NS,
           scheduler: str = "dra-solver") -> Obj:
    """A pod of the group: ``gpus_template`` names its own template claim ``gpu``; ``shared``
    are PodGroup claim entries it uses."""
    pod = b.pod(name, ns=ns, templates={"gpu": gpus_template} if gpus_template else None, cpu=cpu, scheduler=scheduler)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    if shared:
        pod["spec"].setdefault("resourceClaims", []).extend(dict(s) for s in shared)
    return pod
