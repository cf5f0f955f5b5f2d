"""Turn the text users have (``kubectl get -o yaml|json``, manifests) into typed objects.

Pure: text in, objects out; the shell reads the files. This is the one decoder for CLI files,
gRPC payloads and file inventories. It accepts multi-document YAML, JSON (one value, an array,
or a stream of values), and ``kind: List`` wrappers (``v1 List`` and ``<Kind>List``), applies
the API server's defaults (:func:`apply_defaults`) and reports every problem as
:class:`InvalidInput` naming the source, object and field, never as a traceback.

Three layers, each with its own guarantees:

* **Bounded parsing** (:func:`parse_documents`): the text is parsed under explicit
  :class:`DecodeLimits` (size, nesting depth, values added by YAML aliases, objects), without
  recursion, so no input can exhaust the stack or memory. YAML aliases are allowed (manifests
  use anchors) but what they expand to is counted; a mapping or list used as a key, a
  non-string key and text that is not valid Unicode are errors.
* **Strict field validation** (``validate``, kubectl's ``--validate=strict|warn|ignore``):
  unknown and duplicate fields are reported with the API server's wording and full field path
  (``unknown field "spec.devices.requests[0].exactly.cout"``): an error for ``strict``, a
  warning for ``warn``, nothing for ``ignore`` (the last duplicate wins, unknown fields are
  kept for the round trip).
* **Typed decoding** (:func:`decode_object`): as strict about types as the API server's JSON
  decoder; a string where a number belongs, ``yes`` for a boolean field or a bare number where
  an object belongs is an error, not a guess. Quantities are checked here, as the API server's
  decoder does, whatever ``validate`` says.

Semantic rules and limits are ``model.validation``'s job.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import re
import sys
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ValidationError

from dra_solver.model import objects as o
from dra_solver.model.errors import (
    MAX_STRUCTURED_CHARS,
    FieldPath,
    InvalidInput,
    StrictDecodingError,
    clip,
    quote,
)

ValidationMode = Literal["strict", "warn", "ignore"]
"""kubectl's ``--validate`` values (the API server's ``fieldValidation=Strict|Warn|Ignore``)."""

VALIDATION_MODES: tuple[ValidationMode, ...] = get_args(ValidationMode)

MAX_STRICT_PROBLEMS = 100
"""Unknown/duplicate fields reported per object, as the API server's strict decoder caps them."""


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What one input (a file, a gRPC payload) may hold; exceeding any is invalid input.

    The defaults are far above any real cluster's objects (the deepest API field is about ten
    levels down) and far below what would hurt the process.
    """

    max_chars: int = 64 * 1024 * 1024
    """Characters of text in one input."""
    max_depth: int = 100
    """Nesting of mappings and lists, counted from the document root."""
    max_alias_values: int = 100_000
    """Values that YAML aliases add when expanded (a 500-byte "billion laughs" adds 10^9)."""
    max_objects: int = 100_000
    """Top-level objects in one input, after ``List`` wrappers are flattened."""


DEFAULT_LIMITS = DecodeLimits()


def check_mode(mode: str) -> ValidationMode:
    """``mode`` as a :data:`ValidationMode`; anything else is invalid input."""
    for known in VALIDATION_MODES:
        if mode == known:
            return known
    supported = ", ".join(f'"{m}"' for m in VALIDATION_MODES)
    raise InvalidInput("", ("validate",), f"Unsupported value: {_shown(mode)}: supported values: {supported}")


# --- parsing ---------------------------------------------------------------------------------


class _Duplicated(dict[str, Any]):
    """A mapping that named some keys more than once (the last value won).

    Parsing records them here; strict field validation reports them with their full path.
    """

    __slots__ = ("duplicates",)

    def __init__(self, items: dict[str, Any] | None = None, duplicates: tuple[str, ...] = ()) -> None:
        super().__init__(items or {})
        self.duplicates = duplicates

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle keep what was duplicated
        return (_Duplicated, (dict(self), self.duplicates))


def parse_documents(
    text: str, *, source: str = "", limits: DecodeLimits = DEFAULT_LIMITS
) -> list[dict[str, Any]]:
    """Every top-level object in ``text`` (YAML or JSON), with ``List`` kinds flattened."""
    if len(text) > limits.max_chars:
        raise InvalidInput(
            "", (), f"input is {len(text)} characters: must be at most {limits.max_chars}", source=source
        )
    _check_unicode(text, source=source)
    docs = _load(text, source=source, limits=limits)
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InvalidInput(
                "",
                (),
                f"document {index}: expected an object, got {_json_type(doc)}",
                source=source,
            )
        for obj in _flatten_lists(doc, source=source):
            out.append(obj)
            if len(out) > limits.max_objects:
                raise InvalidInput(
                    "", (), f"more than {limits.max_objects} objects in one input", source=source
                )
    return out


def _check_unicode(text: str, *, source: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidInput(
            "", (), f"invalid Unicode at character {err.start}: lone surrogate", source=source
        ) from None


def _load(text: str, *, source: str, limits: DecodeLimits) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return _load_json(stripped, limits=limits)
        except _TooDeep:
            raise InvalidInput(
                "", (), f"cannot parse JSON: nesting is deeper than {limits.max_depth} levels", source=source
            ) from None
        except _LoneSurrogate as err:
            raise InvalidInput("", (), f"cannot parse JSON: {err}", source=source) from None
        except json.JSONDecodeError as err:
            json_error = err
        except ValueError:  # Python refuses to convert integers this long
            raise InvalidInput("", (), f"cannot parse JSON: {_TOO_MANY_DIGITS}", source=source) from None
        # YAML flow style also starts with a brace; only report JSON's complaint if YAML fails too.
        try:
            return _load_yaml(text, limits=limits)
        except (yaml.YAMLError, _YamlLimit):
            raise InvalidInput(
                "",
                (),
                f"cannot parse JSON: line {json_error.lineno}, column {json_error.colno}: {json_error.msg}",
                source=source,
            ) from None
    try:
        return _load_yaml(text, limits=limits)
    except _YamlLimit as err:
        raise InvalidInput("", (), f"cannot parse YAML: {err}", source=source) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = err.problem or err.context or "invalid YAML"
        raise InvalidInput("", (), f"cannot parse YAML: {where}{what}", source=source) from None
    except yaml.YAMLError as err:
        raise InvalidInput("", (), f"cannot parse YAML: {_one_line(err)}", source=source) from None


# JSON: Python's decoder recurses once per level, so the depth is measured on the text first.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")
_JSON_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]|\\u[dD][c-fC-F]")


_TOO_MANY_DIGITS = f"a number has more than {sys.get_int_max_str_digits()} digits"


class _TooDeep(ValueError):
    pass


class _LoneSurrogate(ValueError):
    pass


def _load_json(text: str, *, limits: DecodeLimits) -> list[Any]:
    """One JSON value, an array of them, or several values one after another."""
    skeleton = _JSON_STRING.sub("", text)
    levels = itertools.accumulate(1 if b in "[{" else -1 for b in _JSON_BRACKET.findall(skeleton))
    if max(levels, default=0) > limits.max_depth:
        raise _TooDeep
    decoder = json.JSONDecoder(object_pairs_hook=_json_mapping)
    values: list[Any] = []
    pos = 0
    while pos < len(text):
        value, pos = decoder.raw_decode(text, pos)
        values.append(value)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if _JSON_SURROGATE_ESCAPE.search(text):
        _find_lone_surrogates(values)
    if len(values) == 1 and isinstance(values[0], list):
        return list(values[0])
    return values


def _json_mapping(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    duplicates = tuple(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return _Duplicated(out, duplicates)


def _find_lone_surrogates(values: list[Any]) -> None:
    """Escapes such as ``\\ud800`` decode to text that is not Unicode; refuse it here rather
    than fail later when the text is encoded for a response."""
    pending: list[Any] = list(values)
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            texts: Iterable[str] = (value,)
        elif isinstance(value, dict):
            pending.extend(value.values())
            texts = value.keys()
        elif isinstance(value, list):
            pending.extend(value)
            continue
        else:
            continue
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise _LoneSurrogate(
                    f"string {json.dumps(text[:40])} holds a lone surrogate, which is not valid Unicode"
                ) from None


# YAML: built from the parser's events with an explicit stack (PyYAML's composer recurses once
# per level), counting depth and what aliases expand to as it goes.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()
_SCALARS = yaml.constructor.SafeConstructor()
_MERGE_TAG = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = {
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:str",
}
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"  # kept as written, as the API machinery does
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"


class _YamlLimit(ValueError):
    """A limit or a structure JSON cannot hold (non-string key, unknown anchor), with where."""

    def __init__(self, mark: Any, message: str) -> None:
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        super().__init__(f"{where}{message}")


class _Merge:
    """The ``<<`` merge key: its value's entries fill in keys the mapping does not set."""


_MERGE = _Merge()
_NO_KEY = object()


@dataclass(slots=True)
class _Frame:
    """One mapping or list under construction."""

    value: dict[str, Any] | list[Any]
    anchor: str | None
    size: int = 1
    height: int = 1
    key: Any = _NO_KEY
    duplicates: list[str] = dataclasses.field(default_factory=list)
    merges: list[Any] = dataclasses.field(default_factory=list)


def _load_yaml(text: str, *, limits: DecodeLimits) -> list[Any]:
    docs: list[Any] = []
    anchors: dict[str, tuple[Any, int, int]] = {}  # name -> (value, size, height)
    stack: list[_Frame] = []
    alias_values = 0

    def emit(value: Any, size: int, height: int, mark: Any, anchor: str | None) -> None:
        if anchor is not None:
            anchors[anchor] = (value, size, height)
        if not stack:
            docs.append(value)
            return
        top = stack[-1]
        top.size += size
        top.height = max(top.height, height + 1)
        if isinstance(top.value, list):
            top.value.append(value)
        elif top.key is _NO_KEY:
            if value is not _MERGE and not isinstance(value, str):
                raise _YamlLimit(mark, f"mapping keys must be strings, not {_json_type(value)}")
            top.key = value
        elif top.key is _MERGE:
            top.merges.append(value)
            top.key = _NO_KEY
        else:
            if top.key in top.value:
                top.duplicates.append(top.key)
            top.value[top.key] = value
            top.key = _NO_KEY

    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.ScalarEvent):
            value = _scalar(event, key=bool(stack) and isinstance(stack[-1].value, dict) and stack[-1].key is _NO_KEY)
            emit(value, 1, 0, event.start_mark, event.anchor)
        elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            if stack and isinstance(stack[-1].value, dict) and stack[-1].key is _NO_KEY:
                raise _YamlLimit(event.start_mark, "a mapping or list cannot be a mapping key")
            if len(stack) + 1 > limits.max_depth:
                raise _YamlLimit(event.start_mark, f"nesting is deeper than {limits.max_depth} levels")
            mapping = isinstance(event, yaml.MappingStartEvent)
            expected = _MAP_TAG if mapping else _SEQ_TAG
            if event.tag not in (None, "!", expected):
                raise _YamlLimit(event.start_mark, f"unsupported tag {event.tag}")
            stack.append(_Frame({} if mapping else [], event.anchor))
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            frame = stack.pop()
            built = frame.value
            if isinstance(built, dict):
                built = _finish_mapping(built, frame, event.start_mark)
            emit(built, frame.size, frame.height, event.start_mark, frame.anchor)
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in anchors:
                raise _YamlLimit(event.start_mark, f"unknown anchor {event.anchor!r}")
            value, size, height = anchors[event.anchor]
            alias_values += size
            if alias_values > limits.max_alias_values:
                raise _YamlLimit(
                    event.start_mark, f"aliases expand to more than {limits.max_alias_values} values"
                )
            if len(stack) + height > limits.max_depth:
                raise _YamlLimit(event.start_mark, f"nesting is deeper than {limits.max_depth} levels")
            emit(value, size, height, event.start_mark, None)
        elif isinstance(event, yaml.DocumentStartEvent):
            anchors.clear()  # anchors do not cross documents
    return docs


def _scalar(event: yaml.ScalarEvent, *, key: bool) -> Any:
    tag = event.tag
    if tag is None or tag == "!":
        tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
    if tag == _MERGE_TAG and key:
        return _MERGE
    if tag in (_TIMESTAMP_TAG, _MERGE_TAG):
        return event.value
    if tag not in _SCALAR_TAGS:
        raise _YamlLimit(event.start_mark, f"unsupported tag {tag}")
    node = yaml.ScalarNode(tag, event.value, None, None, event.style)
    try:
        return _SCALARS.yaml_constructors[tag](_SCALARS, node)
    except ValueError:  # Python refuses to convert integers this long
        raise _YamlLimit(event.start_mark, _TOO_MANY_DIGITS) from None


def _finish_mapping(built: dict[str, Any], frame: _Frame, mark: Any) -> dict[str, Any]:
    for merged in frame.merges:
        sources = merged if isinstance(merged, list) else [merged]
        for each in sources:
            if not isinstance(each, dict):
                raise _YamlLimit(mark, "a merge key (<<) takes a mapping or a list of mappings")
            for k, v in each.items():
                built.setdefault(k, v)
    if frame.duplicates:
        return _Duplicated(built, tuple(dict.fromkeys(frame.duplicates)))
    return built


def _flatten_lists(doc: dict[str, Any], *, source: str) -> Iterator[dict[str, Any]]:
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and kind not in o.KIND_MODELS:
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise InvalidInput(
                kind, ("items",), f"Invalid value: {_shown(items)}: must be a list", source=source
            )
        item_kind = kind[: -len("List")] or None
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise InvalidInput(
                    kind,
                    ("items", index),
                    f"Invalid value: {_shown(item)}: must be an object",
                    source=source,
                )
            if item_kind and "kind" not in item:
                with_kind = {**item, "kind": item_kind}
                if isinstance(item, _Duplicated):
                    with_kind = _Duplicated(with_kind, item.duplicates)
                item = with_kind
            yield from _flatten_lists(item, source=source)  # depth is bounded by parsing
        return
    yield doc


# --- objects ---------------------------------------------------------------------------------


def decode_object(
    doc: dict[str, Any],
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    warnings: list[StrictDecodingError] | None = None,
) -> o.TypedObject:
    """One API object from its JSON form; defaults applied.

    ``validate``: unknown and duplicate fields raise :class:`StrictDecodingError` (``strict``),
    are appended to ``warnings`` (``warn``), or pass silently (``ignore``).
    """
    kind = doc.get("kind")
    name = _describe_raw(doc)
    if not isinstance(kind, str) or not kind:
        raise InvalidInput(name, ("kind",), "Required value: kind must be set", source=source)
    model = o.KIND_MODELS.get(kind)
    if model is None:
        supported = ", ".join(f'"{k}"' for k in sorted(o.KIND_MODELS))
        raise InvalidInput(
            name,
            ("kind",),
            f"Unsupported value: {_shown(kind)}: supported values: {supported}",
            source=source,
        )
    api_version = doc.get("apiVersion", "")
    allowed = ("v1",) if kind == "Node" else o.RESOURCE_API_VERSIONS
    if api_version and api_version not in allowed:
        supported = ", ".join(f'"{v}"' for v in allowed)
        raise InvalidInput(
            name,
            ("apiVersion",),
            f"Unsupported value: {_shown(api_version)}: supported values: {supported}",
            source=source,
        )
    check_fields(doc, source=source, validate=validate, warnings=warnings)
    try:
        obj = model.model_validate(_drop_nulls(doc), strict=True)
    except ValidationError as err:
        raise _from_validation_error(name, model, err, source=source) from None
    apply_defaults(obj)
    return obj


def check_fields(
    doc: dict[str, Any],
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    warnings: list[StrictDecodingError] | None = None,
) -> None:
    """Strict field validation of one object's document (see :func:`decode_object`); a kind
    that is not ours is left for :func:`decode_object` to report."""
    if validate == "ignore":
        return
    kind = doc.get("kind")
    model = o.KIND_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        return
    problems = field_problems(model, doc)
    if problems and validate == "strict":
        raise StrictDecodingError(_describe_raw(doc), problems, source=source)
    if problems and warnings is not None:
        warnings.extend(StrictDecodingError(_describe_raw(doc), [p], source=source) for p in problems)


def decode_text(
    text: str,
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    limits: DecodeLimits = DEFAULT_LIMITS,
    warnings: list[StrictDecodingError] | None = None,
) -> list[o.TypedObject]:
    docs = parse_documents(text, source=source, limits=limits)
    return [decode_object(doc, source=source, validate=validate, warnings=warnings) for doc in docs]


def decode_all(
    docs: Iterable[dict[str, Any]],
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    warnings: list[StrictDecodingError] | None = None,
) -> list[o.TypedObject]:
    return [decode_object(doc, source=source, validate=validate, warnings=warnings) for doc in docs]


def _drop_nulls(value: Any) -> Any:
    # Go's decoder treats an explicit null like an absent field.
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


# --- strict field validation -----------------------------------------------------------------

_Shape = tuple[str, Any]
"""How a field's value is read: ("model", {alias: shape}), ("list", shape), ("map", shape),
or ("opaque", None) for values the API itself leaves free-form (opaque parameters)."""

_OPAQUE: _Shape = ("opaque", None)


def field_problems(model: type[BaseModel], doc: dict[str, Any]) -> list[tuple[FieldPath, str]]:
    """Unknown and duplicate fields of ``doc`` read as ``model``, with their paths, in document
    order, at most :data:`MAX_STRICT_PROBLEMS` (the API server's cap)."""
    problems: list[tuple[FieldPath, str]] = []
    _walk(_model_shape(model), doc, (), problems)
    return problems[:MAX_STRICT_PROBLEMS]


def _walk(shape: _Shape, value: Any, path: FieldPath, problems: list[tuple[FieldPath, str]]) -> None:
    if len(problems) >= MAX_STRICT_PROBLEMS:
        return
    what, inner = shape
    if what == "opaque":
        return
    if what == "list":
        if isinstance(value, list):
            for index, item in enumerate(value):
                _walk(inner, item, (*path, index), problems)
        return
    if not isinstance(value, dict):
        return  # a type mismatch; typed decoding reports it
    if isinstance(value, _Duplicated):
        problems.extend(((*path, key), "duplicate field") for key in value.duplicates)
    if what == "map":
        for key, item in value.items():
            _walk(inner, item, (*path, key), problems)
        return
    fields = typing.cast(dict[str, _Shape], inner())
    for key, item in value.items():
        child = fields.get(key)
        if child is None:
            problems.append(((*path, key), "unknown field"))
        else:
            _walk(child, item, (*path, key), problems)


@functools.cache
def _model_fields(model: type[BaseModel]) -> dict[str, _Shape]:
    out: dict[str, _Shape] = {}
    for name, info in model.model_fields.items():
        out[info.alias or name] = _shape(info.annotation)
    return out


def _model_shape(model: type[BaseModel]) -> _Shape:
    # Fields are looked up lazily so that models referring to each other need no ordering.
    return ("model", lambda: _model_fields(model))


def _shape(annotation: Any) -> _Shape:
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_shape(annotation)
    if origin is list:
        return ("list", _shape(typing.get_args(annotation)[0]))
    if origin is dict:
        return ("map", _shape(typing.get_args(annotation)[1]))
    return _OPAQUE


# --- defaults -------------------------------------------------------------------------------


def apply_defaults(obj: o.TypedObject) -> None:
    """The API server's defaulting for the kinds we read (in place, idempotent).

    A request without ``allocationMode`` is ExactCount, ExactCount without ``count`` asks for one
    device, and a toleration without ``operator`` uses Equal. An explicit ``count: 0`` is kept
    (and then rejected by validation) rather than silently turned into 1.
    """
    if isinstance(obj, o.ResourceClaim):
        _default_claim_spec(obj.spec)
    elif isinstance(obj, o.ResourceClaimTemplate):
        _default_claim_spec(obj.spec.spec)


def _default_claim_spec(spec: o.ResourceClaimSpec) -> None:
    for request in spec.devices.requests or []:
        if request.exactly is not None:
            _default_request(request.exactly)
        for sub in request.first_available or []:
            _default_request(sub)


def _default_request(req: o.ExactDeviceRequest | o.DeviceSubRequest) -> None:
    if not req.allocation_mode:
        req.allocation_mode = "ExactCount"
    if req.allocation_mode == "ExactCount" and req.count is None:
        req.count = 1
    for toleration in req.tolerations or []:
        if not toleration.operator:
            toleration.operator = "Equal"


# --- error translation ----------------------------------------------------------------------


def _describe_raw(doc: dict[str, Any]) -> str:
    kind = doc.get("kind") if isinstance(doc.get("kind"), str) and doc.get("kind") else "object"
    raw_meta = doc.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


_EXPECTED = {
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "float_type": "a number",
    "float_parsing": "a number",
}


def _from_validation_error(
    name: str, model: type[BaseModel], err: ValidationError, *, source: str
) -> InvalidInput:
    problems = err.errors()
    first = problems[0]
    path, target = _field_path(model, first["loc"])
    value = first.get("input")
    kind = first["type"]
    if kind == "missing":
        detail = "Required value"
    elif kind in _EXPECTED:
        expected = _EXPECTED[kind]
        if expected == "an object" and target:
            expected = f"an object ({target})"
        detail = f"Invalid value: {_shown(value)}: must be {expected}, not {_json_type(value)}"
    else:
        detail = f"Invalid value: {_shown(value)}: {first['msg'][:1].lower()}{first['msg'][1:]}"
    extra = len(problems) - 1
    if extra:
        detail += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return InvalidInput(name, path, detail, source=source)


def _field_path(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[FieldPath, str]:
    """pydantic's error location as an API field path (map keys in brackets), plus the name of
    the model expected at that location (for "must be an object (DeviceCapacity)")."""
    path: list[str | int] = []
    current: Any = model
    for part in loc:
        annotation = _unwrap(current)
        origin = typing.get_origin(annotation)
        if isinstance(part, int) and origin is list:
            path.append(part)
            current = typing.get_args(annotation)[0]
        elif (
            isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
            and isinstance(part, str)
        ):
            field = _field_by_alias(annotation, part)
            path.append(part)
            current = field.annotation if field is not None else Any
        elif origin is dict and isinstance(part, str):
            key = f"[{part}]"
            if path and isinstance(path[-1], str):
                path[-1] = path[-1] + key
            else:
                path.append(key)
            current = typing.get_args(annotation)[1]
        elif isinstance(part, int):
            path.append(part)
            current = Any
        else:
            # A union branch tag (type or validator name), not part of the object.
            continue
    target = _unwrap(current)
    name = target.__name__ if isinstance(target, type) and issubclass(target, BaseModel) else ""
    return tuple(path), name


def _unwrap(annotation: Any) -> Any:
    """Strip ``Optional[...]`` and ``Annotated[...]`` down to the one type that matters."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _field_by_alias(model: type[BaseModel], alias: str) -> Any:
    for field_name, field in model.model_fields.items():
        if alias in (field.alias, field_name):
            return field
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _shown(value: Any) -> str:
    """A caller's value in a message: strings quoted (at most 64 characters of them), lists and
    objects as compact JSON (at most 256)."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return clip(json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False), MAX_STRUCTURED_CHARS)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())
