"""The default CEL engine: Google's cel-cpp through ``cel_expr_python``.

Each engine instance owns two cel-cpp environments over one descriptor pool:

* the *checker* environment parses and type-checks against upstream's declarations
  (``model.cel.declarations``): compile errors, result types and overload ids come from it;
* the *runtime* environment plans and evaluates the checked expression after
  ``model.cel.rewrite`` made DRA's semantics explicit. It provides the standard library and
  strings extension natively and the Kubernetes functions as Python callbacks
  (``model.cel.library``), registered under argument *kinds* only, since cel-cpp dispatches on
  kinds at runtime and the types were already checked.

Quantities and versions cross the boundary as small protobuf messages; a device becomes one
activation (built once per distinct device and reused by every selector).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pool, message_factory

from dra_solver.model.cel.api import (
    CEL_COST_LIMIT_EXCEEDED,
    CelCompileError,
    CelDevice,
    CelFeatures,
    CelRuntimeError,
    DeviceKey,
    split_qualified_name,
)
from dra_solver.model.cel.ast import CheckedAst, decode_checked, encode_checked
from dra_solver.model.cel.cost import DeviceProfile, device_cost_bound, estimate_cost
from dra_solver.model.cel.declarations import (
    DEVICE_TYPE,
    QUANTITY_FIELD,
    QUANTITY_TYPE,
    SEMVER_FIELD,
    SEMVER_TYPE,
    checker_config,
    kubernetes_types,
)
from dra_solver.model.cel.library import FUNCTIONS, CelFunctionError, quantity_equals, quantity_in
from dra_solver.model.cel.rewrite import QUANTITY_EQUALS, QUANTITY_IN, check, rewrite_for_runtime
from dra_solver.model.quantity import Format, Quantity
from dra_solver.model.semver import Semver, parse_semver

__all__ = ["ENGINE_NAME", "CppEngine", "CppProgram"]

ENGINE_NAME: Final = "cel-expr-python"


_FORMAT_CODES: Final = {Format.BINARY_SI: "B", Format.DECIMAL_SI: "D", Format.DECIMAL_EXPONENT: "E"}
_FORMATS_BY_CODE: Final = {v: k for k, v in _FORMAT_CODES.items()}
_STATUS_PREFIX: Final = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX: Final = re.compile(r" \[[A-Z_]+\]$")
_MISSING_KEY: Final = re.compile(r'^Key not found in map : "?(.*?)"?$', re.S)
_INDEX_ERROR: Final = re.compile(r"^Index error: index=(-?\d+) size=(\d+)$")
_ACTIVATION_CACHE_SIZE: Final = 4096
_QUANTITY_CACHE_SIZE: Final = 4096


def _strip_status(message: str) -> str:
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", message, count=1))


def compile_error_text(message: str) -> str:
    """cel-cpp's checker message in cel-go's words (the ones upstream reports)."""
    text = _strip_status(message)
    text = text.replace("cannot be the range of a comprehension", "cannot be range of a comprehension")
    text = re.sub(r"(undefined field '[^']*') not found in struct '[^']*'", r"\1", text)
    return "compilation failed: " + text


def runtime_error_text(message: str) -> str:
    """cel-cpp's runtime error in cel-go's words ("no such key: x", "division by zero")."""
    text = _strip_status(message)
    missing = _MISSING_KEY.match(text)
    if missing:
        return f"no such key: {missing.group(1)}"
    index = _INDEX_ERROR.match(text)
    if index:
        return f"index '{index.group(1)}' out of range in list size '{index.group(2)}'"
    if text == "divide by zero":
        return "division by zero"
    if text == "No matching overloads found : <iter_range>":
        return "got a value that is not a list or map, expected iterable type"
    if text.startswith("No matching overloads found : "):
        return "no such overload: " + text.removeprefix("No matching overloads found : ")
    return text


_RESULT_TYPE_NAMES: Final = (
    ("LIST", "list"), ("MAP", "map"), ("INT", "int"), ("UINT", "uint"), ("DOUBLE", "double"),
    ("STRING", "string"), ("BYTES", "bytes"), ("NULL", "null_type"), ("TIMESTAMP", "google.protobuf.Timestamp"),
    ("DURATION", "google.protobuf.Duration"), ("TYPE", "type"), ("optional", "optional_type"),
)


def _result_type_name(cel_type: str) -> str:
    for prefix, name in _RESULT_TYPE_NAMES:
        if cel_type.startswith(prefix):
            return name
    return cel_type


@dataclass(frozen=True)
class CppProgram:
    """One compiled selector: the planned cel-cpp program and what the checks found."""

    expression: str
    program: Any
    max_cost: int
    ast: CheckedAst


class CppEngine:
    """The cel-expr-python engine for one set of features (see module docstring)."""

    name: Final = ENGINE_NAME

    def __init__(self, *, features: CelFeatures, cost_limit: int) -> None:
        self.features = features
        self.cost_limit = cost_limit
        pool = descriptor_pool.DescriptorPool()
        pool.Add(kubernetes_types(features))
        self._quantity_msg: Any = message_factory.GetMessageClass(pool.FindMessageTypeByName(QUANTITY_TYPE))
        self._semver_msg: Any = message_factory.GetMessageClass(pool.FindMessageTypeByName(SEMVER_TYPE))
        self._device_msg: Any = message_factory.GetMessageClass(pool.FindMessageTypeByName(DEVICE_TYPE))
        # Decoded values by their wire form: the same few values recur in every evaluation.
        self._quantities: dict[str, Quantity] = {}
        self._semvers: dict[str, Semver] = {}
        self._activations: dict[DeviceKey, Any] = {}
        self._profiles: dict[DeviceKey, DeviceProfile] = {}

        t = _cel.Type
        quantity = t(QUANTITY_TYPE)
        attribute = t.DYN if features.list_type_attributes else t("google.protobuf.Any")
        self._checker = _cel.NewEnv(
            pool,
            config=_cel.NewEnvConfigFromYaml(checker_config(features)),
            variables={
                "device": t(DEVICE_TYPE),
                "device.attributes": t.Map(t.STRING, t.Map(t.STRING, attribute)),
                "device.capacity": t.Map(t.STRING, t.Map(t.STRING, quantity)),
            },
            extensions=[ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
        )
        self._runtime = _cel.NewEnv(
            pool,
            variables={
                "device": t(DEVICE_TYPE),
                "device.attributes": t.Map(t.STRING, t.Map(t.STRING, t.DYN)),
                "device.capacity": t.Map(t.STRING, t.Map(t.STRING, quantity)),
            },
            extensions=[ext_strings.ExtStrings(version=2), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
            functions=self._runtime_functions(),
        )

    # --- values across the boundary -------------------------------------------------------

    def _to_cel(self, value: object) -> object:
        if isinstance(value, Quantity):
            mantissa, exponent, fixed = value.identity()
            code = ("F" if fixed else "D") + _FORMAT_CODES[value.format]
            return self._quantity_msg(**{QUANTITY_FIELD: f"{code}{mantissa}e{exponent}"})
        if isinstance(value, Semver):
            return self._semver_msg(**{SEMVER_FIELD: value.precedence_key()})
        if isinstance(value, list | tuple):
            return [self._to_cel(v) for v in value]
        return value

    def _from_cel(self, value: object) -> object:
        if isinstance(value, self._quantity_msg):
            encoded: str = getattr(value, QUANTITY_FIELD)
            known = self._quantities.get(encoded)
            if known is None:
                known = self._decode_quantity(encoded)
                if len(self._quantities) >= _QUANTITY_CACHE_SIZE:
                    self._quantities.clear()
                self._quantities[encoded] = known
            return known
        if isinstance(value, self._semver_msg):
            version: str = getattr(value, SEMVER_FIELD)
            parsed = self._semvers.get(version)
            if parsed is None:
                parsed = parse_semver(version)
                if len(self._semvers) >= _QUANTITY_CACHE_SIZE:
                    self._semvers.clear()
                self._semvers[version] = parsed
            return parsed
        if isinstance(value, list):
            return [self._from_cel(v) for v in value]
        if isinstance(value, dict):
            return {self._from_cel(k): self._from_cel(v) for k, v in value.items()}
        return value

    @staticmethod
    def _decode_quantity(encoded: str) -> Quantity:
        fixed = encoded[0] == "F"
        fmt = _FORMATS_BY_CODE[encoded[1]]
        mantissa, _, exponent = encoded[2:].partition("e")
        return Quantity(int(mantissa), int(exponent), fmt=fmt, fixed=fixed)

    def _bind(self, fn: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object) -> object:
            try:
                result = fn(*(self._from_cel(a) for a in args))
            except CelFunctionError as err:
                raise ValueError(str(err)) from None
            return self._to_cel(result)

        return call

    def _bind_parser(self, fn: Callable[..., object]) -> Callable[..., object]:
        """Like :meth:`_bind` for ``quantity()``/``semver()``: selectors call them with the same
        literals for every device, so the converted result is remembered per argument."""
        bound = self._bind(fn)
        results: dict[tuple[object, ...], object] = {}

        def call(*args: object) -> object:
            known = results.get(args)
            if known is None:
                known = bound(*args)
                if len(results) >= _QUANTITY_CACHE_SIZE:
                    results.clear()
                results[args] = known
            return known

        return call

    def _runtime_functions(self) -> list[Any]:
        assert _cel is not None
        t = _cel.Type
        anything = t("google.protobuf.Any")  # matches every argument kind at dispatch
        q = t(QUANTITY_TYPE)  # a message kind: Quantity and Semver share these entries
        s = t(SEMVER_TYPE)
        lst = t.List(t.DYN)
        f = FUNCTIONS
        table: list[tuple[str, list[Any], bool, Any, Callable[..., object]]] = [
            ("quantity", [t.STRING], False, q, f["quantity"]),
            ("isQuantity", [t.STRING], False, t.BOOL, f["isQuantity"]),
            ("sign", [q], False, t.INT, f["sign"]),
            ("isGreaterThan", [q, q], True, t.BOOL, f["isGreaterThan"]),
            ("isLessThan", [q, q], True, t.BOOL, f["isLessThan"]),
            ("compareTo", [q, q], True, t.INT, f["compareTo"]),
            ("asApproximateFloat", [q], True, t.DOUBLE, f["asApproximateFloat"]),
            ("asInteger", [q], True, t.INT, f["asInteger"]),
            ("isInteger", [q], True, t.BOOL, f["isInteger"]),
            ("add", [q, q], True, q, f["add"]),
            ("add", [q, t.INT], True, q, f["add"]),
            ("sub", [q, q], True, q, f["sub"]),
            ("sub", [q, t.INT], True, q, f["sub"]),
            ("semver", [t.STRING], False, s, f["semver"]),
            ("semver", [t.STRING, t.BOOL], False, s, f["semver"]),
            ("isSemver", [t.STRING], False, t.BOOL, f["isSemver"]),
            ("isSemver", [t.STRING, t.BOOL], False, t.BOOL, f["isSemver"]),
            ("major", [q], True, t.INT, f["major"]),
            ("minor", [q], True, t.INT, f["minor"]),
            ("patch", [q], True, t.INT, f["patch"]),
            ("isSorted", [lst], True, t.BOOL, f["isSorted"]),
            ("sum", [lst], True, t.DYN, f["sum"]),
            ("min", [lst], True, t.DYN, f["min"]),
            ("max", [lst], True, t.DYN, f["max"]),
            ("indexOf", [lst, anything], True, t.INT, f["indexOf"]),
            ("lastIndexOf", [lst, anything], True, t.INT, f["lastIndexOf"]),
            ("sets.contains", [lst, lst], False, t.BOOL, f["sets.contains"]),
            ("sets.equivalent", [lst, lst], False, t.BOOL, f["sets.equivalent"]),
            ("sets.intersects", [lst, lst], False, t.BOOL, f["sets.intersects"]),
            ("find", [t.STRING, t.STRING], True, t.STRING, f["find"]),
            ("findAll", [t.STRING, t.STRING], True, t.List(t.STRING), f["findAll"]),
            ("findAll", [t.STRING, t.STRING, t.INT], True, t.List(t.STRING), f["findAll"]),
            ("includes", [anything, anything], True, t.BOOL, f["includes"]),
            (QUANTITY_EQUALS, [q, q], False, t.BOOL, quantity_equals),
            (QUANTITY_IN, [q, lst], False, t.BOOL, quantity_in),
        ]
        by_name: dict[str, list[Any]] = {}
        for i, (name, params, member, result, impl) in enumerate(table):
            bind = self._bind_parser if name in ("quantity", "semver") else self._bind
            overload = _cel.Overload(f"dra_runtime_{i}", result, params, is_member=member, impl=bind(impl))
            by_name.setdefault(name, []).append(overload)
        return [_cel.FunctionDecl(name, overloads) for name, overloads in sorted(by_name.items())]

    # --- compile and evaluate -------------------------------------------------------------

    def compile(self, expression: str) -> CppProgram:
        try:
            checked = self._checker.compile(expression)
        except Exception as err:  # cel-cpp reports parse and check errors as exceptions
            raise CelCompileError(compile_error_text(str(err))) from None
        ast = decode_checked(checked.serialize(), expression)
        problem = check(ast, self.features)
        if problem is not None:
            raise CelCompileError(problem)
        max_cost = estimate_cost(ast)
        expr, rewritten = rewrite_for_runtime(ast)
        try:
            program = self._runtime.deserialize(encode_checked(ast, expr, drop_references=rewritten))
        except Exception as err:
            raise CelCompileError(f"program instantiation failed: {_strip_status(str(err))}") from None
        return CppProgram(expression, program, max_cost, ast)

    def _activation(self, device: CelDevice) -> Any:
        key = device.key()
        activation = self._activations.get(key)
        if activation is None:
            attributes: dict[str, dict[str, object]] = {}
            for name, value in device.attributes.items():
                domain, ident = split_qualified_name(name, device.driver)
                attributes.setdefault(domain, {})[ident] = self._to_cel(value)
            capacity: dict[str, dict[str, object]] = {}
            for name, amount in device.capacity.items():
                domain, ident = split_qualified_name(name, device.driver)
                capacity.setdefault(domain, {})[ident] = self._to_cel(amount)
            fields: dict[str, object] = {"driver": device.driver}
            if self.features.consumable_capacity:
                fields["allowMultipleAllocations"] = bool(device.allow_multiple_allocations)
            activation = self._runtime.Activation(
                data={
                    "device": self._device_msg(**fields),
                    "device.attributes": attributes,
                    "device.capacity": capacity,
                }
            )
            if len(self._activations) >= _ACTIVATION_CACHE_SIZE:
                self._activations.pop(next(iter(self._activations)))
            self._activations[key] = activation
        return activation

    def evaluate(self, program: CppProgram, device: CelDevice) -> bool:
        if program.max_cost > self.cost_limit:
            bound = device_cost_bound(program.ast, self._profile(device))
            if bound > self.cost_limit:
                raise CelRuntimeError(CEL_COST_LIMIT_EXCEEDED)
        try:
            value = program.program.eval(self._activation(device))
            kind = value.type().name()
            result = value.value()
        except Exception as err:
            raise CelRuntimeError(runtime_error_text(str(err))) from None
        if kind == "ERROR":
            raise CelRuntimeError(runtime_error_text(str(result)))
        if kind != "BOOL":
            name = _result_type_name(kind)
            raise CelRuntimeError(f"CEL result of type {name} could not be converted to bool")
        return bool(result)

    def _profile(self, device: CelDevice) -> DeviceProfile:
        key = device.key()
        profile = self._profiles.get(key)
        if profile is None:
            profile = device_profile(device)
            if len(self._profiles) >= _ACTIVATION_CACHE_SIZE:
                self._profiles.clear()
            self._profiles[key] = profile
        return profile


def _value_size(value: object) -> tuple[int, int]:
    """(size of the value, largest element size) as CEL's ``size()`` counts them."""
    if isinstance(value, str):
        return len(value), 0
    if isinstance(value, tuple):
        items = [len(v) if isinstance(v, str) else 1 for v in value]
        return len(value), max(items, default=0)
    return 1, 0


def device_profile(device: CelDevice) -> DeviceProfile:
    """The actual sizes of ``device`` that bound its evaluation cost."""
    attr_domains: dict[str, list[str]] = {}
    value_size = item_size = 0
    for name, value in device.attributes.items():
        domain, ident = split_qualified_name(name, device.driver)
        attr_domains.setdefault(domain, []).append(ident)
        size, item = _value_size(value)
        value_size, item_size = max(value_size, size), max(item_size, item)
    cap_domains: dict[str, list[str]] = {}
    for name in device.capacity:
        domain, ident = split_qualified_name(name, device.driver)
        cap_domains.setdefault(domain, []).append(ident)
    return DeviceProfile(
        driver=len(device.driver),
        attribute_domains=len(attr_domains),
        attribute_domain_length=max((len(d) for d in attr_domains), default=0),
        attributes_per_domain=max((len(v) for v in attr_domains.values()), default=0),
        attribute_id_length=max((len(i) for v in attr_domains.values() for i in v), default=0),
        attribute_value=value_size,
        attribute_item=item_size,
        capacity_domains=len(cap_domains),
        capacity_domain_length=max((len(d) for d in cap_domains), default=0),
        capacities_per_domain=max((len(v) for v in cap_domains.values()), default=0),
        capacity_id_length=max((len(i) for v in cap_domains.values() for i in v), default=0),
    )
