"""The API server's validation of the resource.k8s.io objects we read.

Users feed dra-solver the objects their cluster holds, or manifests they are about to apply. An
object the API server would reject must be rejected here too, with the same field path and the
same wording (``spec.devices.requests[0].exactly.count: Invalid value: 0: must be greater than
zero``), and an object it accepts must be accepted, or every comparison with upstream's allocator
starts from different inputs. So this module re-states upstream's rules
(``pkg/apis/resource/validation/validation.go`` in kubernetes/kubernetes, with the limits of
``k8s.io/api/resource/v1``) for objects being created: names, one-of fields, counts, selectors,
tolerations, taints, constraints, configuration, consumable-capacity request policies, counters
and every size limit.

The checks are structural and independent of feature gates (the allocator decides what a disabled
feature means). Like the API server, all problems of one object are collected, not just the
first. CEL selectors are compiled with ``model.cel`` (``default_selector_check``,
``selector_check_for``), or with a caller-given check.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.cel import (
    CEL_SELECTOR_EXPRESSION_MAX_COST,
    CelCompileError,
    CelEnvironment,
    CelFeatures,
)
from dra_solver.model.decode import describe_document
from dra_solver.model.errors import (
    MAX_STRUCTURED_CHARS,
    FieldPath,
    InvalidInput,
    InvalidInputs,
    clip,
    clip_lines,
    quote,
)
from dra_solver.model.quantity import QuantityError, parse_quantity_field

# --- limits (k8s.io/api/resource/v1) ---------------------------------------------------------

DEVICE_REQUESTS_MAX = 32
DEVICE_CONSTRAINTS_MAX = 32
DEVICE_CONFIG_MAX = 32
DEVICE_SELECTORS_MAX = 32
DEVICE_TOLERATIONS_MAX = 16
ALLOCATION_RESULTS_MAX = 32
ALLOCATION_CONFIG_MAX = 2 * DEVICE_CONFIG_MAX  # class + claim configuration
RESERVED_FOR_MAX = 256
SLICE_MAX_DEVICES = 128
SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES = 64
SLICE_MAX_COUNTER_SETS = 8
SLICE_MAX_COUNTERS_PER_SET = 32
SLICE_MAX_COUNTER_CONSUMPTIONS_PER_DEVICE = 2
SLICE_MAX_COUNTERS_PER_CONSUMPTION = 32
SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE = 32
SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE = 48
DEVICE_TAINTS_MAX = 16
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH = 64
DEVICE_MAX_DOMAIN_LENGTH = 63
DEVICE_MAX_ID_LENGTH = 32
DRIVER_NAME_MAX_LENGTH = 63
POOL_NAME_MAX_LENGTH = 253
BINDING_CONDITIONS_MAX = 4
BINDING_FAILURE_CONDITIONS_MAX = 4
CAPACITY_VALID_VALUES_MAX = 10
CEL_SELECTOR_MAX_LENGTH = 10 * 1024
CEL_SELECTOR_MAX_COST = CEL_SELECTOR_EXPRESSION_MAX_COST
OPAQUE_PARAMETERS_MAX_LENGTH = 10 * 1024
ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS = 8
ANNOTATIONS_MAX_TOTAL_SIZE = 256 * 1024

_ATTRIBUTE_KEY_MAX_LENGTH = DEVICE_MAX_DOMAIN_LENGTH + 1 + DEVICE_MAX_ID_LENGTH
_DNS1123_LABEL_MAX_LENGTH = 63
_DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_QUALIFIED_NAME_MAX_LENGTH = 63
_LABEL_VALUE_MAX_LENGTH = 63
_MAX_INT64 = 2**63 - 1

ALLOCATION_MODES = ("All", "ExactCount")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")  # sorted, as upstream lists them
CONFIG_SOURCES = ("FromClaim", "FromClass")

SelectorCheck = Callable[[str], "str | None"]
"""Compiles one CEL selector expression; returns the compile error, or None when it compiles.
Returning :data:`CEL_COST_EXCEEDED` reports the expression as too expensive instead."""

CEL_COST_EXCEEDED = "too complex, exceeds cost limit"

# --- apimachinery name rules -----------------------------------------------------------------

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_C_IDENTIFIER_FMT = "[A-Za-z_][A-Za-z0-9_]*"
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_C_IDENTIFIER_RE = re.compile(_C_IDENTIFIER_FMT)
_SEMVER_NUMERIC = r"(0|[1-9]\d*)"
_SEMVER_PRERELEASE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER_BUILD = r"[0-9a-zA-Z-]+"
_SEMVER_RE = re.compile(
    rf"{_SEMVER_NUMERIC}\.{_SEMVER_NUMERIC}\.{_SEMVER_NUMERIC}"
    rf"(-{_SEMVER_PRERELEASE}(\.{_SEMVER_PRERELEASE})*)?"
    rf"(\+{_SEMVER_BUILD}(\.{_SEMVER_BUILD})*)?",
    re.ASCII,
)
_UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_UUID_COMPACT_RE = re.compile(r"[0-9a-fA-F]{32}")

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_C_IDENTIFIER_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_'"
)
_REQUEST_REF_MSG = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    # Upstream's wording, including the double space it puts between examples.
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def dns1123_label_errors(value: str) -> list[str]:
    """Why ``value`` is not a DNS label (RFC 1123), in apimachinery's words; empty if it is."""
    errs = []
    if len(value) > _DNS1123_LABEL_MAX_LENGTH:
        errs.append(_max_len_error(_DNS1123_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Why ``value`` is not a DNS subdomain (RFC 1123); empty if it is."""
    errs = []
    if len(value) > _DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(_max_len_error(_DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """Why ``value`` is not a label key (``[prefix/]name``); empty if it is."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + _max_len_error(_QUALIFIED_NAME_MAX_LENGTH))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a label value; empty if it is."""
    errs = []
    if len(value) > _LABEL_VALUE_MAX_LENGTH:
        errs.append(_max_len_error(_LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs


def _c_identifier_errors(value: str) -> list[str]:
    if _C_IDENTIFIER_RE.fullmatch(value):
        return []
    return [_regex_error(_C_IDENTIFIER_MSG, _C_IDENTIFIER_FMT, "my_name", "MY_NAME", "MyName")]


def _name_prefix_errors(value: str) -> list[str]:
    # generateName may end in '-': the server appends a suffix before the name is checked.
    if len(value) > 1 and value.endswith("-"):
        value = value[:-2] + "a"
    return dns1123_subdomain_errors(value)


# Inventories repeat a few names and quantities hundreds of thousands of times (every device of
# every node): each distinct text is checked once. Bounded, and keyed by the text alone.
_TEXT_MEMO = 16_384


@functools.lru_cache(maxsize=_TEXT_MEMO)
def _label_problems(value: str) -> tuple[str, ...]:
    return tuple(dns1123_label_errors(value))


@functools.lru_cache(maxsize=_TEXT_MEMO)
def _subdomain_problems(value: str) -> tuple[str, ...]:
    return tuple(dns1123_subdomain_errors(value))


def _object_name_problems(value: str) -> tuple[str, ...]:
    """``_subdomain_problems`` for an object's own name, remembered only when it has some:
    names are mostly distinct (every claim of every pod): each evicted an entry of the full
    memo, whose table was rebuilt now and then, inside a call (in process, three of 1,500
    whole-GPU Schedules took 1.0-2.6 ms instead of 0.3)."""
    if len(value) <= _DNS1123_SUBDOMAIN_MAX_LENGTH and _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        return ()
    return _subdomain_problems(value)


@functools.lru_cache(maxsize=_TEXT_MEMO)
def _qualified_name_problems(value: str) -> tuple[str, ...]:
    return tuple(qualified_name_errors(value))


@functools.lru_cache(maxsize=_TEXT_MEMO)
def _label_value_problems(value: str) -> tuple[str, ...]:
    return tuple(label_value_errors(value))


@functools.lru_cache(maxsize=_TEXT_MEMO)
def _c_identifier_problems(value: str) -> tuple[str, ...]:
    return tuple(_c_identifier_errors(value))


# --- quantities ------------------------------------------------------------------------------

def parse_quantity_value(text: str) -> Fraction:
    """The exact value of a quantity field, parsed by the one quantity parser
    (``model.quantity.parse_quantity_field``: the API server's grammar, blanks and rounding);
    raises ValueError with apimachinery's message otherwise.

    Validation only needs exact comparisons and arithmetic, so a Fraction is enough here.
    """
    try:
        return parse_quantity_field(text).to_fraction()
    except QuantityError as err:
        raise ValueError(str(err)) from None


@functools.lru_cache(maxsize=_TEXT_MEMO)
def _quantity_or_problem(text: str) -> Fraction | str:
    """:func:`parse_quantity_value`, remembered: the value, or why it does not parse."""
    try:
        return parse_quantity_value(text)
    except ValueError as err:
        return str(err)


def _ceil_int(value: Fraction) -> int:
    # Quantity.Value(): the value rounded up to an integer.
    return math.ceil(value)


# --- error collection ------------------------------------------------------------------------


def _key(path: FieldPath, key: str, *, truncate: int = 0) -> FieldPath:
    """``path[key]``: a map entry, rendered like apimachinery's ``field.Path.Key``."""
    if truncate:
        key = _truncate(key, truncate)
    if not path:
        return (f"[{key}]",)
    last = path[-1]
    if isinstance(last, int):
        return (*path, f"[{key}]")
    return (*path[:-1], f"{last}[{key}]")


def _truncate(text: str, max_len: int) -> str:
    max_len = max(max_len, 16)
    if len(text) <= max_len:
        return text
    remaining = max_len - 3
    return text[: (remaining + 1) // 2] + "..." + text[len(text) - remaining // 2 :]


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def show_value(value: Any) -> str:
    """A value the way field errors print it: strings quoted, numbers and booleans bare."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, o.K8sModel):
        value = value.to_api()
    return clip(json.dumps(value, sort_keys=True, separators=(",", ":"), default=str), MAX_STRUCTURED_CHARS)


class _Report:
    """Collects the field errors of one object, worded like apimachinery's ``field.Error``."""

    def __init__(self, obj: str) -> None:
        self.obj = obj
        self.errors: list[InvalidInput] = []

    def _add(self, path: FieldPath, detail: str) -> None:
        self.errors.append(InvalidInput(self.obj, path, detail))

    def required(self, path: FieldPath, detail: str = "") -> None:
        self._add(path, f"Required value: {detail}" if detail else "Required value")

    def invalid(self, path: FieldPath, value: Any, detail: str) -> None:
        self._add(path, f"Invalid value: {show_value(value)}: {detail}")

    def not_supported(self, path: FieldPath, value: Any, supported: Sequence[str]) -> None:
        values = ", ".join(_go_quote(s) for s in supported)
        self._add(path, f"Unsupported value: {show_value(value)}: supported values: {values}")

    def too_many(self, path: FieldPath, actual: int, maximum: int) -> None:
        items = "item" if maximum == 1 else "items"
        self._add(path, f"Too many: {actual}: must have at most {maximum} {items}")

    def too_long(self, path: FieldPath, maximum: int) -> None:
        unit = "byte" if maximum == 1 else "bytes"
        self._add(path, f"Too long: may not be more than {maximum} {unit}")

    def duplicate(self, path: FieldPath, value: Any) -> None:
        self._add(path, f"Duplicate value: {show_value(value)}")

    def forbidden(self, path: FieldPath, detail: str) -> None:
        self._add(path, f"Forbidden: {detail}")

    def not_found(self, path: FieldPath, value: Any) -> None:
        self._add(path, f"Not found: {show_value(value)}")

    def each_invalid(self, path: FieldPath, value: str, messages: Iterable[str]) -> None:
        for msg in messages:
            self.invalid(path, value, msg)


# --- CEL -------------------------------------------------------------------------------------


ALL_CEL_FEATURES = CelFeatures(consumable_capacity=True, list_type_attributes=True)
"""What structural validation compiles selectors with, whatever the gates."""


def default_selector_check() -> SelectorCheck:
    """A compile check with an environment of its own that has every CEL feature on:
    structural validation is gate-independent (upstream's API server compiles with the
    cluster's gates, normally all of these on)."""
    return _compile_check(CelEnvironment(features=ALL_CEL_FEATURES))


def selector_check_for(cel: CelEnvironment) -> SelectorCheck:
    """Compile selectors for validation with ``cel`` when it has every CEL feature on and the
    API server's cost limit, as the API server validates (its compile cache is then reused
    across calls); otherwise with an environment of its own that has."""
    if cel.features != ALL_CEL_FEATURES or cel.cost_limit != CEL_SELECTOR_EXPRESSION_MAX_COST:
        return default_selector_check()
    return _compile_check(cel)


def _compile_check(cel: CelEnvironment) -> SelectorCheck:
    def check(expression: str) -> str | None:
        try:
            compiled = cel.compile(expression)
        except CelCompileError as err:
            message = clip_lines(str(err))
            return message if message.startswith("compilation failed") else f"compilation failed: {message}"
        return CEL_COST_EXCEEDED if compiled.max_cost > CEL_SELECTOR_MAX_COST else None

    return check


class ValidationMemo:
    """What one validation pass over many objects learned about shared ``Device`` objects.

    Inventories decode identical devices into one shared object (thousands of nodes publish
    the same devices), so the problems of each such object (with field paths relative to the
    device) are found once per pass and re-rooted at every place it appears. Keyed by
    identity, holding each device so that no identity is reused while the memo lives: create
    one per pass and drop it afterwards.
    """

    __slots__ = ("_derived", "_devices", "_lists")

    def __init__(self) -> None:
        self._devices: dict[tuple[int, bool], tuple[o.Device, tuple[tuple[FieldPath, str], ...]]] = {}
        self._derived: dict[int, tuple[o.Device, o.Device]] = {}
        self._lists: dict[tuple[bool, tuple[int, ...]], tuple[tuple[o.Device, ...], tuple[tuple[FieldPath, str], ...]]] = {}

    def derived(self, device: o.Device, template: o.Device) -> None:
        """Declare that ``device`` is ``template`` with other attribute values and every other
        field the same (a decoder's copy): when the template has no problem and each of the
        device's attributes is one plain scalar, the device has none either (same names, same
        count, values that need no check), found without checking it field by field."""
        self._derived[id(device)] = (device, template)

    def list_problems(
        self,
        devices: Sequence[o.Device],
        per_device_node_selection: bool,
        check: Callable[[], tuple[tuple[FieldPath, str], ...]],
    ) -> tuple[tuple[FieldPath, str], ...]:
        """The problems of a slice's device list (paths relative to the list), found once per
        list of the same device objects in the same order: identical nodes' slices share them
        all (``service.inventory.ObjectDecoder``). Each entry holds its devices, so equal
        identities mean the same objects."""
        key = (per_device_node_selection, tuple(map(id, devices)))
        hit = self._lists.get(key)
        if hit is None:
            hit = self._lists[key] = (tuple(devices), check())
        return hit[1]

    def device_problems(
        self,
        device: o.Device,
        per_device_node_selection: bool,
        check: Callable[[o.Device], tuple[tuple[FieldPath, str], ...]],
    ) -> tuple[tuple[FieldPath, str], ...]:
        key = (id(device), per_device_node_selection)
        hit = self._devices.get(key)
        if hit is not None and hit[0] is device:
            return hit[1]
        derived = self._derived.get(id(device))
        if (
            derived is not None
            and derived[0] is device
            and all(map(_plain_attribute, (device.attributes or {}).values()))
            and not self.device_problems(derived[1], per_device_node_selection, check)
        ):
            problems: tuple[tuple[FieldPath, str], ...] = ()
        else:
            problems = check(device)
        self._devices[key] = (device, problems)
        return problems


class _Validator:
    """Validation of one object; methods mirror the upstream functions they re-state."""

    def __init__(self, obj: str, *, selector_check: SelectorCheck | None, memo: ValidationMemo | None = None) -> None:
        self.r = _Report(obj)
        self._selector_check = selector_check
        self._compiled: dict[str, str | None] = {}
        self._memo = memo

    # names -----------------------------------------------------------------------------------

    def driver_name(self, name: str, path: FieldPath) -> None:
        if not name:
            self.r.required(path)
            return
        if len(name) > DRIVER_NAME_MAX_LENGTH:
            self.r.too_long(path, DRIVER_NAME_MAX_LENGTH)
        self.r.each_invalid(path, name, _subdomain_problems(name.lower()))

    def pool_name(self, name: str, path: FieldPath) -> None:
        if not name:
            self.r.required(path)
            return
        if len(name) > POOL_NAME_MAX_LENGTH:
            self.r.too_long(path, POOL_NAME_MAX_LENGTH)
        for part in name.split("/"):
            self.r.each_invalid(path, part, _subdomain_problems(part))

    def label(self, name: str, path: FieldPath) -> None:
        """DNS label: device, request, counter and counter-set names."""
        self.r.each_invalid(path, name, _label_problems(name))

    def subdomain(self, name: str, path: FieldPath) -> None:
        self.r.each_invalid(path, name, _subdomain_problems(name))

    def device_class_name(self, name: str, path: FieldPath) -> None:
        if not name:
            self.r.required(path)
        else:
            self.subdomain(name, path)

    def label_name(self, name: str, path: FieldPath) -> None:
        self.r.each_invalid(path, name, _qualified_name_problems(name))

    def label_value(self, value: str, path: FieldPath) -> None:
        self.r.each_invalid(path, value, _label_value_problems(value))

    def c_identifier(self, name: str, path: FieldPath) -> None:
        if len(name) > DEVICE_MAX_ID_LENGTH:
            self.r.too_long(path, DEVICE_MAX_ID_LENGTH)
        self.r.each_invalid(path, name, _c_identifier_problems(name))

    def qualified_name(self, name: str, path: FieldPath) -> None:
        """Attribute/capacity name: a C identifier, optionally behind ``domain/``."""
        parts = name.split("/")
        if len(parts) == 1:
            self.c_identifier(parts[0], path)
        elif len(parts) == 2:
            domain, ident = parts
            if not domain:
                self.r.invalid(path, "", "the domain must not be empty")
            else:
                self.driver_name(domain, path)
            if not ident:
                self.r.invalid(path, "", "the name must not be empty")
            else:
                self.c_identifier(ident, path)
        else:
            self.r.invalid(path, name, "must not contain more than one slash")

    def fully_qualified_name(self, name: str, path: FieldPath) -> None:
        self.qualified_name(name, path)
        if "/" not in name:
            self.r.invalid(
                path,
                name,
                "a fully qualified name must be a domain and a name separated by a slash",
            )

    def node_name(self, name: str, path: FieldPath) -> None:
        self.subdomain(name, path)

    def uid(self, uid: str, path: FieldPath) -> None:
        # Parseable forms (braces, urn:uuid:, no dashes) still have to be the normalized one.
        core = uid
        if len(uid) == 45 and uid[:9].lower() == "urn:uuid:":
            core = uid[9:]
        elif len(uid) == 38 and uid[0] == "{" and uid[-1] == "}":
            core = uid[1:-1]
        if _UUID_RE.fullmatch(core) or _UUID_COMPACT_RE.fullmatch(core):
            if len(uid) != 36 or uid != uid.lower():
                self.r.invalid(
                    path,
                    uid,
                    "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` "
                    "with lowercase hexadecimal characters",
                )
            return
        reason = (
            "invalid UUID format"
            if len(uid) in (32, 36, 38, 45)
            else f"invalid UUID length: {len(uid)}"
        )
        self.r.invalid(path, uid, f"error validating uid: {reason}")

    def quantity(self, text: str | None, path: FieldPath) -> Fraction | None:
        """The value of a quantity field, or None (after reporting) when it does not parse."""
        if text is None:
            return None
        value = _quantity_or_problem(text)
        if isinstance(value, str):
            self.r.invalid(path, text, value)
            return None
        return value

    # metadata --------------------------------------------------------------------------------

    def object_meta(self, meta: o.ObjectMeta, *, namespaced: bool) -> None:
        path: FieldPath = ("metadata",)
        if meta.generate_name:
            self.r.each_invalid(
                (*path, "generateName"), meta.generate_name, _name_prefix_errors(meta.generate_name)
            )
        if not meta.name:
            if not meta.generate_name:
                self.r.required((*path, "name"), "name or generateName is required")
        else:
            self.r.each_invalid((*path, "name"), meta.name, _object_name_problems(meta.name))
        # A missing namespace is filled in from the request (kubectl's context), and the API
        # server drops a namespace on cluster-scoped kinds, so only a malformed one is an error.
        if namespaced and meta.namespace:
            self.r.each_invalid(
                (*path, "namespace"), meta.namespace, dns1123_label_errors(meta.namespace)
            )
        if meta.generation is not None and meta.generation < 0:
            self.r.invalid(
                (*path, "generation"), meta.generation, "must be greater than or equal to 0"
            )
        self.labels(meta.labels, (*path, "labels"))
        self.annotations(meta.annotations, (*path, "annotations"))

    def labels(self, labels: Mapping[str, str] | None, path: FieldPath) -> None:
        for key in sorted(labels or {}):
            self.label_name(key, path)
            self.r.each_invalid(path, (labels or {})[key], _label_value_problems((labels or {})[key]))

    def annotations(self, annotations: Mapping[str, str] | None, path: FieldPath) -> None:
        total = 0
        for key in sorted(annotations or {}):
            self.r.each_invalid(path, key, _qualified_name_problems(key.lower()))
            total += len(key) + len((annotations or {})[key])
        if total > ANNOTATIONS_MAX_TOTAL_SIZE:
            self.r.too_long(path, ANNOTATIONS_MAX_TOTAL_SIZE)

    def template_meta(self, meta: o.ObjectMeta | None, path: FieldPath) -> None:
        if meta is None:
            return
        self.annotations(meta.annotations, (*path, "annotations"))
        self.labels(meta.labels, (*path, "labels"))
        # Only labels and annotations get copied into the claim; anything else is refused.
        for field_name, value in meta.model_dump(by_alias=True, exclude_none=True).items():
            if field_name in ("labels", "annotations"):
                continue
            if value in ("", 0, [], {}):
                continue
            self.r.invalid(
                (*path, field_name), value, "cannot be set for a resource claim template"
            )

    # node selectors --------------------------------------------------------------------------

    def node_selector(self, selector: o.NodeSelector, path: FieldPath) -> None:
        terms_path = (*path, "nodeSelectorTerms")
        if not selector.node_selector_terms:
            self.r.required(terms_path, "must have at least one node selector term")
            return
        for i, term in enumerate(selector.node_selector_terms):
            for j, req in enumerate(term.match_expressions or []):
                self._node_selector_requirement(req, (*terms_path, i, "matchExpressions", j))
            for j, req in enumerate(term.match_fields or []):
                self._node_field_requirement(req, (*terms_path, i, "matchFields", j))

    def _node_selector_requirement(self, req: o.NodeSelectorRequirement, path: FieldPath) -> None:
        values = req.values or []
        if req.operator in ("In", "NotIn"):
            if not values:
                self.r.required(
                    (*path, "values"), "must be specified when `operator` is 'In' or 'NotIn'"
                )
        elif req.operator in ("Exists", "DoesNotExist"):
            if values:
                self.r.forbidden(
                    (*path, "values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
        elif req.operator in ("Gt", "Lt"):
            if len(values) != 1:
                self.r.required(
                    (*path, "values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                )
        else:
            self.r.invalid((*path, "operator"), req.operator, "not a valid selector operator")
        self.label_name(req.key, (*path, "key"))
        for k, value in enumerate(values):
            self.r.each_invalid((*path, "values", k), value, label_value_errors(value))

    def _node_field_requirement(self, req: o.NodeSelectorRequirement, path: FieldPath) -> None:
        values = req.values or []
        if req.operator in ("In", "NotIn"):
            if len(values) != 1:
                self.r.required(
                    (*path, "values"),
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )
        else:
            self.r.invalid((*path, "operator"), req.operator, "not a valid selector operator")
        if req.key != "metadata.name":
            self.r.invalid((*path, "key"), req.key, "not a valid field selector key")
        else:
            for k, value in enumerate(values):
                self.r.each_invalid((*path, "values", k), value, dns1123_subdomain_errors(value))

    # selectors and configuration --------------------------------------------------------------

    def selectors(self, selectors: Sequence[o.DeviceSelector] | None, path: FieldPath) -> None:
        if selectors is None:
            return
        if len(selectors) > DEVICE_SELECTORS_MAX:
            self.r.too_many(path, len(selectors), DEVICE_SELECTORS_MAX)
            return
        for i, selector in enumerate(selectors):
            if selector.cel is None:
                self.r.required((*path, i, "cel"))
            else:
                self.cel_expression(selector.cel.expression, (*path, i, "cel", "expression"))

    def cel_expression(self, expression: str, path: FieldPath) -> None:
        if len(expression.encode()) > CEL_SELECTOR_MAX_LENGTH:
            self.r.too_long(path, CEL_SELECTOR_MAX_LENGTH)
            return  # upstream does not compile over-long expressions
        if self._selector_check is None:
            return  # the caller asked for structural checks only
        if expression not in self._compiled:
            self._compiled[expression] = self._selector_check(expression)
        problem = self._compiled[expression]
        if problem == CEL_COST_EXCEEDED:
            self.r.forbidden(path, CEL_COST_EXCEEDED)
        elif problem is not None:
            self.r.invalid(path, expression, problem)

    def device_configuration(
        self, opaque: o.OpaqueDeviceConfiguration | None, path: FieldPath
    ) -> None:
        if opaque is None:
            self.r.required((*path, "opaque"))
            return
        opath = (*path, "opaque")
        self.driver_name(opaque.driver, (*opath, "driver"))
        self.raw_extension(
            opaque.parameters, (*opath, "parameters"), max_length=OPAQUE_PARAMETERS_MAX_LENGTH
        )

    def raw_extension(self, value: Any, path: FieldPath, *, max_length: int) -> None:
        if value is None:
            self.r.required(path)
            return
        raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
        if len(raw.encode()) > max_length:
            self.r.too_long(path, max_length)
        elif not isinstance(value, dict):
            self.r.invalid(path, "<value omitted>", "must be a valid JSON object")

    # tolerations, taints, binding conditions --------------------------------------------------

    def tolerations(
        self, tolerations: Sequence[o.DeviceToleration] | None, path: FieldPath
    ) -> None:
        if tolerations is None:
            return
        if len(tolerations) > DEVICE_TOLERATIONS_MAX:
            self.r.too_many(path, len(tolerations), DEVICE_TOLERATIONS_MAX)
            return
        for i, toleration in enumerate(tolerations):
            self.toleration(toleration, (*path, i))

    def toleration(self, toleration: o.DeviceToleration, path: FieldPath) -> None:
        if toleration.key:
            self.label_name(toleration.key, (*path, "key"))
        operator = "Equal" if toleration.operator is None else toleration.operator  # the default
        value = toleration.value or ""
        if operator == "Exists":
            if value:
                self.r.invalid((*path, "value"), value, "must be empty for operator `Exists`")
        elif operator == "Equal":
            self.label_value(value, (*path, "value"))
        elif operator == "":
            self.r.required((*path, "operator"))
        else:
            self.r.not_supported((*path, "operator"), operator, TOLERATION_OPERATORS)
        if toleration.effect and toleration.effect not in TAINT_EFFECTS:
            self.r.not_supported((*path, "effect"), toleration.effect, TAINT_EFFECTS)

    def taint(self, taint: o.DeviceTaint, path: FieldPath) -> None:
        self.label_name(taint.key, (*path, "key"))
        if taint.value:
            self.label_value(taint.value, (*path, "value"))
        if not taint.effect:
            self.r.required((*path, "effect"))
        elif taint.effect not in TAINT_EFFECTS:
            self.r.not_supported((*path, "effect"), taint.effect, TAINT_EFFECTS)

    def binding_conditions(
        self, conditions: Sequence[str] | None, failures: Sequence[str] | None, path: FieldPath
    ) -> None:
        conds, fails = list(conditions or []), list(failures or [])
        for field_name, items, limit in (
            ("bindingConditions", conds, BINDING_CONDITIONS_MAX),
            ("bindingFailureConditions", fails, BINDING_FAILURE_CONDITIONS_MAX),
        ):
            if len(items) > limit:
                self.r.too_many((*path, field_name), len(items), limit)
            else:
                for i, item in enumerate(items):
                    self.label_name(item, (*path, field_name, i))
        seen: set[str] = set()
        for i, item in enumerate(conds):
            if item in seen:
                self.r.duplicate((*path, "bindingConditions", i), item)
            seen.add(item)
        seen_fail: set[str] = set()
        for i, item in enumerate(fails):
            if item in seen_fail:
                self.r.duplicate((*path, "bindingFailureConditions", i), item)
            seen_fail.add(item)
            if item in seen:
                self.r.invalid(
                    (*path, "bindingFailureConditions", i),
                    item,
                    "bindingFailureConditions must not overlap with bindingConditions",
                )
        if not conds and fails:
            self.r.invalid(
                (*path, "bindingConditions"),
                conds,
                "bindingConditions are required to use bindingFailureConditions",
            )
        if not fails and conds:
            self.r.invalid(
                (*path, "bindingFailureConditions"),
                fails,
                "bindingFailureConditions are required to use bindingConditions",
            )

    # ResourceClaim ----------------------------------------------------------------------------

    def claim_spec(self, spec: o.ResourceClaimSpec, path: FieldPath) -> None:
        devices = spec.devices
        dpath = (*path, "devices")
        names = _request_names(devices)
        requests = devices.requests
        if requests is not None:
            rpath = (*dpath, "requests")
            if len(requests) > DEVICE_REQUESTS_MAX:
                self.r.too_many(rpath, len(requests), DEVICE_REQUESTS_MAX)
            else:
                for i, request in enumerate(requests):
                    self.device_request(request, (*rpath, i))
                self._duplicates([r.name for r in requests], rpath)
        constraints = devices.constraints
        if constraints is not None:
            cpath = (*dpath, "constraints")
            if len(constraints) > DEVICE_CONSTRAINTS_MAX:
                self.r.too_many(cpath, len(constraints), DEVICE_CONSTRAINTS_MAX)
            else:
                for i, constraint in enumerate(constraints):
                    self.constraint(constraint, (*cpath, i), names)
        configs = devices.config
        if configs is not None:
            fpath = (*dpath, "config")
            if len(configs) > DEVICE_CONFIG_MAX:
                self.r.too_many(fpath, len(configs), DEVICE_CONFIG_MAX)
            else:
                for i, config in enumerate(configs):
                    self.request_refs(config.requests, (*fpath, i, "requests"), names)
                    self.device_configuration(config.opaque, (*fpath, i))

    def _duplicates(self, keys: Sequence[str], path: FieldPath) -> None:
        seen: set[str] = set()
        for i, key in enumerate(keys):
            if key in seen:
                self.r.duplicate((*path, i), key)
            seen.add(key)

    def device_request(self, request: o.DeviceRequest, path: FieldPath) -> None:
        self.label(request.name, (*path, "name"))
        has_first = bool(request.first_available)
        has_exactly = request.exactly is not None
        if not has_first and not has_exactly:
            self.r.required(path, "exactly one of `exactly` or `firstAvailable` is required")
        elif has_first and has_exactly:
            self.r.invalid(
                path,
                None,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )
        elif request.exactly is not None:
            self.exact_request(request.exactly, (*path, "exactly"))
        else:
            subs = request.first_available or []
            fpath = (*path, "firstAvailable")
            if len(subs) > o.FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE:
                self.r.too_many(fpath, len(subs), o.FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE)
                return
            for i, sub in enumerate(subs):
                spath = (*fpath, i)
                self.label(sub.name, (*spath, "name"))
                self.device_class_name(sub.device_class_name, (*spath, "deviceClassName"))
                self.selectors(sub.selectors, (*spath, "selectors"))
                self.allocation_mode(sub.allocation_mode, sub.count, spath)
                self.tolerations(sub.tolerations, (*spath, "tolerations"))
                self.capacity_requests(sub.capacity, (*spath, "capacity"))
            self._duplicates([s.name for s in subs], fpath)

    def exact_request(self, request: o.ExactDeviceRequest, path: FieldPath) -> None:
        self.device_class_name(request.device_class_name, (*path, "deviceClassName"))
        self.selectors(request.selectors, (*path, "selectors"))
        self.allocation_mode(request.allocation_mode, request.count, path)
        self.tolerations(request.tolerations, (*path, "tolerations"))
        self.capacity_requests(request.capacity, (*path, "capacity"))

    def allocation_mode(self, mode: str | None, count: int | None, path: FieldPath) -> None:
        # Unset fields read as their API defaults (ExactCount, count 1), as after decoding.
        mode = "ExactCount" if mode is None or mode == "" else mode
        if mode == "All":
            if count is not None and count != 0:
                self.r.invalid(
                    (*path, "count"), count, "must not be specified when allocationMode is 'All'"
                )
        elif mode == "ExactCount":
            effective = 1 if count is None else count
            if effective <= 0:
                self.r.invalid((*path, "count"), effective, "must be greater than zero")
        else:
            self.r.not_supported((*path, "allocationMode"), mode, ALLOCATION_MODES)

    def capacity_requests(self, capacity: o.CapacityRequirements | None, path: FieldPath) -> None:
        if capacity is None:
            return
        rpath = (*path, "requests")
        for name in sorted(capacity.requests or {}):
            self.quantity(
                (capacity.requests or {})[name],
                _key(rpath, name, truncate=_ATTRIBUTE_KEY_MAX_LENGTH),
            )

    def request_refs(
        self, refs: Sequence[str] | None, path: FieldPath, names: _RequestNames
    ) -> None:
        if refs is None:
            return
        if len(refs) > DEVICE_REQUESTS_MAX:
            self.r.too_many(path, len(refs), DEVICE_REQUESTS_MAX)
            return
        for i, ref in enumerate(refs):
            self.request_ref(ref, (*path, i), names)
        self._duplicates(list(refs), path)

    def request_ref(self, ref: str, path: FieldPath, names: _RequestNames) -> None:
        segments = ref.split("/")
        if len(segments) > 2:
            self.r.invalid(path, ref, _REQUEST_REF_MSG)
            return
        for segment in segments:
            self.label(segment, path)
        if not names.has(ref):
            self.r.invalid(path, ref, _REQUEST_REF_MSG)

    def constraint(
        self, constraint: o.DeviceConstraint, path: FieldPath, names: _RequestNames
    ) -> None:
        self.request_refs(constraint.requests, (*path, "requests"), names)
        if constraint.match_attribute is not None:
            self.fully_qualified_name(constraint.match_attribute, (*path, "matchAttribute"))
        elif constraint.distinct_attribute is not None:
            self.fully_qualified_name(constraint.distinct_attribute, (*path, "distinctAttribute"))
        else:
            # Upstream's wording (with DRAConsumableCapacity on), odd as it is for "none set".
            self.r.required(
                path,
                'exactly one of "matchAttribute" or "distinctAttribute" is required, but multiple fields are set',
            )

    def claim_status(
        self, status: o.ResourceClaimStatus, path: FieldPath, names: _RequestNames
    ) -> None:
        # The API server only checks a status when it is written (a claim's create drops it), so
        # this re-states what a status update would have been held to, minus reservedFor entry
        # details that published objects often trim.
        reserved = status.reserved_for
        rpath = (*path, "reservedFor")
        if reserved is not None:
            if len(reserved) > RESERVED_FOR_MAX:
                self.r.too_many(rpath, len(reserved), RESERVED_FOR_MAX)
            if reserved and status.allocation is None:
                self.r.forbidden(rpath, "may not be specified when `allocated` is not set")
        allocated: set[tuple[str, str, str, str | None]] = set()
        if status.allocation is not None:
            apath = (*path, "allocation")
            devices = status.allocation.devices or o.DeviceAllocationResult()
            self.allocation_devices(devices, (*apath, "devices"), names)
            allocated = {(r.driver, r.pool, r.device, r.share_id) for r in devices.results or []}
            if status.allocation.node_selector is not None:
                self.node_selector(status.allocation.node_selector, (*apath, "nodeSelector"))
        for i, device in enumerate(status.devices or []):
            self.device_status(device, (*path, "devices", i), allocated)

    def allocation_devices(
        self, devices: o.DeviceAllocationResult, path: FieldPath, names: _RequestNames
    ) -> None:
        results = devices.results
        if results is not None:
            rpath = (*path, "results")
            if len(results) > ALLOCATION_RESULTS_MAX:
                self.r.too_many(rpath, len(results), ALLOCATION_RESULTS_MAX)
            else:
                for i, result in enumerate(results):
                    p = (*rpath, i)
                    self.request_ref(result.request, (*p, "request"), names)
                    self.driver_name(result.driver, (*p, "driver"))
                    self.pool_name(result.pool, (*p, "pool"))
                    self.label(result.device, (*p, "device"))
                    self.binding_conditions(
                        result.binding_conditions, result.binding_failure_conditions, p
                    )
                    for j, toleration in enumerate(result.tolerations or []):
                        self.toleration(toleration, (*p, "tolerations", j))
                    if result.share_id is not None:
                        self.uid(result.share_id, (*p, "shareID"))
                    for name in sorted(result.consumed_capacity or {}):
                        self.quantity(
                            (result.consumed_capacity or {})[name],
                            _key(
                                (*p, "consumedCapacity"), name, truncate=_ATTRIBUTE_KEY_MAX_LENGTH
                            ),
                        )
        configs = devices.config
        if configs is not None:
            cpath = (*path, "config")
            if len(configs) > ALLOCATION_CONFIG_MAX:
                self.r.too_many(cpath, len(configs), ALLOCATION_CONFIG_MAX)
            else:
                for i, config in enumerate(configs):
                    p = (*cpath, i)
                    if not config.source:
                        self.r.required((*p, "source"))
                    elif config.source not in CONFIG_SOURCES:
                        self.r.not_supported((*p, "source"), config.source, CONFIG_SOURCES)
                    self.request_refs(config.requests, (*p, "requests"), names)
                    self.device_configuration(config.opaque, p)

    def device_status(
        self,
        device: Mapping[str, Any],
        path: FieldPath,
        allocated: set[tuple[str, str, str, str | None]],
    ) -> None:
        driver, pool, name = (str(device.get(k) or "") for k in ("driver", "pool", "device"))
        raw_share = device.get("shareID")
        share_id = None if raw_share is None else str(raw_share)
        self.driver_name(driver, (*path, "driver"))
        self.pool_name(pool, (*path, "pool"))
        self.label(name, (*path, "device"))
        if share_id is not None:
            self.uid(share_id, (*path, "shareID"))
        if (driver, pool, name, share_id) not in allocated:
            shown = f"{driver}/{pool}/{name}" + (f"/{share_id}" if share_id else "")
            self.r.invalid(path, shown, "must be an allocated device in the claim")
        conditions = device.get("conditions")
        if (
            isinstance(conditions, list)
            and len(conditions) > ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS
        ):
            self.r.too_many(
                (*path, "conditions"), len(conditions), ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS
            )

    # ResourceSlice ----------------------------------------------------------------------------

    def slice_spec(self, spec: o.ResourceSliceSpec, path: FieldPath) -> None:
        self.driver_name(spec.driver, (*path, "driver"))
        pool_path = (*path, "pool")
        self.pool_name(spec.pool.name, (*pool_path, "name"))
        if spec.pool.resource_slice_count <= 0:
            self.r.invalid(
                (*pool_path, "resourceSliceCount"),
                spec.pool.resource_slice_count,
                "must be greater than zero",
            )
        if spec.pool.generation < 0:
            self.r.invalid(
                (*pool_path, "generation"),
                spec.pool.generation,
                "must be greater than or equal to zero",
            )

        chosen: list[str] = []
        if spec.node_name is not None:
            if spec.node_name:
                chosen.append("`nodeName`")
                self.node_name(spec.node_name, (*path, "nodeName"))
            else:
                self.r.invalid(
                    (*path, "nodeName"), "", "must be either unset or set to a non-empty string"
                )
        if spec.node_selector is not None:
            chosen.append("`nodeSelector`")
            self.node_selector(spec.node_selector, (*path, "nodeSelector"))
            terms = spec.node_selector.node_selector_terms
            if len(terms) != 1:
                # Merging the selectors of devices from several slices needs single terms.
                shown = [t.to_api() for t in terms] if terms else None
                self.r.invalid(
                    (*path, "nodeSelector", "nodeSelectorTerms"),
                    shown,
                    "must have exactly one node selector term",
                )
        for field_name, flag in (
            ("allNodes", spec.all_nodes),
            ("perDeviceNodeSelection", spec.per_device_node_selection),
        ):
            if flag is None:
                continue
            if flag:
                chosen.append(f"`{field_name}`")
            else:
                self.r.invalid((*path, field_name), False, "must be either unset or set to true")
        one_of = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
        if not chosen:
            self.r.required(path, one_of)
        elif len(chosen) > 1:
            self.r.invalid(
                path, "{" + ", ".join(chosen) + "}", one_of + ", but multiple fields are set"
            )

        if spec.shared_counters is not None and spec.devices is not None:
            self.r.invalid(path, "", "only one of `sharedCounters` or `devices` is allowed")

        devices = spec.devices
        if devices is not None:
            dpath = (*path, "devices")
            limit = SLICE_MAX_DEVICES
            # The lower limit only matters above it (the scan is a cost on every slice).
            if len(devices) > SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES and any(
                d.taints or d.consumes_counters or _has_list_attribute(d) for d in devices
            ):
                limit = SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES
            if len(devices) > limit:
                self.r.too_many(dpath, len(devices), limit)
            elif self._memo is None:
                self._device_list(devices, dpath, per_device_node_selection=bool(spec.per_device_node_selection))
            else:
                per_device = bool(spec.per_device_node_selection)

                def check() -> tuple[tuple[FieldPath, str], ...]:
                    alone = _Validator(self.r.obj, selector_check=self._selector_check, memo=self._memo)
                    alone._device_list(devices, (), per_device_node_selection=per_device)
                    return tuple((err.field_path, err.detail) for err in alone.r.errors)

                for relative, detail in self._memo.list_problems(devices, per_device, check):
                    self.r.errors.append(InvalidInput(self.r.obj, (*dpath, *relative), detail))

        counter_sets = spec.shared_counters
        if counter_sets is not None:
            cpath = (*path, "sharedCounters")
            if len(counter_sets) > SLICE_MAX_COUNTER_SETS:
                self.r.too_many(cpath, len(counter_sets), SLICE_MAX_COUNTER_SETS)
            else:
                for i, counter_set in enumerate(counter_sets):
                    self.counter_set(
                        counter_set.name,
                        counter_set.counters,
                        (*cpath, i),
                        name_field="name",
                        limit=SLICE_MAX_COUNTERS_PER_SET,
                    )
                self._duplicates([c.name for c in counter_sets], cpath)

    def _device_list(self, devices: Sequence[o.Device], path: FieldPath, *, per_device_node_selection: bool) -> None:
        for i, device in enumerate(devices):
            self._device_at(device, (*path, i), per_device_node_selection=per_device_node_selection)
        self._duplicates([d.name for d in devices], path)

    def counter_set(
        self,
        name: str,
        counters: Mapping[str, o.Counter],
        path: FieldPath,
        *,
        name_field: str,
        limit: int,
    ) -> None:
        if not name:
            self.r.required((*path, name_field))
        else:
            self.label(name, (*path, name_field))
        cpath = (*path, "counters")
        if not counters:
            self.r.required(cpath)
        elif len(counters) > limit:
            self.r.too_many(cpath, len(counters), limit)
        else:
            for key in sorted(counters):
                self.label(key, cpath)
                self.quantity(
                    counters[key].value,
                    (*_key(cpath, key, truncate=_DNS1123_LABEL_MAX_LENGTH), "value"),
                )

    def _device_at(self, device: o.Device, path: FieldPath, *, per_device_node_selection: bool) -> None:
        """:meth:`device`, through the pass's memo when there is one."""
        if self._memo is None:
            self.device(device, path, per_device_node_selection=per_device_node_selection)
            return

        def check(device: o.Device) -> tuple[tuple[FieldPath, str], ...]:
            alone = _Validator(self.r.obj, selector_check=self._selector_check)
            alone.device(device, (), per_device_node_selection=per_device_node_selection)
            return tuple((err.field_path, err.detail) for err in alone.r.errors)

        for relative, detail in self._memo.device_problems(device, per_device_node_selection, check):
            self.r.errors.append(InvalidInput(self.r.obj, (*path, *relative), detail))

    def device(self, device: o.Device, path: FieldPath, *, per_device_node_selection: bool) -> None:
        self.label(device.name, (*path, "name"))
        attributes = device.attributes or {}
        capacity = device.capacity or {}
        total = len(attributes) + len(capacity)
        if total > SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE:
            self.r.invalid(
                path,
                total,
                f"the total number of attributes and capacities must not exceed {SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE}",
            )
        # Without list values every attribute counts one value: at most `total`, within limits.
        if len(attributes) > SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE or _has_list_attribute(device):
            values = sum(_attribute_value_count(a) for a in attributes.values())
            if values > SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE:
                self.r.invalid(
                    path,
                    values,
                    f"the total number of attribute values must not exceed {SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE}",
                )
        # Names and values are checked in full only when the quick checks (the common, valid
        # case of every device of every node) do not settle them.
        apath = (*path, "attributes")
        for name in sorted(attributes):
            if not _good_qualified_name(name):
                self.qualified_name(name, apath)
            attribute = attributes[name]
            if not _plain_attribute(attribute):
                self.attribute(attribute, _key(apath, name, truncate=_ATTRIBUTE_KEY_MAX_LENGTH))
        cpath = (*path, "capacity")
        shared = bool(device.allow_multiple_allocations)
        for name in sorted(capacity):
            if not _good_qualified_name(name):
                self.qualified_name(name, cpath)
            value = capacity[name]
            if value.request_policy is not None or isinstance(_quantity_or_problem(value.value), str):
                self.capacity(value, _key(cpath, name, truncate=_ATTRIBUTE_KEY_MAX_LENGTH), shared=shared)

        taints = device.taints
        if taints is not None:
            tpath = (*path, "taints")
            if len(taints) > DEVICE_TAINTS_MAX:
                self.r.too_many(tpath, len(taints), DEVICE_TAINTS_MAX)
            else:
                for i, taint in enumerate(taints):
                    self.taint(taint, (*tpath, i))

        consumptions = device.consumes_counters
        if consumptions is not None:
            ccpath = (*path, "consumesCounters")
            if len(consumptions) > SLICE_MAX_COUNTER_CONSUMPTIONS_PER_DEVICE:
                self.r.too_many(
                    ccpath, len(consumptions), SLICE_MAX_COUNTER_CONSUMPTIONS_PER_DEVICE
                )
            else:
                for i, consumption in enumerate(consumptions):
                    self.counter_set(
                        consumption.counter_set,
                        consumption.counters,
                        (*ccpath, i),
                        name_field="counterSet",
                        limit=SLICE_MAX_COUNTERS_PER_CONSUMPTION,
                    )
                self._duplicates([c.counter_set for c in consumptions], ccpath)

        any_node_field = (
            device.node_name is not None
            or device.node_selector is not None
            or device.all_nodes is not None
        )
        if per_device_node_selection:
            chosen: list[str] = []
            if device.node_name is not None:
                if device.node_name:
                    chosen.append("`nodeName`")
                    self.node_name(device.node_name, (*path, "nodeName"))
                else:
                    self.r.invalid((*path, "nodeName"), "", "must not be empty")
            if device.node_selector is not None:
                chosen.append("`nodeSelector`")
                self.node_selector(device.node_selector, (*path, "nodeSelector"))
            if device.all_nodes is not None:
                if device.all_nodes:
                    chosen.append("`allNodes`")
                else:
                    self.r.invalid(
                        (*path, "allNodes"), False, "must be either unset or set to true"
                    )
            one_of = (
                "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"
            )
            if not chosen:
                self.r.required(path, one_of)
            elif len(chosen) > 1:
                self.r.invalid(path, "{" + ", ".join(chosen) + "}", one_of)
        elif any_node_field:
            self.r.invalid(
                path,
                None,
                "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` "
                "is set to true in the ResourceSlice spec",
            )
        self.binding_conditions(device.binding_conditions, device.binding_failure_conditions, path)

    def attribute(self, attribute: o.DeviceAttribute, path: FieldPath) -> None:
        if attribute.string is not None:
            self._attribute_string(attribute.string, (*path, "string"))
        if attribute.version is not None:
            self._attribute_version(attribute.version, (*path, "version"))
        for field_name, items in (
            ("bools", attribute.bools),
            ("ints", attribute.ints),
            ("strings", attribute.strings),
            ("versions", attribute.versions),
        ):
            if items is not None and not items:
                self.r.invalid((*path, field_name), [], "must not be empty if specified")
        for i, item in enumerate(attribute.strings or []):
            self._attribute_string(item, (*path, "strings", i))
        for i, item in enumerate(attribute.versions or []):
            self._attribute_version(item, (*path, "versions", i))
        set_fields = attribute.set_fields()
        if not set_fields:
            self.r.invalid(path, "", "exactly one value must be specified")
        elif len(set_fields) > 1:
            self.r.invalid(path, attribute, "exactly one value must be specified")

    def _attribute_string(self, value: str, path: FieldPath) -> None:
        if len(value.encode()) > DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH:
            self.r.too_long(path, DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)

    def _attribute_version(self, value: str, path: FieldPath) -> None:
        if not _SEMVER_RE.fullmatch(value):
            self.r.invalid(path, value, "must be a string compatible with semver.org spec 2.0.0")
        if len(value.encode()) > DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH:
            self.r.too_long(path, DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)

    def capacity(self, capacity: o.DeviceCapacity, path: FieldPath, *, shared: bool) -> None:
        value = self.quantity(capacity.value, (*path, "value"))
        policy = capacity.request_policy
        if policy is None:
            return
        ppath = (*path, "requestPolicy")
        if not shared:
            self.r.forbidden(ppath, "allowMultipleAllocations must be true")
            return
        if value is None:
            return
        if policy.valid_values and policy.valid_range is not None:
            self.r.forbidden(
                ppath,
                'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time',
            )
            return
        default = self.quantity(policy.default, (*ppath, "default"))
        if policy.valid_values:
            if policy.default is None:
                self.r.required((*ppath, "default"), "required when validValues is defined")
            elif default is not None:
                self._valid_values(
                    default,
                    policy.default,
                    value,
                    capacity.value,
                    policy.valid_values,
                    (*ppath, "validValues"),
                )
        elif policy.valid_range is not None:
            if policy.default is None:
                self.r.required((*ppath, "default"), "required when validRange is defined")
            elif default is not None:
                self._valid_range(
                    default,
                    policy.default,
                    value,
                    capacity.value,
                    policy.valid_range,
                    (*ppath, "validRange"),
                )

    def _valid_values(
        self,
        default: Fraction,
        default_text: str,
        capacity: Fraction,
        capacity_text: str,
        options: Sequence[str],
        path: FieldPath,
    ) -> None:
        parsed = [self.quantity(text, (*path, i)) for i, text in enumerate(options)]
        if any(p is None for p in parsed):
            return
        values = [p for p in parsed if p is not None]
        for i in range(len(values) - 1):
            if values[i] > values[i + 1]:
                self.r.invalid(
                    (*path, i + 1), options[i + 1], "values must be sorted in ascending order"
                )
        found_default = False
        if len(values) > CAPACITY_VALID_VALUES_MAX:
            self.r.too_many(path, len(values), CAPACITY_VALID_VALUES_MAX)
        else:
            seen: set[int] = set()
            for i, option in enumerate(values):
                if option > capacity:
                    self.r.invalid(
                        (*path, i),
                        options[i],
                        f"option is larger than capacity value: {capacity_text}",
                    )
                if option == default:
                    found_default = True
            # Without DRAFractionalCapacityRange options are told apart by their integer value.
            for i, option in enumerate(values):
                key = _ceil_int(option)
                if key in seen:
                    self.r.duplicate((*path, i), str(key))
                seen.add(key)
        if not found_default:
            self.r.invalid(
                path, default_text, "default value is not valid according to the requestPolicy"
            )

    def _valid_range(
        self,
        default: Fraction,
        default_text: str,
        capacity: Fraction,
        capacity_text: str,
        valid_range: o.CapacityRequestPolicyRange,
        path: FieldPath,
    ) -> None:
        if valid_range.min is None:
            self.r.required((*path, "min"), "required when validRange is defined")
            return
        low = self.quantity(valid_range.min, (*path, "min"))
        high = self.quantity(valid_range.max, (*path, "max"))
        step = self.quantity(valid_range.step, (*path, "step"))
        if (
            low is None
            or (valid_range.max is not None and high is None)
            or (valid_range.step is not None and step is None)
        ):
            return
        if low > capacity:
            self.r.invalid(
                (*path, "min"),
                valid_range.min,
                f"min is larger than capacity value: {capacity_text}",
            )
        if default < low:
            self.r.invalid(
                (*path, "default"), default_text, f"default is less than min: {valid_range.min}"
            )
        if high is not None:
            if low > high:
                self.r.invalid(
                    (*path, "max"), valid_range.min, f"min is larger than max: {valid_range.max}"
                )
            if high > capacity:
                self.r.invalid(
                    (*path, "max"),
                    valid_range.max,
                    f"max is larger than capacity value: {capacity_text}",
                )
            if default > high:
                self.r.invalid(
                    (*path, "default"), default_text, f"default is more than max: {valid_range.max}"
                )
        if step is None or valid_range.step is None:
            return
        if step <= 0:
            self.r.invalid((*path, "step"), valid_range.step, "must be greater than zero")
            return
        if low + step > capacity:
            self.r.invalid(
                (*path, "step"),
                valid_range.step,
                f"one step {_show_sum(valid_range.min, low + step)} is larger than capacity value: {capacity_text}",
            )
        # Integer arithmetic (Quantity.Value) only holds in [0, MaxInt64]; refuse the rest first.
        unsafe = False
        for name, number, text in (
            ("default", default, default_text),
            ("min", low, valid_range.min),
            ("max", high, valid_range.max),
            ("step", step, valid_range.step),
        ):
            if number is None or text is None:
                continue
            if number < 0:
                self.r.invalid((*path, name), text, "must be greater than or equal to 0")
                unsafe = True
            elif number > _MAX_INT64:
                self.r.invalid((*path, name), text, f"must not be larger than {_MAX_INT64}")
                unsafe = True
        if unsafe:
            return
        step_int, low_int = _ceil_int(step), _ceil_int(low)
        for number, text in ((default, default_text), (high, valid_range.max)):
            if number is None or text is None:
                continue
            if (_ceil_int(number) - low_int) % step_int != 0:
                self.r.invalid(
                    (*path, "step"),
                    text,
                    f"value is not a multiple of a given step ({valid_range.step}) from ({valid_range.min})",
                )

    # DeviceClass and DeviceTaintRule ----------------------------------------------------------

    def class_spec(self, spec: o.DeviceClassSpec, path: FieldPath) -> None:
        self.selectors(spec.selectors, (*path, "selectors"))
        configs = spec.config
        if configs is not None:
            cpath = (*path, "config")
            if len(configs) > DEVICE_CONFIG_MAX:
                self.r.too_many(cpath, len(configs), DEVICE_CONFIG_MAX)
            else:
                for i, config in enumerate(configs):
                    self.device_configuration(config.opaque, (*cpath, i))
        name = spec.extended_resource_name
        if name is not None and not _is_extended_resource_name(name):
            self.r.invalid(
                (*path, "extendedResourceName"), name, "must be a valid extended resource name"
            )

    def taint_rule_spec(self, spec: o.DeviceTaintRuleSpec, path: FieldPath) -> None:
        selector = spec.device_selector
        if selector is not None:
            spath = (*path, "deviceSelector")
            if selector.device_class_name is not None:
                self.subdomain(selector.device_class_name, (*spath, "deviceClassName"))
            if selector.driver is not None:
                self.driver_name(selector.driver, (*spath, "driver"))
            if selector.pool is not None:
                self.pool_name(selector.pool, (*spath, "pool"))
            if selector.device is not None:
                self.label(selector.device, (*spath, "device"))
            self.selectors(selector.selectors, (*spath, "selectors"))
        self.taint(spec.taint, (*path, "taint"))


def _show_sum(min_text: str, total: Fraction) -> str:
    # Upstream prints min+step as a Quantity; keep the unit of min when the sum is whole in it.
    suffix = min_text.lstrip("+-0123456789.")
    try:
        unit = parse_quantity_value("1" + suffix) if suffix else Fraction(1)
    except ValueError:
        unit = Fraction(1)
    scaled = total / unit
    if scaled.denominator == 1:
        return f"{scaled.numerator}{suffix}"
    return str(float(total))


class _RequestNames:
    """Request names of a claim, and the subrequest names under each, for reference checks."""

    def __init__(self, names: Mapping[str, frozenset[str] | None]) -> None:
        self._names = names

    def has(self, ref: str) -> bool:
        segments = ref.split("/")
        if len(segments) > 2 or segments[0] not in self._names:
            return False
        if len(segments) == 1:
            return True
        subs = self._names[segments[0]]
        return subs is not None and segments[1] in subs


def _request_names(devices: o.DeviceClaim) -> _RequestNames:
    names: dict[str, frozenset[str] | None] = {}
    for request in devices.requests or []:
        if request.first_available:
            names[request.name] = frozenset(s.name for s in request.first_available)
        else:
            names[request.name] = None
    return _RequestNames(names)


@functools.lru_cache(maxsize=_TEXT_MEMO)
def _good_qualified_name(name: str) -> bool:
    """Whether an attribute or capacity name passes ``_Validator.qualified_name``."""
    v = _Validator("", selector_check=None)
    v.qualified_name(name, ())
    return not v.r.errors


def _plain_attribute(attribute: o.DeviceAttribute) -> bool:
    """One scalar value that needs no further check: an int, a bool, or a string short enough
    (16 characters are at most 64 bytes)."""
    if (
        attribute.ints is not None
        or attribute.bools is not None
        or attribute.strings is not None
        or attribute.versions is not None
        or attribute.version is not None
    ):
        return False
    string = attribute.string
    count = (attribute.int_ is not None) + (attribute.bool_ is not None) + (string is not None)
    return count == 1 and (string is None or len(string) <= 16 or len(string.encode()) <= DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)


def _has_list_attribute(device: o.Device) -> bool:
    return any(
        a.ints is not None or a.bools is not None or a.strings is not None or a.versions is not None
        for a in (device.attributes or {}).values()
    )


def _attribute_value_count(attribute: o.DeviceAttribute) -> int:
    listed = (
        len(attribute.ints or [])
        + len(attribute.bools or [])
        + len(attribute.strings or [])
        + len(attribute.versions or [])
    )
    return listed or 1


def _is_extended_resource_name(name: str) -> bool:
    # Native resources have no domain or live under kubernetes.io; quota prefixes are reserved.
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not qualified_name_errors("requests." + name)


# --- public API ------------------------------------------------------------------------------


def validate_device_class(
    obj: o.DeviceClass, *, selector_check: SelectorCheck | None = None
) -> list[InvalidInput]:
    v = _Validator(obj.describe(), selector_check=selector_check)
    v.object_meta(obj.metadata, namespaced=False)
    v.class_spec(obj.spec, ("spec",))
    return v.r.errors


def validate_resource_slice(
    obj: o.ResourceSlice, *, selector_check: SelectorCheck | None = None, memo: ValidationMemo | None = None
) -> list[InvalidInput]:
    v = _Validator(obj.describe(), selector_check=selector_check, memo=memo)
    v.object_meta(obj.metadata, namespaced=False)
    v.slice_spec(obj.spec, ("spec",))
    return v.r.errors


def validate_claim(
    obj: o.ResourceClaim, *, selector_check: SelectorCheck | None = None
) -> list[InvalidInput]:
    """A ResourceClaim as created, plus its status as written by an allocator."""
    v = _Validator(obj.describe(), selector_check=selector_check)
    v.object_meta(obj.metadata, namespaced=True)
    v.claim_spec(obj.spec, ("spec",))
    if obj.status is not None:
        v.claim_status(obj.status, ("status",), _request_names(obj.spec.devices))
    return v.r.errors


def validate_claim_metadata(obj: o.ResourceClaim) -> list[InvalidInput]:
    """What :func:`validate_claim` says of ``obj``'s metadata alone (its first errors: the
    metadata is checked first, and nothing else reads it)."""
    v = _Validator(obj.describe(), selector_check=None)
    v.object_meta(obj.metadata, namespaced=True)
    return v.r.errors


def validate_claim_template(
    obj: o.ResourceClaimTemplate, *, selector_check: SelectorCheck | None = None
) -> list[InvalidInput]:
    v = _Validator(obj.describe(), selector_check=selector_check)
    v.object_meta(obj.metadata, namespaced=True)
    v.template_meta(obj.spec.metadata, ("spec", "metadata"))
    v.claim_spec(obj.spec.spec, ("spec", "spec"))
    return v.r.errors


def validate_device_taint_rule(
    obj: o.DeviceTaintRule, *, selector_check: SelectorCheck | None = None
) -> list[InvalidInput]:
    v = _Validator(obj.describe(), selector_check=selector_check)
    v.object_meta(obj.metadata, namespaced=False)
    v.taint_rule_spec(obj.spec, ("spec",))
    return v.r.errors


def validate_node(obj: o.Node) -> list[InvalidInput]:
    """Only what node selectors read: the name and the labels."""
    v = _Validator(obj.describe(), selector_check=None)
    v.object_meta(obj.metadata, namespaced=False)
    return v.r.errors


POD_GROUP_MAX_RESOURCE_CLAIMS = 4
"""``MaxPodGroupResourceClaims`` (k8s.io/api/scheduling/v1beta1)."""
POD_GROUP_MAX_TOPOLOGY_CONSTRAINTS = 1


def validate_document(doc: Mapping[str, Any], *, source: str = "") -> list[InvalidInput]:
    """What the API server rejects when a document kind (``model.decode_document``) is created,
    in its words, each naming ``source``. A PodGroup: its metadata, and
    ``pkg/apis/scheduling/validation``'s rules for the spec (one scheduling policy, a gang's
    ``minCount``, at most one topology constraint, the claim entries). A Pod: its metadata.
    ``doc`` has been decoded (its fields are of their types)."""
    v = _Validator(describe_document(doc), selector_check=None)
    raw_meta = doc.get("metadata")
    try:
        meta = o.ObjectMeta.model_validate(raw_meta if isinstance(raw_meta, Mapping) else {})
    except ValueError:  # types were checked when decoding; nothing sensible to add
        meta = o.ObjectMeta()
    v.object_meta(meta, namespaced=True)
    if doc.get("kind") == "PodGroup":
        for path, detail in podgroup_spec_problems(doc):
            v.r.errors.append(InvalidInput(v.r.obj, path, detail))
    return [InvalidInput(err.obj, err.field_path, err.detail, source=source) for err in v.r.errors]


def podgroup_spec_problems(podgroup: Mapping[str, Any]) -> list[tuple[FieldPath, str]]:
    """The API server's checks of a PodGroup's spec (``validatePodGroupSchedulingPolicy`` and
    friends), as (field path, detail). Values of the wrong type count as absent (decoding
    reports them)."""
    out: list[tuple[FieldPath, str]] = []
    spec = _mapping(podgroup.get("spec"))
    policy_path: FieldPath = ("spec", "schedulingPolicy")
    policy = _mapping(spec.get("schedulingPolicy"))
    chosen = [f"`{k}`" for k in ("basic", "gang") if policy.get(k) is not None]
    if not chosen:
        out.append((policy_path, 'Invalid value: "": must specify one of: `basic`, `gang`'))
    elif len(chosen) > 1:
        shown = json.dumps("{" + ", ".join(chosen) + "}")
        out.append((policy_path, f"Invalid value: {shown}: exactly one of `basic`, `gang` is required, but multiple fields are set"))
    elif policy.get("gang") is not None:
        count = _mapping(policy.get("gang")).get("minCount")
        count_path: FieldPath = (*policy_path, "gang", "minCount")
        if not isinstance(count, int) or isinstance(count, bool) or count == 0:
            out.append((count_path, "Required value"))
        elif count < 0:
            out.append((count_path, f"Invalid value: {count}: must be greater than zero"))
    topology = _mapping(spec.get("schedulingConstraints")).get("topology")
    if isinstance(topology, list):
        if len(topology) > POD_GROUP_MAX_TOPOLOGY_CONSTRAINTS:
            out.append((("spec", "schedulingConstraints", "topology"), f"Too many: {len(topology)}: must have at most {POD_GROUP_MAX_TOPOLOGY_CONSTRAINTS} item"))
        for i, entry in enumerate(topology):
            if not _mapping(entry).get("key"):
                out.append((("spec", "schedulingConstraints", "topology", i, "key"), "Required value"))
    claims = spec.get("resourceClaims")
    if isinstance(claims, list):
        if len(claims) > POD_GROUP_MAX_RESOURCE_CLAIMS:
            out.append((("spec", "resourceClaims"), f"Too many: {len(claims)}: must have at most {POD_GROUP_MAX_RESOURCE_CLAIMS} items"))
        for i, raw in enumerate(claims):
            entry = _mapping(raw)
            if not entry.get("name"):
                out.append((("spec", "resourceClaims", i, "name"), "Required value"))
            if bool(entry.get("resourceClaimName")) == bool(entry.get("resourceClaimTemplateName")):
                out.append((("spec", "resourceClaims", i), "Invalid value: exactly one of resourceClaimName and resourceClaimTemplateName is required"))
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


_UNSET: Any = object()


def validate_object(
    obj: o.TypedObject, *, selector_check: SelectorCheck | None = _UNSET, memo: ValidationMemo | None = None
) -> list[InvalidInput]:
    """Every problem the API server would report when ``obj`` is created, in its words.

    ``selector_check`` compiles CEL selectors; by default ``default_selector_check()``. Pass
    None to skip compiling. ``memo``: shared devices already validated in this pass
    (:class:`ValidationMemo`).
    """
    check = default_selector_check() if selector_check is _UNSET else selector_check
    if isinstance(obj, o.ResourceClaim):
        return validate_claim(obj, selector_check=check)
    if isinstance(obj, o.ResourceClaimTemplate):
        return validate_claim_template(obj, selector_check=check)
    if isinstance(obj, o.ResourceSlice):
        return validate_resource_slice(obj, selector_check=check, memo=memo)
    if isinstance(obj, o.DeviceClass):
        return validate_device_class(obj, selector_check=check)
    if isinstance(obj, o.DeviceTaintRule):
        return validate_device_taint_rule(obj, selector_check=check)
    if isinstance(obj, o.Node):
        return validate_node(obj)
    return []


def validate_objects(
    objs: Iterable[o.TypedObject], *, selector_check: SelectorCheck | None = _UNSET
) -> None:
    """Validate every object; raise :class:`InvalidInputs` naming all problems of all objects."""
    check = default_selector_check() if selector_check is _UNSET else selector_check
    cached = _cached(check)
    errors: list[InvalidInput] = []
    for obj in objs:
        errors.extend(validate_object(obj, selector_check=cached))
    if errors:
        raise InvalidInputs(errors)


def _cached(check: SelectorCheck | None) -> SelectorCheck | None:
    # Classes and claims repeat the same selectors; compile each expression once per call.
    if check is None:
        return None
    seen: dict[str, str | None] = {}

    def cached(expression: str) -> str | None:
        if expression not in seen:
            seen[expression] = check(expression)
        return seen[expression]

    return cached
