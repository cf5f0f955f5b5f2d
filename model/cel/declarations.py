"""Declarations of the DRA CEL environment: the ``device`` variable and every function.

The type checker of the cel-expr-python engine is configured from this data (an env config
document, see ``checker_config``), so what compiles and what each call returns follow the
signatures upstream declares: the Kubernetes base environment (strings v2, cross-type numeric
comparisons, quantity, semver, lists, regex, sets) plus DRA's ``includes`` and the
feature-gated ``device`` type. Overload ids are upstream's, because cost estimation keys on
them.

Quantity, Semver and the device itself are protobuf messages in a per-environment descriptor
pool (``kubernetes_types``); CEL code can only observe them through the functions above.
"""

from __future__ import annotations

import json
from typing import Final

from google.protobuf import descriptor_pb2

from dra_solver.model.cel.api import CelFeatures

__all__ = [
    "DEVICE_TYPE",
    "QUANTITY_FIELD",
    "QUANTITY_TYPE",
    "SEMVER_FIELD",
    "SEMVER_TYPE",
    "checker_config",
    "kubernetes_types",
]

QUANTITY_TYPE: Final = "kubernetes.Quantity"
SEMVER_TYPE: Final = "kubernetes.Semver"
DEVICE_TYPE: Final = "kubernetes.DRADevice"
QUANTITY_FIELD: Final = "encoded"
SEMVER_FIELD: Final = "version"
HIDDEN_TYPES: Final = frozenset({QUANTITY_TYPE, SEMVER_TYPE, DEVICE_TYPE})


def kubernetes_types(features: CelFeatures) -> descriptor_pb2.FileDescriptorProto:
    """The message types behind ``kubernetes.Quantity``, ``kubernetes.Semver`` and the
    ``device`` variable (whose fields depend on the ConsumableCapacity gate)."""
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="drasolver/kubernetes_cel.proto", package="kubernetes", syntax="proto3")
    quantity = fdp.message_type.add(name="Quantity")
    quantity.field.add(name=QUANTITY_FIELD, number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    semver = fdp.message_type.add(name="Semver")
    semver.field.add(name=SEMVER_FIELD, number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    device = fdp.message_type.add(name="DRADevice")
    device.field.add(name="driver", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    if features.consumable_capacity:
        device.field.add(name="allowMultipleAllocations", number=2, type=f.TYPE_BOOL, label=f.LABEL_OPTIONAL)
    return fdp


# --- signatures ----------------------------------------------------------------------------

_Type = dict[str, object]


def _t(name: str, *params: _Type) -> _Type:
    t: _Type = {"type_name": name}
    if params:
        t["params"] = list(params)
    return t


def _param(name: str) -> _Type:
    return {"type_name": name, "is_type_param": True}


INT = _t("int")
UINT = _t("uint")
DOUBLE = _t("double")
STRING = _t("string")
BYTES = _t("bytes")
BOOL = _t("bool")
DYN = _t("dyn")
TIMESTAMP = _t("timestamp")
DURATION = _t("duration")
Q = _t(QUANTITY_TYPE)
S = _t(SEMVER_TYPE)


def _list(elem: _Type) -> _Type:
    return _t("list", elem)


def _overload(oid: str, args: list[_Type], result: _Type, *, target: _Type | None = None) -> dict[str, object]:
    overload: dict[str, object] = {"id": oid, "args": args, "return": result}
    if target is not None:
        overload["target"] = target
    return overload


_COMPARABLE: Final = (
    ("int", INT), ("uint", UINT), ("double", DOUBLE), ("bool", BOOL),
    ("duration", DURATION), ("timestamp", TIMESTAMP), ("string", STRING), ("bytes", BYTES),
)
_SUMMABLE: Final = (("int", INT), ("uint", UINT), ("double", DOUBLE), ("duration", DURATION))
_ORDERING: Final = (("_<_", "less"), ("_<=_", "less_equals"), ("_>_", "greater"), ("_>=_", "greater_equals"))
_ORDERED_SAME: Final = (
    ("int64", INT), ("uint64", UINT), ("double", DOUBLE), ("string", STRING), ("bytes", BYTES),
    ("bool", BOOL), ("timestamp", TIMESTAMP), ("duration", DURATION),
)
_NUMERIC: Final = (("int64", INT), ("uint64", UINT), ("double", DOUBLE))


def _ordering() -> list[dict[str, object]]:
    """``<``, ``<=``, ``>``, ``>=`` with Kubernetes' cross-type numeric comparisons."""
    functions: list[dict[str, object]] = []
    for op, name in _ORDERING:
        overloads = [_overload(f"{name}_{tid}", [t, t], BOOL) for tid, t in _ORDERED_SAME]
        overloads += [
            _overload(f"{name}_{a}_{b}", [ta, tb], BOOL)
            for a, ta in _NUMERIC
            for b, tb in _NUMERIC
            if a != b
        ]
        functions.append({"name": op, "overloads": overloads})
    return functions


def _strings() -> list[dict[str, object]]:
    """cel-go's strings extension, version 2 (what the Kubernetes base environment uses)."""
    a = _param("A")
    return [
        {"name": "charAt", "overloads": [_overload("string_char_at_int", [INT], STRING, target=STRING)]},
        {"name": "indexOf", "overloads": [
            _overload("string_index_of_string", [STRING], INT, target=STRING),
            _overload("string_index_of_string_int", [STRING, INT], INT, target=STRING),
            _overload("list_a_index_of_int", [a], INT, target=_list(a)),
        ]},
        {"name": "lastIndexOf", "overloads": [
            _overload("string_last_index_of_string", [STRING], INT, target=STRING),
            _overload("string_last_index_of_string_int", [STRING, INT], INT, target=STRING),
            _overload("list_a_last_index_of_int", [a], INT, target=_list(a)),
        ]},
        {"name": "lowerAscii", "overloads": [_overload("string_lower_ascii", [], STRING, target=STRING)]},
        {"name": "upperAscii", "overloads": [_overload("string_upper_ascii", [], STRING, target=STRING)]},
        {"name": "replace", "overloads": [
            _overload("string_replace_string_string", [STRING, STRING], STRING, target=STRING),
            _overload("string_replace_string_string_int", [STRING, STRING, INT], STRING, target=STRING),
        ]},
        {"name": "split", "overloads": [
            _overload("string_split_string", [STRING], _list(STRING), target=STRING),
            _overload("string_split_string_int", [STRING, INT], _list(STRING), target=STRING),
        ]},
        {"name": "substring", "overloads": [
            _overload("string_substring_int", [INT], STRING, target=STRING),
            _overload("string_substring_int_int", [INT, INT], STRING, target=STRING),
        ]},
        {"name": "trim", "overloads": [_overload("string_trim", [], STRING, target=STRING)]},
        {"name": "format", "overloads": [_overload("string_format", [_list(DYN)], STRING, target=STRING)]},
        {"name": "strings.quote", "overloads": [_overload("strings_quote", [STRING], STRING)]},
        {"name": "join", "overloads": [
            _overload("list_join", [], STRING, target=_list(STRING)),
            _overload("list_join_string", [STRING], STRING, target=_list(STRING)),
        ]},
    ]


def _kubernetes() -> list[dict[str, object]]:
    """Quantity, semver, lists, regex (k8s.io/apiserver/pkg/cel/library) and sets (cel-go)."""
    t = _param("T")
    functions: list[dict[str, object]] = [
        {"name": "quantity", "overloads": [_overload("string_to_quantity", [STRING], Q)]},
        {"name": "isQuantity", "overloads": [_overload("is_quantity_string", [STRING], BOOL)]},
        # upstream declares sign as a global function, not a method
        {"name": "sign", "overloads": [_overload("quantity_sign", [Q], INT)]},
        {"name": "isGreaterThan", "overloads": [
            _overload("quantity_is_greater_than", [Q], BOOL, target=Q),
            _overload("semver_is_greater_than", [S], BOOL, target=S),
        ]},
        {"name": "isLessThan", "overloads": [
            _overload("quantity_is_less_than", [Q], BOOL, target=Q),
            _overload("semver_is_less_than", [S], BOOL, target=S),
        ]},
        {"name": "compareTo", "overloads": [
            _overload("quantity_compare_to", [Q], INT, target=Q),
            _overload("semver_compare_to", [S], INT, target=S),
        ]},
        {"name": "asApproximateFloat", "overloads": [_overload("quantity_get_float", [], DOUBLE, target=Q)]},
        {"name": "asInteger", "overloads": [_overload("quantity_get_int", [], INT, target=Q)]},
        {"name": "isInteger", "overloads": [_overload("quantity_is_integer", [], BOOL, target=Q)]},
        {"name": "add", "overloads": [
            _overload("quantity_add", [Q], Q, target=Q),
            _overload("quantity_add_int", [INT], Q, target=Q),
        ]},
        {"name": "sub", "overloads": [
            _overload("quantity_sub", [Q], Q, target=Q),
            _overload("quantity_sub_int", [INT], Q, target=Q),
        ]},
        {"name": "semver", "overloads": [
            _overload("string_to_semver", [STRING], S),
            _overload("string_bool_to_semver", [STRING, BOOL], S),
        ]},
        {"name": "isSemver", "overloads": [
            _overload("is_semver_string", [STRING], BOOL),
            _overload("is_semver_string_bool", [STRING, BOOL], BOOL),
        ]},
        {"name": "major", "overloads": [_overload("semver_major", [], INT, target=S)]},
        {"name": "minor", "overloads": [_overload("semver_minor", [], INT, target=S)]},
        {"name": "patch", "overloads": [_overload("semver_patch", [], INT, target=S)]},
        {"name": "isSorted", "overloads": [
            _overload(f"list_{n}_is_sorted_bool", [], BOOL, target=_list(ty)) for n, ty in _COMPARABLE
        ]},
        {"name": "sum", "overloads": [
            _overload(f"list_{n}_sum_{n}", [], ty, target=_list(ty)) for n, ty in _SUMMABLE
        ]},
        {"name": "max", "overloads": [
            _overload(f"list_{n}_max_{n}", [], ty, target=_list(ty)) for n, ty in _COMPARABLE
        ]},
        {"name": "min", "overloads": [
            _overload(f"list_{n}_min_{n}", [], ty, target=_list(ty)) for n, ty in _COMPARABLE
        ]},
        {"name": "find", "overloads": [_overload("string_find_string", [STRING], STRING, target=STRING)]},
        {"name": "findAll", "overloads": [
            _overload("string_find_all_string", [STRING], _list(STRING), target=STRING),
            _overload("string_find_all_string_int", [STRING, INT], _list(STRING), target=STRING),
        ]},
        {"name": "sets.contains", "overloads": [_overload("list_sets_contains_list", [_list(t), _list(t)], BOOL)]},
        {"name": "sets.equivalent", "overloads": [_overload("list_sets_equivalent_list", [_list(t), _list(t)], BOOL)]},
        {"name": "sets.intersects", "overloads": [_overload("list_sets_intersects_list", [_list(t), _list(t)], BOOL)]},
    ]
    return functions


def checker_config(features: CelFeatures) -> str:
    """The env config document of the type checker (JSON, which is also YAML)."""
    functions = [*_ordering(), *_strings(), *_kubernetes()]
    if features.list_type_attributes:
        functions.append({"name": "includes", "overloads": [
            _overload("dra_includes_dyn_dyn", [DYN], BOOL, target=DYN),
        ]})
    config = {
        "stdlib": {"exclude_functions": [{"name": op} for op, _ in _ORDERING]},
        "functions": functions,
    }
    return json.dumps(config, sort_keys=True)
