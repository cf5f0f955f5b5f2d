"""The simulated devices the DaemonSet publishes fit the DeviceClasses and example claims.

The ConfigMap in deploy/base is read by the kubelet plugin's own config parser, turned into the
devices the plugin would publish on a node (kubeletplugin.discovery.build_devices), laid out as
ResourceSlices, and then every example ResourceClaimTemplate in deploy/examples is allocated on
that node by the real allocator: each must fit, except the one meant not to. So a renamed
attribute, profile or driver breaks this test, not the demo in someone's cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from tests.deploy.manifests import find, overlay, rendered

NODE = "worker-1"
SLICE_LIMIT = 64  # devices per slice when any device consumes counters (API limit)


def _driver() -> str:
    daemonset = find(overlay("production"), "DaemonSet", "dra-solver-kubelet-plugin")
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    (driver,) = [str(a).split("=", 1)[1] for a in args if str(a).startswith("--driver=")]
    return driver


def _config_text() -> str:
    config_map = find(overlay("production"), "ConfigMap", "dra-solver-simulated-devices")
    (text,) = config_map["data"].values()
    return str(text)


def node_objects(driver: str) -> list[dict[str, Any]]:
    """What the plugin publishes for one node, as API objects: the Node and its slices."""
    import yaml

    from dra_solver.kubeletplugin import discovery, simconfig

    config = simconfig.parse_config(yaml.safe_load(_config_text()), source="devices.yaml")
    devices = discovery.build_devices(config, node=NODE)
    api_devices = [d.to_api() for d in devices.devices]
    chunks = [api_devices[i : i + SLICE_LIMIT] for i in range(0, len(api_devices), SLICE_LIMIT)]
    counter_slices = 1 if devices.counter_sets else 0
    total = counter_slices + len(chunks)

    def slice_(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-{name}"},
            "spec": {
                "driver": driver,
                "nodeName": NODE,
                "pool": {"name": NODE, "generation": 1, "resourceSliceCount": total},
                **spec,
            },
        }

    objects = [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
    ]
    if devices.counter_sets:
        objects.append(
            slice_("counters", {"sharedCounters": [c.to_api() for c in devices.counter_sets]})
        )
    for i, chunk in enumerate(chunks):
        objects.append(slice_(f"devices-{i}", {"devices": chunk}))
    return objects


def _claims() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for template in rendered("deploy/examples"):
        if template["kind"] != "ResourceClaimTemplate":
            continue
        name = template["metadata"]["name"]
        claim = b.claim(f"pod-{name}", ns="dra-solver-demo", uid=f"uid-{name}", **template["spec"]["spec"]["devices"]).obj()
        out.append((name, claim))
    return out


def test_config_map_is_a_valid_simulated_device_config() -> None:
    import yaml

    from dra_solver.kubeletplugin import discovery, simconfig

    config = simconfig.parse_config(yaml.safe_load(_config_text()), source="devices.yaml")
    devices = discovery.build_devices(config, node=NODE)
    kinds = {d.kind for d in devices.devices}
    assert kinds == {"gpu", "mig", "nic"}, "the examples need GPUs, partitions and NICs"


@pytest.mark.parametrize(("name", "claim"), _claims(), ids=[n for n, _ in _claims()])
def test_example_claim_allocates_on_a_simulated_node(name: str, claim: dict[str, Any]) -> None:
    from dra_solver.model import allocate, decode
    from dra_solver.model.allocation import AllocationRequest, Inventory
    from dra_solver.model.cel import CelEnvironment

    driver = _driver()
    classes = [o for o in overlay("production") if o["kind"] == "DeviceClass"]
    objects = decode.decode_all([*classes, *node_objects(driver)], source="deploy")
    inventory = Inventory.from_objects(objects)
    (typed_claim,) = decode.decode_all([claim], source=f"deploy/examples {name}")
    request = AllocationRequest(
        claims=(typed_claim,),  # type: ignore[arg-type]
        node=inventory.node(NODE),
        inventory=inventory,
        time_limit=20.0,
    )
    outcome = allocate(request, cel=CelEnvironment())
    if name == "too-many-gpus":
        assert not outcome.allocated, "this example is meant not to fit"
    else:
        assert outcome.allocated, f"{name} does not fit on a simulated node: {outcome.reason}"
