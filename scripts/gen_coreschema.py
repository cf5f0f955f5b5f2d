"""Write ``model/coreschema.py``: the field schema of the documents dra-solver reads without a
typed model (Pod, PodGroup) or with an opaque one (Node's spec and status), and of ``List``.

Run with the project's virtualenv: ``.venv/bin/python scripts/gen_coreschema.py``. The schema
comes from the kubernetes Python client's models (``openapi_types``/``attribute_map``, walked
recursively from V1Pod, V1Node, V1beta1PodGroup and V1ListMeta), which are generated from the
API server's OpenAPI: every field Kubernetes serves, named as in JSON. The client must be the
Kubernetes release the project follows (37.x for v1.37); :data:`OVERRIDES` records where the
schema differs from the client's, each with the upstream Go type it comes from.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes.client as client

EXPECTED_CLIENT = "37."
"""Major version of the client that matches the Kubernetes minor the project follows (v1.37)."""

ROOTS = {"Pod": "V1Pod", "Node": "V1Node", "PodGroup": "V1beta1PodGroup", "ListMeta": "V1ListMeta"}

SCALARS = {"str": "string", "datetime": "string", "date": "string", "bytes": "string", "int": "integer",
           "float": "number", "bool": "boolean", "object": "any"}

EMPTY = "Empty"
"""A Go struct without fields (``BasicSchedulingPolicy``...): present or not, any key is unknown."""

OVERRIDES: dict[tuple[str, str], str] = {
    # staging/src/k8s.io/api/scheduling/v1beta1/types.go: the client types these empty structs
    # as free-form objects; the API server's strict decoder rejects any field in them.
    ("PodGroupSchedulingPolicy", "basic"): EMPTY,  # BasicSchedulingPolicy struct{}
    ("DisruptionMode", "single"): EMPTY,  # SingleDisruptionMode struct{}
    ("DisruptionMode", "all"): EMPTY,  # AllDisruptionMode struct{}
    # int32 in the Go types (the client says only "int").
    ("GangSchedulingPolicy", "minCount"): "int32",
    ("PodGroupSpec", "priority"): "int32",
}

QUANTITIES = {
    # resource.Quantity and ResourceList fields in the Go types (the client says only "str"):
    # written as strings or bare numbers.
    ("ContainerStatus", "allocatedResources"), ("EmptyDirVolumeSource", "sizeLimit"),
    ("NodeAllocatableMappedResources", "quantity"), ("NodeStatus", "allocatable"), ("NodeStatus", "capacity"),
    ("PodSpec", "overhead"), ("PodStatus", "allocatedResources"), ("ResourceFieldSelector", "divisor"),
    ("ResourceRequirements", "limits"), ("ResourceRequirements", "requests"),
    ("VolumeResourceRequirements", "limits"), ("VolumeResourceRequirements", "requests"),
}

ADDED: dict[str, dict[str, str]] = {
    # Fields of Kubernetes v1.37 the client does not have (none with client 37.0.2): add them
    # here as ``"Type": {"jsonName": "spec"}``, with the Go type they come from.
}

_PREFIX = re.compile(r"^(?:CoreV1|V1beta1|V1beta2|V1alpha1|V1alpha2|V1alpha3|V1)(?=[A-Z])")


def short(name: str) -> str:
    return _PREFIX.sub("", name)


def spec_of(t: str, types: dict[str, dict[str, str]], origin: dict[str, str]) -> str:
    if t in SCALARS:
        return SCALARS[t]
    if t.startswith("List[") and t.endswith("]"):
        return "[]" + spec_of(t[5:-1], types, origin)
    if t.startswith("Dict[str, ") and t.endswith("]"):
        return "map[" + spec_of(t[10:-1], types, origin) + "]"
    walk(t, types, origin)
    return short(t)


def walk(class_name: str, types: dict[str, dict[str, str]], origin: dict[str, str]) -> None:
    name = short(class_name)
    if name in origin:
        if origin[name] != class_name:
            sys.exit(f"{class_name} and {origin[name]} would both be {name}")
        return
    origin[name] = class_name
    cls: Any = getattr(client, class_name)
    fields: dict[str, str] = {}
    types[name] = fields
    for attr, t in cls.openapi_types.items():
        json_name = cls.attribute_map[attr]
        spec = OVERRIDES.get((name, json_name)) or spec_of(t, types, origin)
        if (name, json_name) in QUANTITIES:
            spec = spec.replace("string", "quantity")
        fields[json_name] = spec


def main() -> None:
    if not kubernetes.__version__.startswith(EXPECTED_CLIENT):
        sys.exit(f"kubernetes client {kubernetes.__version__}: expected {EXPECTED_CLIENT}x (Kubernetes v1.37)")
    types: dict[str, dict[str, str]] = {}
    origin: dict[str, str] = {}
    for root in ROOTS.values():
        walk(root, types, origin)
    types[EMPTY] = {}
    for name, fields in ADDED.items():
        types.setdefault(name, {}).update(fields)
    missing = {key for key in (*OVERRIDES, *QUANTITIES) if key[0] not in types or key[1] not in types[key[0]]}
    if missing:
        sys.exit(f"overrides for fields the client does not have: {sorted(missing)}")
    out = [
        '"""Field schemas of the objects read as documents: Pod (core/v1), PodGroup',
        "(scheduling.k8s.io/v1beta1), Node (core/v1; its typed model keeps spec and status opaque)",
        "and a List's metadata, for strict field validation and type checks (``model.decode``).",
        "",
        f"GENERATED by scripts/gen_coreschema.py from the kubernetes Python client {kubernetes.__version__}",
        "(Kubernetes v1.37), with the script's OVERRIDES from the Go types; do not edit by hand.",
        "",
        "``TYPES[name]`` maps each JSON field to its type: ``string``, ``quantity`` (a string or a",
        "number), ``integer`` (int64), ``int32``, ``number``, ``boolean``, ``any`` (free-form: IntOrString, FieldsV1), ``[]T``",
        "(a list), ``map[T]`` (string keys), or the name of another entry (``Empty``: no fields).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
    ]
    out.append("TYPES: dict[str, dict[str, str]] = {")
    for name in sorted(types):
        fields = types[name]
        body = ", ".join(f'"{k}": "{v}"' for k, v in fields.items())
        out.append(f'    "{name}": {{{body}}},')
    out.append("}")
    out.append("")
    target = Path(__file__).resolve().parent.parent / "model" / "coreschema.py"
    target.write_text("\n".join(out))
    print(f"wrote {target}: {len(types)} types")


if __name__ == "__main__":
    main()
