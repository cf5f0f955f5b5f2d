"""Typed (decoded) nodes, slices, classes and taint rules for the allocation tests, named like
upstream's allocator test helpers. Claims, requests and the shared names: tests/builders.py."""

from __future__ import annotations

from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from tests.builders import CLASS_A, DRIVER_A, NODE_1, POOL_1


def node(name: str = NODE_1, **labels: str) -> o.Node:
    obj = decode_object(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    )
    assert isinstance(obj, o.Node)
    return obj


def device(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def slice_(
    name: str,
    *,
    pool: str = POOL_1,
    driver: str = DRIVER_A,
    node_name: str | None = NODE_1,
    devices: list[dict[str, Any]] | None = None,
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> o.ResourceSlice:
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": devices if devices is not None else [device("device-1")],
        **spec,
    }
    if node_name is not None and not any(
        k in spec for k in ("allNodes", "nodeSelector", "perDeviceNodeSelection")
    ):
        body["nodeName"] = node_name
    obj = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": body,
        }
    )
    assert isinstance(obj, o.ResourceSlice)
    return obj


def device_class(name: str = CLASS_A, driver: str = DRIVER_A, **spec: Any) -> o.DeviceClass:
    body: dict[str, Any] = {
        "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}],
        **spec,
    }
    obj = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": body,
        }
    )
    assert isinstance(obj, o.DeviceClass)
    return obj


def taint_rule(
    name: str, *, effect: str = "NoSchedule", key: str = "k", value: str = "v", **selector: str
) -> o.DeviceTaintRule:
    obj = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1alpha3",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {
                "deviceSelector": selector,
                "taint": {"key": key, "value": value, "effect": effect},
            },
        }
    )
    assert isinstance(obj, o.DeviceTaintRule)
    return obj
