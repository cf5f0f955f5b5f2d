"""Turn the text users have (``kubectl get -o yaml|json``, manifests) into typed objects.

Pure: text in, objects out; the shell reads the files. Accepts multi-document YAML, JSON, and
``kind: List`` wrappers (``v1 List`` and ``<Kind>List``), applies the API server's defaults
(:func:`apply_defaults`) and reports every structural problem as :class:`InvalidInput` with the
file, object and field, never as a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import yaml
from pydantic import ValidationError

from model import objects as o
from model.errors import FieldPath, InvalidInput


def parse_documents(text: str, *, source: str = "") -> list[dict[str, Any]]:
    """Every top-level mapping in ``text`` (YAML or JSON), with ``List`` kinds flattened."""
    stripped = text.lstrip()
    docs: list[Any]
    try:
        if stripped.startswith(("{", "[")):
            loaded = json.loads(text)
            docs = loaded if isinstance(loaded, list) else [loaded]
        else:
            docs = list(yaml.safe_load_all(text))
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise InvalidInput("", (), f"cannot parse as YAML or JSON: {_one_line(err)}", source=source) from err
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InvalidInput(
                "", (), f"document {index}: expected an object, got {type(doc).__name__}", source=source
            )
        out.extend(_flatten_lists(doc, source=source))
    return out


def _flatten_lists(doc: dict[str, Any], *, source: str) -> Iterator[dict[str, Any]]:
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and kind not in o.KIND_MODELS:
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise InvalidInput(kind, ("items",), "Invalid value: must be a list", source=source)
        item_kind = kind[: -len("List")] or None
        for item in items:
            if not isinstance(item, dict):
                raise InvalidInput(kind, ("items",), "Invalid value: items must be objects", source=source)
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
        supported = ", ".join(sorted(o.KIND_MODELS))
        raise InvalidInput(
            name, ("kind",), f'Unsupported value: "{kind}": supported values: {supported}', source=source
        )
    api_version = doc.get("apiVersion", "")
    if kind != "Node" and api_version and api_version not in o.RESOURCE_API_VERSIONS:
        supported = ", ".join(f'"{v}"' for v in o.RESOURCE_API_VERSIONS)
        raise InvalidInput(
            name,
            ("apiVersion",),
            f'Unsupported value: "{api_version}": supported values: {supported}',
            source=source,
        )
    try:
        obj = model.model_validate(doc)
    except ValidationError as err:
        raise _from_validation_error(name, err, source=source) from None
    apply_defaults(obj)
    return obj


def decode_text(text: str, *, source: str = "") -> list[o.TypedObject]:
    return [decode_object(doc, source=source) for doc in parse_documents(text, source=source)]


def decode_all(docs: Iterable[dict[str, Any]], *, source: str = "") -> list[o.TypedObject]:
    return [decode_object(doc, source=source) for doc in docs]


# --- defaults -------------------------------------------------------------------------------


def apply_defaults(obj: o.TypedObject) -> None:
    """The API server's defaulting for the kinds we read (in place, idempotent)."""
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
    if req.allocation_mode is None:
        req.allocation_mode = "ExactCount"
    if req.allocation_mode == "ExactCount" and req.count is None:
        req.count = 1
    for toleration in req.tolerations or []:
        if toleration.operator is None:
            toleration.operator = "Equal"


# --- error translation ----------------------------------------------------------------------


def _describe_raw(doc: dict[str, Any]) -> str:
    kind = doc.get("kind") if isinstance(doc.get("kind"), str) else "object"
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def _from_validation_error(name: str, err: ValidationError, *, source: str) -> InvalidInput:
    first = err.errors()[0]
    path: FieldPath = tuple(p for p in first["loc"] if isinstance(p, str | int))
    # Union branches add their type names to the location; drop them.
    path = tuple(p for p in path if not (isinstance(p, str) and p[:1].isupper() and "[" in p))
    value = first.get("input")
    shown = json.dumps(value, default=str) if not isinstance(value, dict) else "object"
    detail = f"Invalid value: {shown}: {first['msg'].lower()}"
    if first["type"] == "missing":
        detail = "Required value"
    extra = len(err.errors()) - 1
    if extra:
        detail += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return InvalidInput(name, path, detail, source=source)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())
