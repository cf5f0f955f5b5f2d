"""Turn the text users have (``kubectl get -o yaml|json``, manifests) into typed objects.

Pure: text in, objects out; the shell reads the files. Accepts multi-document YAML, JSON (one
value, an array, or a stream of values), and ``kind: List`` wrappers (``v1 List`` and
``<Kind>List``), applies the API server's defaults (:func:`apply_defaults`) and reports every
structural problem as :class:`InvalidInput` naming the file, object and field, never as a
traceback.

Decoding is as strict about types as the API server's JSON decoder: a string where a number
belongs, ``yes`` for a boolean field or a bare number where an object belongs is an error, not a
guess. Semantic rules and limits are ``model.validation``'s job.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterable, Iterator
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from model import objects as o
from model.errors import FieldPath, InvalidInput


def parse_documents(text: str, *, source: str = "") -> list[dict[str, Any]]:
    """Every top-level object in ``text`` (YAML or JSON), with ``List`` kinds flattened."""
    docs = _load(text, source=source)
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
        out.extend(_flatten_lists(doc, source=source))
    return out


def _load(text: str, *, source: str) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return _load_json(stripped)
        except _DuplicateKey as err:
            raise InvalidInput("", (), f"cannot parse JSON: {err}", source=source) from None
        except json.JSONDecodeError as err:
            json_error = err
        # YAML flow style also starts with a brace; only report JSON's complaint if YAML fails too.
        try:
            return list(yaml.load_all(text, Loader=_StrictLoader))
        except yaml.YAMLError:
            raise InvalidInput(
                "",
                (),
                f"cannot parse JSON: line {json_error.lineno}, column {json_error.colno}: {json_error.msg}",
                source=source,
            ) from None
    try:
        return list(yaml.load_all(text, Loader=_StrictLoader))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = err.problem or err.context or "invalid YAML"
        raise InvalidInput("", (), f"cannot parse YAML: {where}{what}", source=source) from None
    except yaml.YAMLError as err:
        raise InvalidInput("", (), f"cannot parse YAML: {_one_line(err)}", source=source) from None


def _load_json(text: str) -> list[Any]:
    """One JSON value, an array of them, or several values one after another."""
    decoder = json.JSONDecoder(object_pairs_hook=_no_duplicates)
    values: list[Any] = []
    pos = 0
    while pos < len(text):
        value, pos = decoder.raw_decode(text, pos)
        values.append(value)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if len(values) == 1 and isinstance(values[0], list):
        return list(values[0])
    return values


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f'duplicate field "{key}"')
        out[key] = value
    return out


class _StrictLoader(yaml.SafeLoader):
    """YAML as the API machinery reads it: timestamps stay strings, duplicate keys are errors."""


def _construct_mapping(
    loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, typing.Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f'mapping key "{key}" already defined',
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_constructor(
    "tag:yaml.org,2002:timestamp",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)


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
                item = {**item, "kind": item_kind}
            yield from _flatten_lists(item, source=source)
        return
    yield doc


def decode_object(doc: dict[str, Any], *, source: str = "") -> o.TypedObject:
    """One API object from its JSON form; defaults applied."""
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
    try:
        obj = model.model_validate(_drop_nulls(doc), strict=True)
    except ValidationError as err:
        raise _from_validation_error(name, model, err, source=source) from None
    apply_defaults(obj)
    return obj


def decode_text(text: str, *, source: str = "") -> list[o.TypedObject]:
    return [decode_object(doc, source=source) for doc in parse_documents(text, source=source)]


def decode_all(docs: Iterable[dict[str, Any]], *, source: str = "") -> list[o.TypedObject]:
    return [decode_object(doc, source=source) for doc in docs]


def _drop_nulls(value: Any) -> Any:
    # Go's decoder treats an explicit null like an absent field.
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


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
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str, separators=(",", ":"))
        return text if len(text) <= 80 else text[:77] + "..."
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, default=str, ensure_ascii=False)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())
