"""The Kubernetes CEL extension functions that DRA selectors may call, on plain Python values.

Engines call these for ``quantity()``/Quantity methods, ``semver()``/Semver methods, the
Kubernetes ``lists`` and ``regex`` libraries, cel-go's ``sets`` extension and DRA's own
``includes()``. Values are Python values as engines hand them over: ``bool``, ``int``,
``float``, ``str``, ``bytes``, ``None``, ``list``, ``dict``, ``datetime``/``timedelta``,
:class:`~model.quantity.Quantity` and :class:`~model.semver.Semver`.

Semantics and error texts follow upstream (k8s.io/apiserver/pkg/cel/library, cel-go ext,
k8s.io/dynamic-resource-allocation/cel); a failing call raises :class:`CelFunctionError`
whose message is the text cel-go would report.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Callable, Sequence
from typing import Final

from dra_solver.model.quantity import Format, Quantity, QuantityError, parse_quantity
from dra_solver.model.semver import Semver, SemverError, parse_semver

__all__ = [
    "INCLUDES_MAX_LIST_LENGTH",
    "CelFunctionError",
    "cel_compare",
    "cel_equal",
]

INCLUDES_MAX_LIST_LENGTH: Final = 48
"""``resourceapi.ResourceSliceMaxAttributeValuesPerDevice``: ``includes()`` refuses longer lists."""

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


class CelFunctionError(Exception):
    """A CEL runtime error raised by an extension function; ``str()`` is cel-go's text."""


def _no_such_overload(function: str) -> CelFunctionError:
    return CelFunctionError(f"no such overload: {function}")


# --- CEL value semantics -------------------------------------------------------------------


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def cel_equal(a: object, b: object) -> bool:
    """CEL's heterogeneous equality: numbers compare across int/uint/double, other values
    only within their own type; Quantity and Semver compare by value as upstream."""
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Quantity) or isinstance(b, Quantity):
        return isinstance(a, Quantity) and isinstance(b, Quantity) and a.cmp(b) == 0
    if isinstance(a, Semver) or isinstance(b, Semver):
        return isinstance(a, Semver) and isinstance(b, Semver) and a.compare(b) == 0
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            match = [k for k in b if cel_equal(k, key)]
            if not match or not cel_equal(value, b[match[0]]):
                return False
        return True
    if type(a) is not type(b):
        return False
    return a == b


def cel_compare(a: object, b: object, *, function: str = "compare") -> int:
    """-1, 0 or 1 for CEL-comparable values (numbers across types, and same-typed strings,
    bytes, bools, timestamps, durations)."""
    if _is_number(a) and _is_number(b):
        x, y = a, b
    elif isinstance(a, bool) and isinstance(b, bool):
        x, y = int(a), int(b)
    elif type(a) is type(b) and isinstance(a, str | bytes | datetime.datetime | datetime.timedelta):
        x, y = a, b
    else:
        raise _no_such_overload(function)
    return int((x > y) - (x < y))  # type: ignore[operator]


# --- quantity ------------------------------------------------------------------------------


def quantity(text: str) -> Quantity:
    try:
        return parse_quantity(text)
    except QuantityError as err:
        raise CelFunctionError(str(err)) from None


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _as_quantity(value: object, function: str) -> Quantity:
    if not isinstance(value, Quantity):
        raise _no_such_overload(function)
    return value


def quantity_sign(q: object) -> int:
    return _as_quantity(q, "sign").sign()


def quantity_as_integer(q: object) -> int:
    value = _as_quantity(q, "asInteger").as_int64()
    if value is None:
        raise CelFunctionError("cannot convert value to integer")
    return value


def quantity_is_integer(q: object) -> bool:
    return _as_quantity(q, "isInteger").is_integer()


def quantity_as_approximate_float(q: object) -> float:
    return _as_quantity(q, "asApproximateFloat").as_approximate_float()


def _quantity_operand(value: object, function: str) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        # upstream converts an int operand with NewQuantity(v, DecimalExponent)
        return Quantity.from_int(value, Format.DECIMAL_EXPONENT)
    raise _no_such_overload(function)


def quantity_add(q: object, other: object) -> Quantity:
    try:
        return _as_quantity(q, "add").add(_quantity_operand(other, "add"))
    except QuantityError as err:
        raise CelFunctionError(str(err)) from None


def quantity_sub(q: object, other: object) -> Quantity:
    try:
        return _as_quantity(q, "sub").sub(_quantity_operand(other, "sub"))
    except QuantityError as err:
        raise CelFunctionError(str(err)) from None


# --- semver --------------------------------------------------------------------------------


def semver(text: str, normalize: bool = False) -> Semver:
    try:
        return parse_semver(text, normalize=normalize)
    except SemverError as err:
        raise CelFunctionError(str(err)) from None


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize=normalize)
    except SemverError:
        return False
    return True


def _as_int64(value: int) -> int:
    """A uint64 component as CEL's int (upstream converts with a wrapping ``int64()``)."""
    return value - (1 << 64) if value > _INT64_MAX else value


def semver_major(v: object) -> int:
    if not isinstance(v, Semver):
        raise _no_such_overload("major")
    return _as_int64(v.major)


def semver_minor(v: object) -> int:
    if not isinstance(v, Semver):
        raise _no_such_overload("minor")
    return _as_int64(v.minor)


def semver_patch(v: object) -> int:
    if not isinstance(v, Semver):
        raise _no_such_overload("patch")
    return _as_int64(v.patch)


# --- comparisons shared by Quantity and Semver ---------------------------------------------


def compare_to(a: object, b: object) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.cmp(b)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise _no_such_overload("compareTo")


def is_greater_than(a: object, b: object) -> bool:
    return compare_to(a, b) == 1


def is_less_than(a: object, b: object) -> bool:
    return compare_to(a, b) == -1


# --- lists (k8s.io/apiserver/pkg/cel/library/lists.go) -------------------------------------


def _as_list(value: object, function: str) -> list[object]:
    if not isinstance(value, list):
        raise _no_such_overload(function)
    return value


def is_sorted(values: object) -> bool:
    items = _as_list(values, "isSorted")
    return all(cel_compare(a, b, function="isSorted") <= 0 for a, b in itertools.pairwise(items))


def list_sum(values: object) -> object:
    items = _as_list(values, "sum")
    if not items:
        return 0
    total = items[0]
    for item in items[1:]:
        if isinstance(total, datetime.timedelta) and isinstance(item, datetime.timedelta):
            total = total + item
        elif _is_number(total) and _is_number(item) and type(total) is type(item):
            total = total + item  # type: ignore[operator]
            if isinstance(total, int) and not _INT64_MIN <= total <= _INT64_MAX:
                raise CelFunctionError("integer overflow")
        else:
            raise _no_such_overload("sum")
    if not (_is_number(total) or isinstance(total, datetime.timedelta)):
        raise _no_such_overload("sum")
    return total


def _extreme(values: object, function: str, prefer: int) -> object:
    items = _as_list(values, function)
    if not items:
        raise CelFunctionError(f"{function} called on empty list")
    best = items[0]
    for item in items[1:]:
        if cel_compare(best, item, function=function) == prefer:
            best = item
    return best


def list_min(values: object) -> object:
    return _extreme(values, "min", 1)


def list_max(values: object) -> object:
    return _extreme(values, "max", -1)


def index_of(values: object, item: object) -> int:
    for i, value in enumerate(_as_list(values, "indexOf")):
        if cel_equal(value, item):
            return i
    return -1


def last_index_of(values: object, item: object) -> int:
    items = _as_list(values, "lastIndexOf")
    for i in range(len(items) - 1, -1, -1):
        if cel_equal(items[i], item):
            return i
    return -1


# --- sets (cel-go ext/sets.go) -------------------------------------------------------------


def _contains_all(haystack: Sequence[object], needles: Sequence[object]) -> bool:
    return all(any(cel_equal(h, n) for h in haystack) for n in needles)


def sets_contains(a: object, b: object) -> bool:
    return _contains_all(_as_list(a, "sets.contains"), _as_list(b, "sets.contains"))


def sets_equivalent(a: object, b: object) -> bool:
    x = _as_list(a, "sets.equivalent")
    y = _as_list(b, "sets.equivalent")
    return _contains_all(x, y) and _contains_all(y, x)


def sets_intersects(a: object, b: object) -> bool:
    x = _as_list(a, "sets.intersects")
    y = _as_list(b, "sets.intersects")
    return any(cel_equal(p, q) for p in x for q in y)


# --- regex (k8s.io/apiserver/pkg/cel/library/regex.go) -------------------------------------

# RE2 and Python's re agree on the syntax selectors use; translate the spelling that differs
# so that a valid RE2 pattern does not fail here.
_RE2_TO_PYTHON: Final = ((r"\z", r"\Z"),)


def _compile(pattern: str) -> re.Pattern[str]:
    for old, new in _RE2_TO_PYTHON:
        pattern = pattern.replace(old, new)
    try:
        return re.compile(pattern)
    except re.error as err:
        raise CelFunctionError(f"Illegal regex: error parsing regexp: {err}") from None


def find(text: str, pattern: str) -> str:
    match = _compile(pattern).search(text)
    return match.group(0) if match else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _compile(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


# --- includes (k8s.io/dynamic-resource-allocation/cel/compile.go) ---------------------------


def includes(target: object, item: object) -> bool:
    """``<target>.includes(<item>)``: list membership, or equality for a scalar target."""
    if isinstance(target, list):
        for i, value in enumerate(target):
            if i >= INCLUDES_MAX_LIST_LENGTH:
                raise CelFunctionError(
                    f"'includes' function cannot be applied to lists longer than {INCLUDES_MAX_LIST_LENGTH} values"
                )
            if cel_equal(value, item):
                return True
        return False
    return cel_equal(target, item)


def quantity_equals(a: object, b: object) -> bool:
    """``==`` between two quantities: by value (upstream ``Quantity.Equal``)."""
    return cel_equal(a, b)


def quantity_in(item: object, values: object) -> bool:
    """``item in [quantities]``: membership by value."""
    return any(cel_equal(item, v) for v in _as_list(values, "@in"))


FUNCTIONS: Final[dict[str, Callable[..., object]]] = {
    "quantity": quantity,
    "isQuantity": is_quantity,
    "sign": quantity_sign,
    "asInteger": quantity_as_integer,
    "isInteger": quantity_is_integer,
    "asApproximateFloat": quantity_as_approximate_float,
    "add": quantity_add,
    "sub": quantity_sub,
    "semver": semver,
    "isSemver": is_semver,
    "major": semver_major,
    "minor": semver_minor,
    "patch": semver_patch,
    "compareTo": compare_to,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    "isSorted": is_sorted,
    "sum": list_sum,
    "min": list_min,
    "max": list_max,
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    "sets.contains": sets_contains,
    "sets.equivalent": sets_equivalent,
    "sets.intersects": sets_intersects,
    "find": find,
    "findAll": find_all,
    "includes": includes,
}
"""CEL function name to implementation (engines bind these to their own call conventions)."""
