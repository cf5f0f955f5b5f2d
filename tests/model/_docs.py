"""Builders for API objects in their JSON form, shared by the decoding and validation tests.

Each builder returns a fresh, valid object; tests change one field with :func:`edit` and check
what decoding or validation says about it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from tests import builders

Doc = dict[str, Any]

RESOURCE_V1 = "resource.k8s.io/v1"

DELETE: Any = object()
"""Marks a field to remove (``edit``) or leave out (builders)."""


CLAIM = builders.claim("c1", cls=builders.CLASS).request("gpu", count=None)
"""The valid claim the decoding tests edit (``CLAIM.devices(constraints=[...]).obj()``)."""


def template() -> Doc:
    return CLAIM.named("t1").template(labels={"app": "demo"})


def device(name: str = "gpu-0", **fields: Any) -> Doc:
    dev: Doc = {
        "name": name,
        "attributes": {"model": {"string": "A100"}, "driverVersion": {"version": "1.2.3"}},
        "capacity": {"memory": {"value": "40Gi"}},
    }
    dev.update(fields)
    return dev


def resource_slice(devs: list[Doc] | None = None, **spec: Any) -> Doc:
    """A node-local slice; ``spec`` fields override (``DELETE`` removes one, e.g. devices)."""
    body: Doc = {
        "driver": "gpu.example.com",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-1",
        "devices": [device()] if devs is None else devs,
    }
    body.update(spec)
    body = {k: v for k, v in body.items() if v is not DELETE}
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-gpu.example.com"},
        "spec": body,
    }


def device_class() -> Doc:
    return builders.device_class()


def taint_rule() -> Doc:
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance"},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"},
            "taint": {"key": "example.com/maintenance", "value": "planned", "effect": "NoExecute"},
        },
    }


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _walk(doc: Doc, path: str) -> tuple[Any, str | int]:
    steps: list[str | int] = [int(i) if i else name for name, i in _STEP.findall(path)]
    node: Any = doc
    for step in steps[:-1]:
        node = node[step] if isinstance(step, int) else node.setdefault(step, {})
    return node, steps[-1]


def edit(doc: Doc, *changes: tuple[str, Any]) -> Doc:
    """A copy of ``doc`` with each ``(dotted.path[0].field, value)`` set; ``DELETE`` removes it."""
    out = copy.deepcopy(doc)
    for path, value in changes:
        node, last = _walk(out, path)
        if value is DELETE:
            del node[last]
        else:
            node[last] = copy.deepcopy(value)
    return out


def changed(doc: Doc, fn: Callable[[Doc], None]) -> Doc:
    """A copy of ``doc`` after ``fn`` changed it in place (for edits ``edit`` cannot express)."""
    out = copy.deepcopy(doc)
    fn(out)
    return out
