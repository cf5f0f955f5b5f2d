"""Worst-case cost of a DRA CEL selector, computed as cel-go and the API server compute it.

The API server refuses a selector whose estimated cost exceeds
``CELSelectorExpressionMaxCost`` ("too complex, exceeds cost limit"), and the allocator stops
an evaluation whose actual cost exceeds it. This module re-states cel-go's ``checker/cost.go``
(v0.27) together with the Kubernetes library estimator (``k8s.io/apiserver/pkg/cel/library``),
cel-go's ``sets`` estimator and DRA's size estimator and ``includes`` cost
(``k8s.io/dynamic-resource-allocation/cel``): the same units, size bounds and rounding.

Two modes share one walk:

* static (:func:`estimate_cost`): sizes come from the declared bounds of the ``device``
  variable (63-character driver names, 32 attributes per device, 64-character values, ...)
  and anything unbounded counts as 2^64-1, exactly like upstream's ``MaxCost``;
* per device (:func:`device_cost_bound`): sizes come from one device's actual attributes,
  and an unbounded size is capped by the largest value that can exist in that evaluation.
  This is an upper bound on what upstream's runtime cost tracker would count (it ignores
  short-circuiting), used to enforce the runtime cost limit without a cost-tracking engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from dra_solver.model.cel.ast import (
    Call,
    CelType,
    CheckedAst,
    Comprehension,
    Const,
    CreateList,
    CreateStruct,
    Expr,
    Ident,
    Select,
)

__all__ = ["DeviceProfile", "device_cost_bound", "estimate_cost"]

MAX: Final = (1 << 64) - 1
_TWO_TO_64: Final = float(1 << 64)

STRING_TRAVERSAL_COST_FACTOR: Final = 0.1
REGEX_STRING_LENGTH_COST_FACTOR: Final = 0.25
SELECT_AND_IDENT_COST: Final = 1
LIST_CREATE_BASE_COST: Final = 10
MAP_CREATE_BASE_COST: Final = 30
STRUCT_CREATE_BASE_COST: Final = 40

# resourceapi limits that bound the ``device`` variable (k8s.io/api/resource/v1).
DRIVER_NAME_MAX_LENGTH: Final = 63
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
DEVICE_MAX_ID_LENGTH: Final = 32
ATTRIBUTES_AND_CAPACITIES_PER_DEVICE: Final = 32
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH: Final = 64
ATTRIBUTE_VALUES_PER_DEVICE: Final = 48
# Attribute values may be strings or (with ListTypeAttributes) lists: the larger bound applies.
ATTRIBUTE_MAX_ELEMENTS: Final = max(DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH, ATTRIBUTE_VALUES_PER_DEVICE)

_QUALIFIED_DEVICE_FIELDS: Final = {"device.attributes": "attributes", "device.capacity": "capacity"}
_ACCUMULATORS: Final = frozenset({"@result", "__result__"})


def _add(x: int, y: int) -> int:
    return min(x + y, MAX)


def _mul(x: int, y: int) -> int:
    return min(x * y, MAX)


def _mul_factor(x: int, factor: float) -> int:
    xf = float(x)
    if xf > 0 and factor > 0 and xf > _TWO_TO_64 / factor:
        return MAX
    ceil = math.ceil(xf * factor)
    return MAX if ceil >= _TWO_TO_64 else int(ceil)


@dataclass(frozen=True, slots=True)
class Range:
    """A [lo, hi] estimate of a size or a cost (cel-go's SizeEstimate/CostEstimate)."""

    lo: int
    hi: int

    def add(self, other: Range) -> Range:
        return Range(_add(self.lo, other.lo), _add(self.hi, other.hi))

    def mul(self, other: Range) -> Range:
        return Range(_mul(self.lo, other.lo), _mul(self.hi, other.hi))

    def factor(self, f: float) -> Range:
        return Range(_mul_factor(self.lo, f), _mul_factor(self.hi, f))

    def union(self, other: Range) -> Range:
        return Range(min(self.lo, other.lo), max(self.hi, other.hi))


ZERO: Final = Range(0, 0)
ONE: Final = Range(1, 1)
UNKNOWN: Final = Range(0, MAX)


def _fixed(n: int) -> Range:
    return Range(n, n)


@dataclass(frozen=True, slots=True)
class _Entry:
    """Key and value sizes of a list or map literal (cel-go's entrySizeEstimate)."""

    kind: str  # "list" or "map"
    key: Range
    val: Range

    def union(self, other: _Entry | None) -> _Entry | None:
        if other is None:
            return None
        return _Entry(self.kind, self.key.union(other.key), self.val.union(other.val))


@dataclass(slots=True)
class _LocalVar:
    path: tuple[str, ...] | None
    size: Range | None
    entry: _Entry | None


# --- size oracles --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Decl:
    """A node of the declared ``device`` type with its maximum size (upstream DeclType)."""

    max_elements: int
    fields: Mapping[str, _Decl] = field(default_factory=dict)
    key: _Decl | None = None
    elem: _Decl | None = None
    is_attribute: bool = False


_ATTRIBUTE: Final = _Decl(ATTRIBUTE_MAX_ELEMENTS, is_attribute=True)
_QUANTITY: Final = _Decl(0)
_DOMAIN: Final = _Decl(DEVICE_MAX_DOMAIN_LENGTH)
_ID: Final = _Decl(DEVICE_MAX_ID_LENGTH)
_DEVICE: Final = _Decl(
    0,
    fields={
        "driver": _Decl(DRIVER_NAME_MAX_LENGTH),
        "allowMultipleAllocations": _Decl(1),
        "attributes": _Decl(
            ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
            key=_DOMAIN,
            elem=_Decl(ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, key=_ID, elem=_ATTRIBUTE),
        ),
        "capacity": _Decl(
            ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
            key=_DOMAIN,
            elem=_Decl(ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, key=_ID, elem=_QUANTITY),
        ),
    },
)


def _declared_size(path: tuple[str, ...]) -> Range | None:
    """DRA's ``sizeEstimator``: walk the declared device type along a field path."""
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name == "@keys":
            if node.key is None:
                return None
            node = node.key
        elif name in node.fields:
            node = node.fields[name]
        elif node.elem is _ATTRIBUTE:
            # Every attribute of a domain shares the attribute value bound, whatever its name.
            node = _ATTRIBUTE
        else:
            return None
    return Range(0, node.max_elements)


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """Actual sizes of one device, for the per-device bound (all maxima, so a bound)."""

    driver: int
    attribute_domains: int
    attribute_domain_length: int
    attributes_per_domain: int
    attribute_id_length: int
    attribute_value: int
    attribute_item: int
    capacity_domains: int
    capacity_domain_length: int
    capacities_per_domain: int
    capacity_id_length: int

    def size(self, path: tuple[str, ...]) -> Range | None:
        if not path or path[0] != "device":
            return None
        rest = path[1:]
        if rest == ("driver",):
            return _fixed(self.driver)
        if rest == ("allowMultipleAllocations",):
            return ONE
        if not rest or rest[0] not in ("attributes", "capacity"):
            return None
        attributes = rest[0] == "attributes"
        parts = rest[1:]
        if not parts:
            return Range(0, self.attribute_domains if attributes else self.capacity_domains)
        if parts[0] == "@keys":
            return Range(0, self.attribute_domain_length if attributes else self.capacity_domain_length)
        parts = parts[1:]  # "@values" or a domain selected by name: the domain's map
        if not parts:
            return Range(0, self.attributes_per_domain if attributes else self.capacities_per_domain)
        if parts[0] == "@keys":
            return Range(0, self.attribute_id_length if attributes else self.capacity_id_length)
        parts = parts[1:]  # one attribute or capacity value
        if not parts:
            return Range(0, self.attribute_value) if attributes else ONE
        if attributes and parts == ("@items",):
            return Range(0, self.attribute_item)
        return None


# --- the estimator -------------------------------------------------------------------------


class _Coster:
    def __init__(
        self,
        ast: CheckedAst,
        *,
        sizes: Callable[[tuple[str, ...]], Range | None],
        unknown: Range,
        scalar_objects: bool,
    ) -> None:
        self.ast = ast
        self.size_of_path = sizes
        self.unknown = unknown
        # Per device, a Quantity or Semver value has size 1 (upstream's actualSize).
        self.scalar_objects = scalar_objects
        self.paths: dict[int, tuple[str, ...]] = {}
        self.local_vars: dict[str, list[_LocalVar]] = {}
        self.computed_sizes: dict[int, Range] = {}
        self.entry_sizes: dict[int, _Entry] = {}

    # -- scopes --

    def _push(self, name: str, var: _LocalVar) -> None:
        self.local_vars.setdefault(name, []).append(var)

    def _pop(self, name: str) -> None:
        self.local_vars[name].pop()

    def _peek(self, name: str) -> _LocalVar | None:
        stack = self.local_vars.get(name)
        return stack[-1] if stack else None

    def _path(self, e: Expr) -> tuple[str, ...] | None:
        if isinstance(e, Ident):
            var = self._peek(e.name)
            if var is not None:
                return var.path
        return self.paths.get(e.id)

    def _node_path(self, e: Expr) -> tuple[str, ...] | None:
        path = self._path(e)
        if path and path[0] in _ACCUMULATORS:
            return None
        return path

    def _push_local(self, name: str, e: Expr) -> None:
        self._push(name, _LocalVar(self._path(e), self._size(e), self._entry(e)))

    def _push_iter(self, name: str, range_expr: Expr, *, keys: bool | None) -> None:
        entry = self._entry(range_expr)
        kind = entry.kind if entry else self.ast.type_of(range_expr).kind
        path = self._path(range_expr) or ()
        if keys is None:  # single-variable comprehension
            if kind == "list":
                size = entry.val if entry else None
                sub = "@items"
            else:
                size = entry.key if entry else None
                sub = "@keys"
        elif keys:
            size = entry.key if entry else None
            sub = "@indices" if kind == "list" else "@keys"
        else:
            size = entry.val if entry else None
            sub = "@items" if kind == "list" else "@values"
        self._push(name, _LocalVar((*path, sub), size, None))

    # -- sizes --

    def _set_size(self, e: Expr, size: Range | None) -> None:
        if size is not None:
            self.computed_sizes[e.id] = size

    def _set_entry(self, e: Expr, entry: _Entry | None) -> None:
        if entry is not None:
            self.entry_sizes[e.id] = entry

    def _entry(self, e: Expr) -> _Entry | None:
        if e.id in self.entry_sizes:
            return self.entry_sizes[e.id]
        if isinstance(e, Ident):
            var = self._peek(e.name)
            if var is not None and var.entry is not None:
                return var.entry
        return None

    def _type_size(self, t: CelType) -> Range | None:
        if t.kind in ("bool", "double", "duration", "int", "timestamp", "uint"):
            return ONE
        if t.kind == "abstract" and t.name == "optional_type" and t.params:
            return self._type_size(t.params[0])
        if self.scalar_objects and t.kind in ("message", "null"):
            return ONE
        return None

    def _size(self, e: Expr) -> Range | None:
        if e.id in self.computed_sizes:
            return self.computed_sizes[e.id]
        literal = _literal_size(e)
        if literal is not None:
            return literal
        path = self._path(e)
        if path:
            from_path = self.size_of_path(path)
            if from_path is not None:
                self.computed_sizes[e.id] = from_path
                return from_path
        from_type = self._type_size(self.ast.type_of(e))
        if from_type is not None:
            return from_type
        if isinstance(e, Ident):
            var = self._peek(e.name)
            if var is not None and var.size is not None:
                return var.size
        return None

    def _size_or_unknown(self, e: Expr) -> Range:
        size = self._size(e)
        return size if size is not None else self.unknown

    def _list_element_size(self, e: Expr) -> Range | None:
        """Size of the elements of a list node (the library estimator's ``listElementNode``)."""
        t = self.ast.type_of(e)
        if not t.params:
            return None
        elem_type = t.params[0]
        path = self._node_path(e)
        if path is not None:
            size = self.size_of_path((*path, "@items"))
            if size is not None:
                return size
        return self._type_size(elem_type)

    # -- costs --

    def cost(self, e: Expr) -> Range:
        if isinstance(e, Const):
            return ZERO
        if isinstance(e, Ident):
            return self._cost_ident(e)
        if isinstance(e, Select):
            return self._cost_select(e)
        if isinstance(e, Call):
            return self._cost_call(e)
        if isinstance(e, CreateList):
            return self._cost_list(e)
        if isinstance(e, CreateStruct):
            return self._cost_struct(e)
        if _is_bind(e):
            return self._cost_bind(e)
        return self._cost_comprehension(e)

    def _cost_ident(self, e: Ident) -> Range:
        var = self._peek(e.name)
        if var is not None:
            if var.path is not None:
                self.paths[e.id] = var.path
            return _fixed(SELECT_AND_IDENT_COST)
        qualified = _QUALIFIED_DEVICE_FIELDS.get(e.name)
        if qualified is not None:
            # `device.attributes` is one identifier here but `device` + `.attributes` upstream.
            self.paths[e.id] = ("device", qualified)
            return _fixed(2 * SELECT_AND_IDENT_COST)
        self.paths[e.id] = (e.name,)
        return _fixed(SELECT_AND_IDENT_COST)

    def _cost_select(self, e: Select) -> Range:
        if e.test_only:
            # Kubernetes configures presence tests (has()) to cost nothing by themselves.
            return self.cost(e.operand)
        total = self.cost(e.operand)
        if self.ast.type_of(e.operand).kind in ("map", "message", "type_param"):
            total = total.add(_fixed(SELECT_AND_IDENT_COST))
        path = self._path(e.operand)
        if path is not None:
            self.paths[e.id] = (*path, e.field)
        return total

    def _cost_call(self, e: Call) -> Range:
        if e.function == "dyn" and len(e.args) == 1:
            arg_cost = self.cost(e.args[0])
            self._set_size(e, self._size(e.args[0]))
            self._set_entry(e, self._entry(e.args[0]))
            return ONE.add(arg_cost)
        arg_costs = [self.cost(a) for a in e.args]
        overloads = self.ast.overloads(e)
        if not overloads:
            return ZERO
        total = ZERO
        if e.target is not None:
            total = total.add(self.cost(e.target))
        fn_cost = Range(MAX, 0)
        result_size: Range | None = None
        for overload in overloads:
            cost, size = self._function_cost(e, overload, arg_costs)
            fn_cost = fn_cost.union(cost)
            if size is not None:
                result_size = size if result_size is None else result_size.union(size)
            if overload in ("index_list", "index_map") and e.args:
                entry = self._entry(e.args[0])
                result_size = entry.val if entry else None
                base = self._path(e.args[0])
                if base is not None:
                    self.paths[e.id] = (*base, "@items" if overload == "index_list" else "@values")
            if result_size is None:
                result_size = self._size(e)
        self._set_size(e, result_size)
        return total.add(fn_cost)

    def _function_cost(self, e: Call, overload: str, arg_costs: list[Range]) -> tuple[Range, Range | None]:
        args_total = ZERO
        for c in arg_costs:
            args_total = args_total.add(c)
        estimate = self._library_cost(e, overload)
        if estimate is not None:
            return estimate[0].add(args_total), estimate[1]
        return self._standard_cost(e, overload, arg_costs, args_total)

    def _library_cost(self, e: Call, overload: str) -> tuple[Range, Range | None] | None:
        """Kubernetes library, sets and DRA estimators (consulted before the standard ones)."""
        fn = e.function
        target = e.target
        if overload.startswith("list_sets_") and len(e.args) == 2:
            factor = 2.0 if overload == "list_sets_equivalent_list" else 1.0
            a = self._size_or_unknown(e.args[0])
            b = self._size_or_unknown(e.args[1])
            return a.mul(b).factor(factor).add(ONE), None
        if fn == "includes" and overload == "dra_includes_dyn_dyn" and target is not None:
            return Range(0, ATTRIBUTE_VALUES_PER_DEVICE), None
        if fn in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf") and target is not None:
            target_size = self._size_or_unknown(target)
            elem_type = self.ast.type_of(target)
            if elem_type.kind == "list":
                element_cost = ONE
                if elem_type.params and elem_type.params[0].kind in ("string", "bytes"):
                    elem_size = self._list_element_size(target) or self.unknown
                    element_cost = element_cost.add(elem_size.factor(STRING_TRAVERSAL_COST_FACTOR))
                return target_size.mul(element_cost), None
            return target_size.factor(STRING_TRAVERSAL_COST_FACTOR), None
        if fn in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
            size = self._size_or_unknown(target)
            return size.factor(STRING_TRAVERSAL_COST_FACTOR), size
        if fn == "replace" and target is not None and len(e.args) >= 2:
            return self._replace_cost(target, e.args[0], e.args[1])
        if fn == "split" and target is not None:
            size = self._size_or_unknown(target)
            hi = size.hi
            if len(e.args) > 1 and isinstance(e.args[1], Const) and e.args[1].kind == "int":
                value = int(e.args[1].value)  # type: ignore[call-overload]
                hi = value % (1 << 64)  # upstream converts the literal to a uint
            return size.factor(2 * STRING_TRAVERSAL_COST_FACTOR), Range(0, hi)
        if fn == "join" and target is not None:
            list_size = self._size_or_unknown(target)
            result = ZERO
            elem = self._list_element_size(target)
            if self.ast.type_of(target).params:
                result = list_size.mul(elem if elem is not None else self.unknown)
            if e.args:
                sep = self._size_or_unknown(e.args[0])
                separators = Range(max(list_size.lo - 1, 0), max(list_size.hi - 1, 0))
                result = result.add(sep.mul(separators))
            return result.factor(STRING_TRAVERSAL_COST_FACTOR), result
        if fn in ("find", "findAll") and target is not None and e.args:
            size = self._size_or_unknown(target)
            str_cost = size.add(ONE).factor(STRING_TRAVERSAL_COST_FACTOR)
            regex_cost = self._size_or_unknown(e.args[0]).factor(REGEX_STRING_LENGTH_COST_FACTOR)
            return str_cost.mul(regex_cost), Range(0, size.hi)
        if fn in ("sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan",
                  "isLessThan", "compareTo", "add", "sub"):
            return ONE, None
        return None

    def _replace_cost(self, target: Expr, old: Expr, new: Expr) -> tuple[Range, Range | None]:
        size = self._size_or_unknown(target)
        old_size = self._size_or_unknown(old)
        new_size = self._size_or_unknown(new)
        if old_size.lo == 0:
            count_hi = size.hi + 1 if size.hi < MAX else size.hi
            retained_hi = size.hi
        elif new_size.hi <= old_size.lo:
            count_hi, retained_hi = 0, size.hi
        else:
            count_hi = math.ceil(size.hi / old_size.lo)
            retained_hi = 0
        if old_size.hi == 0:
            count_lo = size.lo + 1 if size.lo < MAX else size.lo
            retained_lo = size.lo
        elif old_size.hi <= new_size.lo:
            count_lo, retained_lo = 0, size.lo
        else:
            count_lo = math.ceil(size.lo / old_size.hi)
            retained_lo = 0
        result = Range(count_lo, min(count_hi, MAX)).mul(new_size).add(Range(retained_lo, retained_hi))
        return size.factor(2 * STRING_TRAVERSAL_COST_FACTOR), result

    def _standard_cost(self, e: Call, overload: str, arg_costs: list[Range], args_total: Range) -> tuple[Range, Range | None]:
        args = e.args
        target = e.target
        traversal = STRING_TRAVERSAL_COST_FACTOR
        if overload == "string_format" and target is not None:
            return self._size_or_unknown(target).factor(traversal).add(args_total), None
        if overload == "string_to_bytes" and len(args) == 1:
            size = self._size_or_unknown(args[0])
            return size.factor(traversal).add(args_total), Range(size.lo, _mul(size.hi, 4))
        if overload == "bytes_to_string" and len(args) == 1:
            size = self._size_or_unknown(args[0])
            return size.factor(traversal).add(args_total), Range(size.lo // 4, size.hi)
        if overload == "strings_quote" and len(args) == 1:
            size = self._size_or_unknown(args[0])
            return size.factor(traversal).add(args_total), Range(_add(size.lo, 2), _add(_mul(size.hi, 2), 2))
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return self._size_or_unknown(args[0]).factor(traversal).add(args_total), None
        if overload == "in_list" and len(args) == 2:
            return self._size_or_unknown(args[1]).factor(1).add(args_total), None
        if overload == "matches_string" and target is not None and len(args) == 1:
            str_cost = self._size_or_unknown(target).add(ONE).factor(traversal)
            regex_cost = self._size_or_unknown(args[0]).factor(REGEX_STRING_LENGTH_COST_FACTOR)
            return str_cost.mul(regex_cost).add(args_total), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            str_cost = self._size_or_unknown(target).factor(traversal)
            sub_cost = self._size_or_unknown(args[0]).factor(traversal)
            return str_cost.mul(sub_cost).add(args_total), None
        if overload in ("logical_or", "logical_and"):
            lhs, rhs = arg_costs[0], arg_costs[1]
            return Range(lhs.lo, lhs.add(rhs).hi), None
        if overload == "conditional":
            size = self._size_or_unknown(args[1]).union(self._size_or_unknown(args[2]))
            first = self._entry(args[1])
            self._set_entry(e, first.union(self._entry(args[2])) if first else None)
            return arg_costs[0].add(arg_costs[1].union(arg_costs[2])), size
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            result = self._size_or_unknown(args[0]).add(self._size_or_unknown(args[1]))
            left = self._entry(args[0])
            joined = left.union(self._entry(args[1])) if left else None
            if joined is not None:
                self._set_entry(e, joined)
            if overload == "add_list":
                return ONE.add(args_total), result
            return result.factor(traversal).add(args_total), result
        if overload in (
            "less_string", "greater_string", "less_equals_string", "greater_equals_string",
            "less_bytes", "greater_bytes", "less_equals_bytes", "greater_equals_bytes",
            "equals", "not_equals",
        ):
            lhs = self._size_or_unknown(args[0])
            rhs = self._size_or_unknown(args[1])
            smallest = min(lhs.hi, rhs.hi)
            return Range(1 if smallest > 0 else 0, smallest).factor(traversal).add(args_total), None
        return ONE.add(args_total), None

    def _cost_list(self, e: CreateList) -> Range:
        total = ZERO
        item = Range(0 if not e.elements else MAX, 0)
        for element in e.elements:
            total = total.add(self.cost(element))
            item = item.union(self._size_or_unknown(element))
        self.entry_sizes[e.id] = _Entry("list", ONE, item)
        return total.add(_fixed(LIST_CREATE_BASE_COST))

    def _cost_struct(self, e: CreateStruct) -> Range:
        total = ZERO
        if e.message_name:
            for entry in e.entries:
                total = total.add(self.cost(entry.value))
            return total.add(_fixed(STRUCT_CREATE_BASE_COST))
        keys = Range(0 if not e.entries else MAX, 0)
        vals = Range(0 if not e.entries else MAX, 0)
        for entry in e.entries:
            if entry.map_key is not None:
                total = total.add(self.cost(entry.map_key))
                keys = keys.union(self._size_or_unknown(entry.map_key))
            total = total.add(self.cost(entry.value))
            vals = vals.union(self._size_or_unknown(entry.value))
        self.entry_sizes[e.id] = _Entry("map", keys, vals)
        return total.add(_fixed(MAP_CREATE_BASE_COST))

    def _cost_comprehension(self, e: Comprehension) -> Range:
        total = self.cost(e.iter_range).add(self.cost(e.accu_init))
        self._push_local(e.accu_var, e.accu_init)
        if e.iter_var2:
            self._push_iter(e.iter_var, e.iter_range, keys=True)
            self._push_iter(e.iter_var2, e.iter_range, keys=False)
        else:
            self._push_iter(e.iter_var, e.iter_range, keys=None)
        loop = self.cost(e.loop_condition)
        step = self.cost(e.loop_step)
        self._pop(e.iter_var)
        if e.iter_var2:
            self._pop(e.iter_var2)
        total = total.add(self.cost(e.result))
        self._pop(e.accu_var)
        count = self._size_or_unknown(e.iter_range)
        total = total.add(count.mul(step.add(loop)))
        if isinstance(e.accu_init, Const):
            self._set_size(e, self._size(e.accu_init))
        elif isinstance(e.accu_init, CreateList | CreateStruct) and not (
            isinstance(e.accu_init, CreateStruct) and e.accu_init.message_name
        ):
            self._set_size(e, count)
            step_entry = self._entry(e.loop_step)
            if step_entry is not None:
                self._set_entry(e, step_entry)
        return total

    def _cost_bind(self, e: Comprehension) -> Range:
        total = self.cost(e.iter_range).add(self.cost(e.accu_init))
        self._push_local(e.accu_var, e.accu_init)
        total = total.add(self.cost(e.result))
        self._pop(e.accu_var)
        self._set_size(e, self._size(e.result))
        self._set_entry(e, self._entry(e.result))
        return total


def _literal_size(e: Expr) -> Range | None:
    if isinstance(e, Const):
        if e.kind == "string":
            return _fixed(len(str(e.value)))
        if e.kind == "bytes":
            return _fixed(len(e.value))  # type: ignore[arg-type]
        return ONE
    if isinstance(e, CreateList):
        return _fixed(len(e.elements))
    if isinstance(e, CreateStruct) and not e.message_name:
        return _fixed(len(e.entries))
    return None


def _is_bind(e: Comprehension) -> bool:
    return (
        isinstance(e.iter_range, CreateList)
        and not e.iter_range.elements
        and isinstance(e.loop_condition, Const)
        and e.loop_condition.kind == "bool"
        and e.loop_condition.value is False
        and e.accu_var not in _ACCUMULATORS
    )


def estimate_cost(ast: CheckedAst) -> int:
    """Upstream's ``MaxCost`` of a checked selector (saturating at 2^64-1)."""
    coster = _Coster(ast, sizes=_declared_size, unknown=UNKNOWN, scalar_objects=False)
    return coster.cost(ast.expr).hi


def device_cost_bound(ast: CheckedAst, profile: DeviceProfile) -> int:
    """An upper bound of the runtime cost of evaluating ``ast`` on one device."""
    largest = max(
        len(ast.source), profile.driver, profile.attribute_value, profile.attribute_item,
        profile.attribute_domain_length, profile.capacity_domain_length,
        profile.attribute_domains, profile.capacity_domains,
        profile.attributes_per_domain, profile.capacities_per_domain, 1,
    )
    coster = _Coster(ast, sizes=profile.size, unknown=Range(0, largest), scalar_objects=True)
    return coster.cost(ast.expr).hi
