"""The cluster inventory the service answers from: immutable snapshots and their sources.

A request takes one :class:`Snapshot` when it starts and reads only that (snapshot isolation):
a reload or a watch event builds a new snapshot and never changes one in use. Sources:

- :class:`StaticSource`: a fixed set of objects (tests, benchmarks, inline inventories);
- :class:`FileSource`: a file or directory of the YAML/JSON objects ``dra-solver allocate``
  reads, polled for changes and reloaded (a broken edit keeps the previous snapshot);
- :class:`KubeSource`: list+watch through the shared client layer (``service.kubeapi``
  informers, relisting after ``410 Gone``), ready only once every kind has been listed.

Per snapshot, the core's ``NodeIndex`` (``dra_solver.model``) precomputes what whole-cluster
questions need, built lazily on first use (``Snapshot.index``). Identical ``Device`` objects are
shared between slices when decoding (a 5,000-node cluster of identical GPUs holds each distinct
device once), so consumers must treat inventory objects as immutable and never key by ``id()``.

One bad object does not take the cluster down (:func:`screen_objects`): a ResourceSlice that
fails decoding, validation or the allocator's own parsing makes its pool invalid, as upstream's
allocator treats invalid pools (its devices are never handed out; a node that reaches it and
fits nothing else reports "invalid resource pools were encountered"), while every other pool
keeps scheduling. Each problem is logged, counted in metrics and listed by GetInventory.
Namespaces (labels only) ride along for the admin-access check on claims callers send.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import logging
import marshal
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_solver.model import (
    CapacitySpec,
    InvalidInput,
    InvalidInputs,
    Inventory,
    NodeIndex,
    PoolKey,
    SelectorCheck,
    StrictDecodingError,
    ValidationMemo,
    ValidationMode,
    check_fields,
    decode_object,
    default_selector_check,
    dns1123_label_errors,
    fields_clean,
    parse_documents,
    parse_quantity,
    validate_object,
    without_devices,
)
from dra_solver.model import objects as o
from dra_solver.service import parse_ahead
from dra_solver.service.files import expand_paths, read_text
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi import meta as ob
from dra_solver.service.kubeapi.informer import Informer

log = logging.getLogger(__name__)

KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "DeviceTaintRule", "Node", "Namespace")

MAX_PROBLEMS = 1000
"""Inventory problems kept per snapshot (each names its object; the count is exact)."""


# --- decoding with shared devices -----------------------------------------------------------


class ObjectDecoder:
    """Decodes API objects, sharing identical ``Device`` values between ResourceSlices.

    Real clusters publish the same device description on every node; sharing cuts memory by
    the node count and decodes, checks and validates each distinct device once. Devices that
    differ (a per-GPU UUID) still share their equal parts: attribute and capacity values are
    kept once per distinct value, attribute and capacity names once per name.
    """

    MAX_SHARED = 1_000_000
    """Distinct values remembered for sharing; beyond it the tables start over (a long-lived
    watch decoder must not grow without end)."""

    MAX_LISTS = 10_000
    """Whole device lists remembered (each holds up to a slice's devices); identical nodes
    publish a few distinct lists, so a full table means they are not that kind of cluster."""

    def __init__(self, *, validate: ValidationMode = "strict") -> None:
        self._devices: dict[bytes, o.Device] = {}
        self._values: dict[tuple[Any, ...], Any] = {}
        self._clean: set[bytes] = set()
        """Devices (by content) without unknown or duplicate fields."""
        self._templates: dict[str, o.Device] = {}
        """Clean devices by their content without attribute values (see :meth:`_from_template`)."""
        self._attributes: dict[tuple[Any, ...], o.DeviceAttribute | None] = {}
        """Decoded attribute values by raw value (None: not clean or not valid)."""
        self._derived: dict[int, tuple[o.Device, o.Device]] = {}
        """Devices made from a template (by identity, each held): told to validation."""
        self._lists: dict[bytes, tuple[o.Device, ...]] = {}
        """Whole device lists (by content) made only of clean devices already shared: identical
        nodes publish identical lists, which are then found with one key instead of one each."""
        self._list_shapes: set[tuple[int, Any, Any]] = set()
        """``_list_shape`` of the lists in ``_lists``: a list of another shape is not looked up."""
        self.validate: ValidationMode = validate
        """Field validation (kubectl's --validate) of every object decoded."""
        self._warnings: list[StrictDecodingError] = []

    def take_warnings(self) -> list[str]:
        """``validate="warn"`` problems found since the last call, one line each."""
        out = [w.warning() for w in self._warnings]
        self._warnings.clear()
        return out

    def decode(self, doc: dict[str, Any], *, source: str = "") -> o.TypedObject:
        kind = doc.get("kind")
        if kind == "Namespace":
            return decode_namespace(doc, source=source)
        spec = doc.get("spec")
        devices = spec.get("devices") if isinstance(spec, dict) else None
        if kind != "ResourceSlice" or not isinstance(devices, list) or not devices:
            return decode_object(doc, source=source, validate=self.validate, warnings=self._warnings)
        # The whole list's key costs a pass over it: taken only for lists like one recorded.
        shape = _list_shape(devices)
        whole = _plain_key(devices) if shape in self._list_shapes else None
        known_list = self._lists.get(whole) if whole is not None else None
        if known_list is not None:
            return self._with_devices(doc, source, list(known_list))
        try:
            keys = [_content_key(d) for d in devices]
        except (TypeError, ValueError):
            check_fields(doc, source=source, validate=self.validate, warnings=self._warnings)
            return decode_object(doc, source=source, validate="ignore")
        found = [self._devices.get(k) for k in keys]
        if all(dev is not None for dev in found) and all(k in self._clean for k in keys):
            # Seen device by device and clean: the next slice with this content is one lookup.
            whole = whole or _plain_key(devices)
            if whole is not None:
                self._forget_if_full(self._lists, self.MAX_LISTS)
                self._forget_if_full(self._list_shapes, self.MAX_LISTS)
                self._lists[whole] = tuple(dev for dev in found if dev is not None)
                self._list_shapes.add(shape)
        for i, dev in enumerate(found):
            if dev is None:
                found[i] = made = self._from_template(devices[i])
                if made is not None:
                    self._forget_if_full(self._clean)
                    self._clean.add(keys[i])  # a clean template with clean values
        if all(dev is not None for dev in found) and (self.validate == "ignore" or all(k in self._clean for k in keys)):
            # Every device known and clean, or a clean known one with other attribute values:
            # the slice without its devices is all that is left to check and decode.
            self._forget_if_full(self._devices)
            for key, dev in zip(keys, found, strict=True):
                assert dev is not None
                self._devices.setdefault(key, dev)
            return self._with_devices(doc, source, [self._devices[k] for k in keys])
        # Unknown and duplicate fields: the slice without its devices, and each distinct device
        # once (the whole document again, for the paths, when any is not clean).
        if self.validate != "ignore":
            if all(k in self._clean for k in keys):
                check_fields(without_devices(doc), source=source, validate=self.validate, warnings=self._warnings)
            else:
                self._forget_if_full(self._clean)
                if fields_clean(o.ResourceSlice, doc):
                    self._clean.update(keys)
                else:
                    check_fields(doc, source=source, validate=self.validate, warnings=self._warnings)
                    self._clean.update(k for k, d in zip(keys, devices, strict=True) if fields_clean(o.Device, d))
        # Decode the whole object once: errors then carry the exact field path.
        head = decode_object(doc, source=source, validate="ignore")
        assert isinstance(head, o.ResourceSlice)
        self._forget_if_full(self._devices)
        for key, raw, dev in zip(keys, devices, head.spec.devices or [], strict=True):
            if key not in self._devices:
                self._devices[key] = self._shared_parts(dev, raw)
                self._remember_template(self._devices[key], raw)
        head.spec.devices = [self._devices[k] for k in keys]
        return head

    def _with_devices(self, doc: dict[str, Any], source: str, devices: list[o.Device]) -> o.ResourceSlice:
        """The slice decoded without its devices (checked when validating), given ``devices``:
        decoded, clean devices equal to the document's."""
        if self.validate != "ignore":
            check_fields(without_devices(doc), source=source, validate=self.validate, warnings=self._warnings)
        head = decode_object(without_devices(doc), source=source, validate="ignore")
        assert isinstance(head, o.ResourceSlice)
        head.spec.devices = devices
        return head

    # Devices that differ only in attribute values (a per-GPU UUID): the first is decoded whole
    # and kept as a template (by its content with the attribute values left out); the others
    # are copies of it with their own attribute values, each decoded once per distinct value.
    # Only clean templates and values are used, so such a device is clean as well; anything
    # unusual (a null, a type mismatch) takes the whole-object path, whose errors name the field.

    def _template_key(self, raw: dict[str, Any], attributes: dict[str, Any]) -> str:
        # A repr, unlike marshal's bytes, does not change with what else refers to the strings
        # or whether they were interned meanwhile: lookups and the registration agree.
        return repr({**raw, "attributes": tuple(attributes)})

    def _from_template(self, raw: Any) -> o.Device | None:
        attributes = raw.get("attributes") if type(raw) is dict else None
        if type(attributes) is not dict or not attributes or not self._templates:
            return None
        template = self._templates.get(self._template_key(raw, attributes))
        if template is None:
            return None
        values: dict[str, o.DeviceAttribute] = {}
        known = self._attributes
        for name, value in attributes.items():
            if type(value) is not dict:
                return None
            key = _value_key(o.DeviceAttribute, value)
            attribute = known.get(key, _UNSEEN)
            if attribute is _UNSEEN:
                attribute = self._new_attribute(key, value)
            if attribute is None:
                return None
            values[sys.intern(name)] = attribute
        # A shallow copy (pydantic's) with its own attribute map: model_copy(update=...) costs
        # 3x as much; the template's map is set, so the copy's fields-set already names it.
        device = template.__copy__()
        device.__dict__["attributes"] = values
        self._forget_if_full(self._derived)
        self._derived[id(device)] = (device, template)
        return device

    def validation_memo(self) -> ValidationMemo:
        """A memo for one validation pass over what this decoder decoded, told which devices
        are copies of a template (:meth:`ValidationMemo.derived`)."""
        memo = ValidationMemo()
        for device, template in self._derived.values():
            memo.derived(device, template)
        return memo

    def _new_attribute(self, key: tuple[Any, ...], raw: dict[str, Any]) -> o.DeviceAttribute | None:
        """The shared decoded attribute value of ``raw`` (not seen before) if it is clean and
        valid, else None (remembered either way)."""
        found: o.DeviceAttribute | None = None
        if None not in raw.values() and fields_clean(o.DeviceAttribute, raw):
            try:
                found = o.DeviceAttribute.model_validate(raw, strict=True)  # shared through this table
            except ValueError:  # pydantic's ValidationError: the whole-object path reports it
                found = None
        self._forget_if_full(self._attributes)
        self._attributes[key] = found
        return found

    def _remember_template(self, device: o.Device, raw: Any) -> None:
        attributes = raw.get("attributes") if type(raw) is dict else None
        if type(attributes) is not dict or not attributes or len(attributes) != len(device.attributes or {}):
            return
        if not all(type(v) is dict for v in attributes.values()) or not fields_clean(o.Device, raw):
            return
        self._forget_if_full(self._templates)
        self._templates.setdefault(self._template_key(raw, attributes), device)
        assert device.attributes is not None
        for name, value in attributes.items():
            self._forget_if_full(self._attributes)
            self._attributes.setdefault(_value_key(o.DeviceAttribute, value), device.attributes[name])

    def _shared_parts(self, device: o.Device, raw: Any) -> o.Device:
        """``device`` with its attribute and capacity values (and names) shared with equal ones
        already decoded (equal raw values decode equally). The device is new and not yet
        visible to anyone."""
        raw_attributes = raw.get("attributes") if isinstance(raw, dict) else None
        if device.attributes and isinstance(raw_attributes, dict):
            device.attributes = {sys.intern(k): self._shared(v, raw_attributes.get(k)) for k, v in device.attributes.items()}
        raw_capacity = raw.get("capacity") if isinstance(raw, dict) else None
        if device.capacity and isinstance(raw_capacity, dict):
            device.capacity = {sys.intern(k): self._shared(v, raw_capacity.get(k)) for k, v in device.capacity.items()}
        return device

    def _shared(self, value: Any, raw: Any) -> Any:
        key = _value_key(type(value), raw)
        found = self._values.get(key)
        if found is None:
            self._forget_if_full(self._values)
            found = self._values[key] = value
        return found

    def _forget_if_full(self, table: dict[Any, Any] | set[Any], limit: int = MAX_SHARED) -> None:
        if len(table) >= limit:
            table.clear()


_SCALAR_TYPES = frozenset({str, int, bool})
_UNSEEN: Any = object()


def _value_key(kind: Any, raw: Any) -> tuple[Any, ...]:
    """A key equal for raw attribute or capacity values that decode equally: the common value,
    one field holding a string, integer or boolean (``{"string": ...}``), without a repr (the
    scalar's type is part of the key: True == 1, yet they decode differently); else its repr
    (a mapping with duplicate keys says so)."""
    if type(raw) is dict and len(raw) == 1:
        ((name, item),) = raw.items()
        if type(item) in _SCALAR_TYPES:
            return (kind, name, type(item), item)
    return (kind, repr(raw))


def _list_shape(devices: list[Any]) -> tuple[int, Any, Any]:
    """A raw device list's length and its first and last devices' names (None where a name is
    not a string): a cheap test of whether it may equal a recorded list."""
    return len(devices), _device_name(devices[0]), _device_name(devices[-1])


def _device_name(raw: Any) -> str | None:
    name = raw.get("name") if type(raw) is dict else None
    return name if type(name) is str else None


def _plain_key(raw: Any) -> bytes | None:
    """``_content_key`` when ``raw`` is made of plain dicts, lists and scalars only, else None."""
    try:
        data = b"m" + marshal.dumps(raw, 2)  # version 2: no references, so 2-3x faster than 4
    except ValueError:
        return None
    return hashlib.blake2b(data, digest_size=16).digest()


def _content_key(raw: Any) -> bytes:
    """A key equal for raw values of equal content: their ``marshal`` form (plain dicts, lists
    and scalars; equal bytes => equal content, key order or shared objects only cost a miss),
    else their repr (a mapping with duplicate keys, which says so), hashed to 128 bits so that
    the table stays small when every device differs."""
    key = _plain_key(raw)
    if key is not None:
        return key
    return hashlib.blake2b(b"r" + repr(raw).encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Namespace(o.TypedObject):
    """A core/v1 Namespace as the service needs it: name and labels (the rest is preserved).

    Not part of the core's inventory; the service reads the admin-access label from it."""

    kind: str = "Namespace"


def decode_namespace(doc: dict[str, Any], *, source: str = "") -> Namespace:
    api_version = doc.get("apiVersion", "")
    if api_version not in ("", "v1"):
        raise InvalidInput(f"Namespace {_raw_name(doc)}", ("apiVersion",), 'Unsupported value: supported values: "v1"', source=source)
    try:
        ns = Namespace.model_validate(doc)
    except ValueError as err:
        raise InvalidInput(f"Namespace {_raw_name(doc)}", ("metadata",), f"Invalid value: {_clipped(str(err))}", source=source) from None
    if not ns.metadata.name:
        raise InvalidInput("Namespace", ("metadata", "name"), "Required value: name or generateName is required", source=source)
    problems = dns1123_label_errors(ns.metadata.name)
    if problems:
        raise InvalidInput(f"Namespace {_raw_name(doc)}", ("metadata", "name"), f"Invalid value: {_clipped(repr(ns.metadata.name), 66)}: {problems[0]}", source=source)
    return ns


def _raw_name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return _clipped(name, 64) if isinstance(name, str) else "<unnamed>"


def _clipped(text: str, limit: int = 300) -> str:
    if len(text) > limit:
        text = text[:limit] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def decode_documents(docs: Iterable[dict[str, Any]], *, source: str = "", decoder: ObjectDecoder | None = None) -> list[o.TypedObject]:
    dec = decoder or ObjectDecoder()
    return [dec.decode(doc, source=source) for doc in docs]


# --- screening: one bad object costs its pool, not the cluster ---------------------------------


@dataclass(frozen=True, slots=True)
class InventoryProblem:
    """An inventory object the service could not use, and what that cost."""

    source: str
    """The file it came from, or "kubernetes"."""
    kind: str
    name: str
    """``namespace/name`` or ``name`` (clipped)."""
    detail: str
    """The error, naming the field like the API server (clipped)."""
    pool: PoolKey | None = None
    """The pool made invalid by it (ResourceSlices), if known."""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        cost = f" (pool {self.pool[0]}/{self.pool[1]} is invalid)" if self.pool else " (ignored)"
        return f"{where}{self.kind} {self.name}: {self.detail}{cost}"


def problem_of(err: Exception, doc: Mapping[str, Any] | o.TypedObject, *, source: str) -> InventoryProblem:
    """The problem for an object that failed (its raw document when it did not decode)."""
    if isinstance(doc, o.TypedObject):
        kind, name, pool = doc.kind, doc.ref, _slice_pool(doc)
    else:
        kind_raw = doc.get("kind")
        kind = kind_raw if isinstance(kind_raw, str) else ""
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        ns, nm = meta.get("namespace"), meta.get("name")
        name = (f"{ns}/" if isinstance(ns, str) and ns else "") + (nm if isinstance(nm, str) else "<unnamed>")
        pool = _raw_slice_pool(doc) if kind == "ResourceSlice" else None
    detail = err.detail if isinstance(err, InvalidInput) and err.detail else str(err)
    # A strict decoding error's detail already quotes every field path.
    if isinstance(err, InvalidInput) and err.field_path and not isinstance(err, StrictDecodingError):
        detail = f"{err.field}: {detail}"
    return InventoryProblem(source, _clipped(kind, 64) or "object", _clipped(name, 128), _clipped(detail, 300), pool)


def _slice_pool(obj: o.TypedObject) -> PoolKey | None:
    if isinstance(obj, o.ResourceSlice) and obj.spec.driver and obj.spec.pool.name:
        return (obj.spec.driver, obj.spec.pool.name)
    return None


def _raw_slice_pool(doc: Mapping[str, Any]) -> PoolKey | None:
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return None
    driver, pool = spec.get("driver"), spec.get("pool")
    name = pool.get("name") if isinstance(pool, dict) else None
    if isinstance(driver, str) and driver and isinstance(name, str) and name:
        return (driver, name)
    return None


def _raw_slice_node(doc: Mapping[str, Any] | o.TypedObject) -> str:
    if isinstance(doc, o.ResourceSlice):
        return doc.spec.node_name or ""
    if isinstance(doc, o.TypedObject):
        return ""
    spec = doc.get("spec")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return node if isinstance(node, str) else ""


ParseMemo = dict[tuple[int, int], tuple[Any, Any, str, str]]
"""``allocator_parse_error``'s verdicts on devices, by the identity of what is parsed."""

ListParseMemo = dict[tuple[int, ...], tuple[tuple[o.Device, ...], str]]
"""``allocator_parse_error``'s verdicts on whole device lists, by their devices' identities."""


def allocator_parse_error(obj: o.ResourceSlice, *, memo: ParseMemo | None = None, lists: ListParseMemo | None = None) -> str:
    """What the allocator's own parsing of a slice would fail on (quantities of counters and
    capacities), or "": checked for every slice whatever the validation mode, so such a slice
    can only ever invalidate its pool, never fail a call. ``memo``: verdicts already found in
    this pass, by the identity of what is parsed (a device's capacities and counter
    consumptions, shared by equal and template-made devices; each entry holds them);
    ``lists``: the same for whole device lists (identical nodes' slices share theirs)."""
    try:
        for i, counter_set in enumerate(obj.spec.shared_counters or []):
            for name, c in counter_set.counters.items():
                _parse_at(_parsed_quantity, c.value, f"spec.sharedCounters[{i}].counters[{name}].value")
    except _ParseFailure as err:
        return str(err)
    devices = obj.spec.devices or []
    if lists is None or not devices:
        return _devices_parse_error(devices, memo)
    key = tuple(map(id, devices))
    hit = lists.get(key)
    if hit is None:
        hit = lists[key] = (tuple(devices), _devices_parse_error(devices, memo))
    return hit[1]


def _devices_parse_error(devices: Sequence[o.Device], memo: ParseMemo | None) -> str:
    for i, device in enumerate(devices):
        capacity, consumed = device.capacity, device.consumes_counters
        key = (id(capacity), id(consumed))
        hit = memo.get(key) if memo is not None else None
        if hit is None or hit[0] is not capacity or hit[1] is not consumed:
            hit = (capacity, consumed, *_device_parse_error(device))
            if memo is not None:
                memo[key] = hit
        if hit[3]:
            return f"spec.devices[{i}].{hit[2]}: {hit[3]}"
    return ""


def _device_parse_error(device: o.Device) -> tuple[str, str]:
    """(field path below the device, problem) of the first value that does not parse, or ("", "")."""
    try:
        for j, consumed in enumerate(device.consumes_counters or []):
            for name, c in consumed.counters.items():
                _parse_at(_parsed_quantity, c.value, f"consumesCounters[{j}].counters[{name}].value")
        for name, cap in (device.capacity or {}).items():
            if cap.request_policy is None:
                _parse_at(_parsed_quantity, cap.value, f"capacity[{name}]")
            else:
                _parse_at(CapacitySpec.from_api, cap, f"capacity[{name}]")
    except _ParseFailure as err:
        return err.path, err.problem
    return "", ""


@functools.lru_cache(maxsize=16_384)
def _parsed_quantity(text: str) -> object:
    """``parse_quantity``, once per distinct text (raises the same errors)."""
    return parse_quantity(text)


class _ParseFailure(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _parse_at(parse: Callable[[Any], object], value: Any, path: str) -> None:
    try:
        parse(value)
    except Exception as err:  # QuantityError, and anything else the parser trips on
        raise _ParseFailure(path, f"Invalid value: {_clipped(repr(getattr(value, 'value', value)), 64)}: {_clipped(str(err), 200)}") from None


@dataclass(frozen=True)
class Screened:
    """What a snapshot is built from once bad objects are set aside."""

    inventory: Inventory
    namespaces: Mapping[str, Mapping[str, str]] | None
    """Labels by namespace name; None when the source carries no namespace knowledge."""
    invalid_pools: Mapping[PoolKey, str]
    """Pool -> why it is invalid (the first problem found)."""
    invalid_pool_nodes: Mapping[PoolKey, str]
    """Pool -> the node of its node-local slices ("" when the pool is not node-local)."""
    problems: tuple[InventoryProblem, ...]
    problem_count: int


def screen_objects(
    objects: Iterable[o.TypedObject],
    *,
    problems: Iterable[tuple[InventoryProblem, str]] = (),
    validate: bool = False,
    namespaces_known: bool = False,
    checked: dict[int, tuple[o.TypedObject, str]] | None = None,
    sources: Mapping[int, str] | None = None,
    memo: ValidationMemo | None = None,
) -> Screened:
    """Set aside what the allocator cannot use: slices that fail validation (when
    ``validate``) or the allocator's parsing make their pool invalid (all of the pool's slices
    leave the inventory); other objects that fail validation are left out, except
    ResourceClaims, whose allocations still hold their devices. ``problems``: objects that did
    not even decode, each with the node of its slice. ``checked``: verdicts by object
    identity carried between calls (objects are immutable), so a watch event does not re-check
    a whole cluster. ``sources``: the file of each object, by identity (for reports).
    ``memo``: for this pass's validation (:meth:`ObjectDecoder.validation_memo`).
    """
    known: list[tuple[InventoryProblem, str]] = list(problems)
    kept: list[o.TypedObject] = []
    namespaces: dict[str, Mapping[str, str]] | None = {} if namespaces_known else None
    check: SelectorCheck | None = None
    fresh: dict[int, tuple[o.TypedObject, str]] = {}
    memo = memo or ValidationMemo()  # shared devices: validated once in this pass
    parse_memo: ParseMemo = {}
    list_parse_memo: ListParseMemo = {}
    # A service screens every object again on each change: the loop's common case, an object
    # already checked and found good, does as little as it can.
    earlier = (checked or {}).get
    keep = kept.append
    for obj in objects:
        if type(obj) is Namespace:
            if namespaces is None:
                namespaces = {}
            namespaces[obj.name] = dict(obj.metadata.labels or {})
            continue
        prior = earlier(id(obj))
        if prior is not None and prior[0] is obj:
            error = prior[1]
            fresh[id(obj)] = prior
            if not error:
                keep(obj)
                continue
        else:
            error = ""
            if validate:
                check = check or default_selector_check()
                errs = validate_object(obj, selector_check=check, memo=memo)
                if errs:
                    error = "; ".join(f"{e.field}: {e.detail}" if e.field_path else e.detail for e in errs[:3])
            if not error and isinstance(obj, o.ResourceSlice):
                error = allocator_parse_error(obj, memo=parse_memo, lists=list_parse_memo)
        fresh[id(obj)] = (obj, error)
        if error:
            known.append((InventoryProblem((sources or {}).get(id(obj), ""), obj.kind, _clipped(obj.ref, 128), _clipped(error, 300), _slice_pool(obj)), _raw_slice_node(obj)))
            if isinstance(obj, o.ResourceClaim):
                kept.append(obj)
            continue
        kept.append(obj)
    if checked is not None:
        checked.clear()
        checked.update(fresh)
    invalid: dict[PoolKey, str] = {}
    pool_nodes: dict[PoolKey, str] = {}
    for problem, node in known:
        if problem.pool is not None:
            invalid.setdefault(problem.pool, f"{problem.kind} {problem.name}: {problem.detail}")
            if pool_nodes.get(problem.pool, node) != node:
                node = ""  # spans nodes: treat as reachable from every node
            pool_nodes[problem.pool] = node
    if invalid:
        left: list[o.TypedObject] = []
        for obj in kept:
            pool = _slice_pool(obj) if isinstance(obj, o.ResourceSlice) else None
            if pool is None or pool not in invalid:
                left.append(obj)
            elif pool_nodes.get(pool) != (_raw_slice_node(obj) or ""):
                pool_nodes[pool] = ""  # the pool's other slices are elsewhere or shared
        kept = left
    ordered = sorted((p for p, _ in known), key=lambda p: (p.kind, p.name, p.source, p.detail))
    return Screened(
        inventory=Inventory.from_objects(kept),
        namespaces=namespaces,
        invalid_pools=invalid,
        invalid_pool_nodes=pool_nodes,
        problems=tuple(ordered[:MAX_PROBLEMS]),
        problem_count=len(ordered),
    )


# --- snapshots ------------------------------------------------------------------------------


class Snapshot:
    """One consistent, immutable view of the inventory."""

    def __init__(
        self,
        inventory: Inventory,
        *,
        generation: int,
        source: str,
        ready: bool = True,
        previous: Snapshot | None = None,
        screened: Screened | None = None,
    ) -> None:
        self.inventory = inventory
        self.namespaces: Mapping[str, Mapping[str, str]] | None = screened.namespaces if screened else None
        """Namespace labels; None when the source has no namespace knowledge."""
        self.invalid_pools: Mapping[PoolKey, str] = screened.invalid_pools if screened else {}
        self._invalid_pool_nodes: Mapping[PoolKey, str] = screened.invalid_pool_nodes if screened else {}
        self.problems: tuple[InventoryProblem, ...] = screened.problems if screened else ()
        self.problem_count = screened.problem_count if screened else 0
        self._previous = previous
        self.generation = generation
        self.source = source
        self.ready = ready
        self._index: NodeIndex | None = None
        self.index_seconds = 0.0
        """How long building ``index`` took (0 until it is built)."""
        self._lock = threading.Lock()

    @property
    def index(self) -> NodeIndex:
        with self._lock:
            if self._index is None:
                prev = self._previous._index if self._previous is not None else None
                # Building allocates ~100k small objects; with millions of live inventory objects
                # the cyclic GC would rescan them all several times over for nothing.
                enabled = gc.isenabled()
                gc.disable()
                started = time.perf_counter()
                try:
                    self._index = NodeIndex(self.inventory, previous=prev, invalid_pools=self.invalid_pools, invalid_pool_nodes=self._invalid_pool_nodes)
                    self.index_seconds = time.perf_counter() - started
                    gc.freeze()  # long-lived, like the inventory itself
                finally:
                    if enabled:
                        gc.enable()
                self._previous = None  # do not keep a chain of old snapshots alive
            return self._index

    def counts(self) -> dict[str, int]:
        inv = self.inventory
        return {
            "DeviceClass": len(inv.classes),
            "ResourceSlice": len(inv.slices),
            "ResourceClaim": len(inv.claims),
            "DeviceTaintRule": len(inv.taint_rules),
            "Node": len(inv.nodes),
            "Namespace": len(self.namespaces or {}),
        }

    def claims_by_ref(self) -> Mapping[str, o.ResourceClaim]:
        """The inventory's claims by ``namespace/name`` (the node index keeps the map from one
        snapshot to the next, reading only the claims that changed)."""
        return self.index.claims_by_ref()

    def shows_allocated(self, ref: str, uid: str = "") -> bool:
        """Whether the inventory holds claim ``ref`` allocated (the claim with ``uid``, when both
        uids are known)."""
        claim = self.claims_by_ref().get(ref)
        if claim is None or claim.status is None or claim.status.allocation is None:
            return False
        return not uid or not claim.metadata.uid or claim.metadata.uid == uid

    def allocated_claims(self) -> dict[str, str]:
        """``namespace/name`` -> uid of every claim the inventory shows allocated."""
        return {ref: c.metadata.uid or "" for ref, c in self.claims_by_ref().items() if c.allocated}


Listener = Callable[[Snapshot], None]


class InventorySource:
    """Base of every source: holds the current snapshot and tells listeners about new ones."""

    name = "static"

    def __init__(self) -> None:
        self._snapshot = Snapshot(Inventory(), generation=0, source=self.name, ready=False)
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._generation = 0
        self._checked: dict[int, tuple[o.TypedObject, str]] = {}

    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def ready(self) -> bool:
        return self._snapshot.ready

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def publish(self, inventory: Inventory, *, ready: bool = True, screened: Screened | None = None) -> Snapshot:
        with self._lock:
            self._generation += 1
            snap = Snapshot(inventory, generation=self._generation, source=self.name, ready=ready, previous=self._snapshot, screened=screened)
            self._snapshot = snap
        for listener in list(self._listeners):
            try:
                listener(snap)
            except Exception:  # a listener bug must not stop inventory updates
                log.exception("inventory listener failed")
        return snap

    def publish_objects(
        self,
        objects: Iterable[o.TypedObject],
        *,
        problems: Iterable[tuple[InventoryProblem, str]] = (),
        validate: bool = False,
        namespaces_known: bool = False,
        ready: bool = True,
    ) -> Snapshot:
        """Screen ``objects`` (:func:`screen_objects`), log what is new, publish."""
        screened = screen_objects(objects, problems=problems, validate=validate, namespaces_known=namespaces_known, checked=self._checked)
        return self.publish_screened(screened, ready=ready)

    def publish_screened(self, screened: Screened, *, ready: bool = True) -> Snapshot:
        before = set(self._snapshot.problems)
        for problem in screened.problems:
            if problem not in before:
                log.warning("inventory: %s", problem)
        if screened.problem_count > len(screened.problems):
            log.warning("inventory: %d more problems not listed", screened.problem_count - len(screened.problems))
        return self.publish(screened.inventory, ready=ready, screened=screened)

    def start(self) -> None:
        """Begin loading; may return before the source is ready."""

    def stop(self) -> None:
        """Stop background work."""


class StaticSource(InventorySource):
    """A fixed inventory, ready at once."""

    def __init__(self, objects: Iterable[o.TypedObject] = (), *, name: str = "static") -> None:
        super().__init__()
        self.name = name
        self._objects = list(objects)

    def start(self) -> None:
        if not self._snapshot.ready:
            self.publish_objects(self._objects)


def load_objects(paths: Sequence[str], *, decoder: ObjectDecoder | None = None, validate: bool = False) -> list[o.TypedObject]:
    """Objects of files/directories, one file at a time so peak memory stays one file's worth.

    ``validate``: API-server validation of every object; all problems are raised together
    (``InvalidInputs``), each naming its file, object and field.
    """
    dec = decoder or ObjectDecoder()
    objects: list[o.TypedObject] = []
    files = expand_paths(paths)
    if not files:
        raise InvalidInput("", (), "no .yaml, .yml or .json files", source=", ".join(paths))
    check: SelectorCheck | None = None
    errors: list[InvalidInput] = []
    for path in files:
        loaded = [dec.decode(doc, source=path) for doc in parse_documents(read_text(path), source=path)]
        if validate:
            check = check or default_selector_check()
            for obj in loaded:
                for err in validate_object(obj, selector_check=check):
                    errors.append(InvalidInput(err.obj, err.field_path, err.detail, source=path))
        objects.extend(loaded)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise InvalidInputs(errors)
    return objects


@dataclass
class LoadProgress:
    """How far loading an inventory's files has come (for progress lines)."""

    files: int = 0
    files_done: int = 0
    chars: int = 0
    """Characters of all files (their sizes in bytes until read: the same for ASCII)."""
    chars_done: int = 0
    objects: int = 0
    nodes: int = 0
    nodes_expected: int = 0
    """Node objects the files hold, counted from their text before decoding (an estimate
    from the files read so far while some are not; 0 when none could be counted)."""
    nodes_exact: bool = False

    def line(self) -> str:
        """``loaded 2,500/21,869 nodes, 5,001 objects (14/54 MB)``."""
        nodes = f"{self.nodes:,}"
        if self.nodes_expected >= self.nodes and self.nodes_expected:
            nodes += f"/{'' if self.nodes_exact else '~'}{self.nodes_expected:,}"
        mb = 1_000_000
        return f"loaded {nodes} nodes, {self.objects:,} objects ({self.chars_done / mb:.0f}/{self.chars / mb:.0f} MB)"


_NODE_KIND = re.compile(r'kind"?[ \t]*:[ \t]*(?:"Node"|\'Node\'|Node(?=[ \t]*(?:#|$)))', re.MULTILINE)
"""``kind: Node`` (YAML) or ``"kind":"Node"`` (JSON): counts Node objects in a file's text for
progress lines (an estimate: it starts with a literal, so the scan takes milliseconds)."""


def load_inventory_files(
    paths: Sequence[str],
    *,
    decoder: ObjectDecoder | None = None,
    sources: dict[int, str] | None = None,
    progress: Callable[[LoadProgress], None] | None = None,
) -> tuple[list[o.TypedObject], list[tuple[InventoryProblem, str]]]:
    """Objects of an inventory's files, and the documents that did not decode (each with the
    node of its slice): a bad object costs itself (or its pool), not the inventory. A file
    that cannot be read or parsed at all still fails the load. ``sources`` gets each object's
    file, by identity. Raw objects are decoded as they are parsed and dropped, so memory holds
    one file's text and the decoded objects, not every raw object besides. ``progress`` is
    told after every object (the caller decides how often to say so)."""
    dec = decoder or ObjectDecoder()
    objects: list[o.TypedObject] = []
    problems: list[tuple[InventoryProblem, str]] = []
    files = expand_paths(paths)
    if not files:
        raise InvalidInput("", (), "no .yaml, .yml or .json files", source=", ".join(paths))
    count = LoadProgress(files=len(files), chars=sum(_size(f) for f in files))
    read_chars = 0
    read_nodes = 0
    for index, path in enumerate(files):
        text = read_text(path)
        count.chars += len(text) - _size(path)
        base = read_chars
        read_chars += len(text)
        if progress is not None:
            read_nodes += len(_NODE_KIND.findall(text))
            count.nodes_exact = index == len(files) - 1
            count.nodes_expected = read_nodes if count.nodes_exact else read_nodes * count.chars // max(1, read_chars)

        def at(position: int, base: int = base) -> None:
            count.chars_done = base + position

        for doc in parse_ahead.documents(text, source=path, progress=at):
            try:
                obj = dec.decode(doc, source=path)
            except (InvalidInput, InvalidInputs) as err:
                first = err.errors[0] if isinstance(err, InvalidInputs) else err
                problems.append((problem_of(first, doc, source=path), _raw_slice_node(doc)))
            except Exception as err:  # a decoder gap: the object is unusable, the rest is fine
                problems.append((problem_of(err, doc, source=path), _raw_slice_node(doc)))
            else:
                objects.append(obj)
                if sources is not None:
                    sources[id(obj)] = path
                count.objects += 1
                if isinstance(obj, o.Node):
                    count.nodes += 1
            if progress is not None:
                progress(count)
        del text
        count.files_done += 1
        count.chars_done = read_chars
    if not objects and not problems:
        # An empty file is a mistake (or a file caught half-written): serving "no devices
        # anywhere" would turn every pod away. A reload keeps the previous snapshot instead.
        kinds = ", ".join(sorted(o.KIND_MODELS))
        raise InvalidInput("", (), f"no objects (expected {kinds}, or a List of them)", source=", ".join(files if len(files) == 1 else paths))
    return objects, problems


def _size(path: str) -> int:
    try:
        return 0 if path == "-" else Path(path).stat().st_size
    except OSError:
        return 0


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a while: building an inventory allocates millions
    of long-lived objects, and each automatic collection would rescan all of them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class FileSource(InventorySource):
    """Objects from a file or directory, reloaded when a file changes (polled)."""

    def __init__(
        self, path: str, *, poll_interval: float = 1.0, validate: bool = True, field_validation: ValidationMode = "strict"
    ) -> None:
        super().__init__()
        self.path = path
        self.field_validation: ValidationMode = field_validation
        """Unknown/duplicate fields (``serve --validate``): an invalid object (strict), a logged
        warning (warn), or nothing (ignore)."""
        self.name = f"file:{path}"
        self.poll_interval = poll_interval
        self.validate = validate
        self._stamp: tuple[tuple[str, int, int], ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reload_errors = 0
        self.last_error = ""
        self.on_reload: Callable[[bool], None] | None = None
        self.progress_interval = 2.0
        """Seconds between progress lines while loading (one line at the end in any case)."""

    def _stamps(self) -> tuple[tuple[str, int, int], ...]:
        out = []
        for f in expand_paths([self.path]):
            try:
                st = Path(f).stat()
            except OSError:
                continue
            out.append((f, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def load(self) -> Snapshot:
        """Load now; raises InvalidInput (naming file, object and field) on bad content. Logs
        progress every ``progress_interval`` seconds ("inventory: loaded 2,500/21,869 nodes,
        ...") and once at the end."""
        stamp = self._stamps()
        sources: dict[int, str] = {}
        decoder = ObjectDecoder(validate=self.field_validation)
        started = time.monotonic()
        next_line = started + self.progress_interval

        def progress(count: LoadProgress) -> None:
            nonlocal next_line
            now = time.monotonic()
            if now >= next_line:
                next_line = now + self.progress_interval
                log.info("inventory: %s", count.line())

        with _gc_paused():  # millions of new objects, none of them garbage: nothing to collect
            objects, problems = load_inventory_files([self.path], sources=sources, decoder=decoder, progress=progress)
            for line in decoder.take_warnings()[:100]:
                log.warning("inventory: %s", line)
            screened = screen_objects(
                objects, problems=problems, validate=self.validate, namespaces_known=True, checked=self._checked, sources=sources,
                memo=decoder.validation_memo(),
            )
        nodes = sum(1 for obj in objects if isinstance(obj, o.Node))
        log.info("inventory: loaded %s nodes, %s objects from %s in %.1fs", f"{nodes:,}", f"{len(objects):,}", self.path, time.monotonic() - started)
        inv = screened.inventory
        if screened.problems and not (inv.classes or inv.slices or inv.claims or inv.taint_rules or inv.nodes or screened.namespaces):
            # Nothing usable at all: a broken inventory, not a broken pool.
            errors = [InvalidInput(f"{p.kind} {p.name}", (), p.detail, source=p.source or self.path) for p in screened.problems]
            raise errors[0] if len(errors) == 1 else InvalidInputs(errors)
        self._stamp = stamp
        return self.publish_screened(screened)

    def start(self) -> None:
        self.load()
        # Published only once started: a stop() racing this (SIGTERM while loading) must not
        # join a thread that has not started; a poller started after it exits at once.
        poller = threading.Thread(target=self._poll, name="inventory-file-poll", daemon=True)
        poller.start()
        self._thread = poller

    def check(self) -> bool:
        """Reload if any file changed; True when a new snapshot was published."""
        if self._stamps() == self._stamp:
            return False
        try:
            self.load()
        except Exception as err:  # keep serving the previous snapshot
            self.reload_errors += 1
            self.last_error = str(err)
            self._stamp = self._stamps()
            log.error("inventory reload failed, keeping generation %d: %s", self._snapshot.generation, err)
            if self.on_reload:
                self.on_reload(False)
            return False
        log.info("inventory reloaded from %s: generation %d", self.path, self._snapshot.generation)
        if self.on_reload:
            self.on_reload(True)
        return True

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval):
            self.check()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# --- Kubernetes list+watch ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KubeKind:
    kind: str
    group: str
    version: str
    plural: str
    api: str
    """The typed API of :class:`service.kubeapi.client.Kube` that lists it: core, resource or rules."""
    list_method: str
    """Its cluster-wide ``list_*`` method (streamed for the watch as well)."""
    optional: bool = False
    """A kind the API server may not serve (an older DeviceTaintRule version): 404 means none."""
    churns: bool = False
    """Changed all the time while schedulers work (claims): changes of such kinds alone wait
    ``KubeSource.churn_debounce`` before a snapshot instead of ``debounce``."""


DEFAULT_KUBE_KINDS: tuple[KubeKind, ...] = (
    KubeKind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", "resource", "list_device_class"),
    KubeKind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", "resource", "list_resource_slice"),
    KubeKind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", "resource", "list_resource_claim_for_all_namespaces",
             churns=True),
    KubeKind("DeviceTaintRule", "resource.k8s.io", "v1", "devicetaintrules", "rules", "list_device_taint_rule", optional=True),
    KubeKind("Node", "", "v1", "nodes", "core", "list_node"),
    KubeKind("Namespace", "", "v1", "namespaces", "core", "list_namespace"),
)


@dataclass
class _KindState:
    objects: dict[str, o.TypedObject] = field(default_factory=dict)
    """Decoded objects by ``namespace/name`` (the informer's key), the publisher thread's own."""
    changed: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = field(default_factory=dict)
    """(new, old) of the objects changed since the last snapshot, by key, decoded by the next:
    an object written several times in between (a claim's finalizer, then its allocation) is
    decoded once, in its last version."""
    listed: bool = False


class KubeSource(InventorySource):
    """Inventory from the Kubernetes API: one informer per kind (``service.kubeapi``).

    Each informer lists, then watches from the list's resourceVersion; a watch that ends is
    resumed, ``410 Gone`` or a broken connection (an API server restart) lead to a fresh list
    whose differences arrive as changes, so nothing is lost. Changed objects are kept as the API
    sent them and decoded into per-kind maps when the next snapshot is built, each in its last
    version; a new snapshot is built at most every ``debounce`` seconds, so a burst of events
    costs one rebuild, and after a rebuild (decoding included) that took t seconds the next
    waits ``holdoff`` x t more (at most ``max_holdoff``): under a steady stream of changes (a scheduler writing claims), rebuilds
    take at most 1 / (1 + holdoff) of the time, whatever the cluster's size, instead of all of it.
    Ready (health SERVING) only after every kind has been listed once.

    When only claims changed (kinds that churn), the wait is ``churn_debounce`` (0.2 s) instead: a scheduler
    binding a backlog changes claims all the time, and at 0.05 s the rebuilds took twice the
    CPU (docs/comparing.md, "Writes over connections of our own"). What a snapshot
    does not show yet of them is covered by the reservations and in-flight allocations that
    callers send. Nodes, slices, classes and the rest still show within ``debounce``.
    """

    name = "kubernetes"

    def __init__(
        self,
        api_client: Any,
        *,
        kinds: Sequence[KubeKind] = DEFAULT_KUBE_KINDS,
        watch_timeout: int = 300,
        debounce: float = 0.05,
        churn_debounce: float = 0.2,
        holdoff: float = 4.0,
        max_holdoff: float = 2.0,
        retry_delay: float = 1.0,
    ) -> None:
        super().__init__()
        self.api_client = api_client
        self.kinds = tuple(kinds)
        self.watch_timeout = watch_timeout
        self.debounce = debounce
        self.churn_debounce = churn_debounce
        self.holdoff = holdoff
        self.max_holdoff = max_holdoff
        self.retry_delay = retry_delay
        self._state = {k.kind: _KindState() for k in self.kinds}
        self._churning = frozenset(k.kind for k in self.kinds if k.churns)
        self._state_lock = threading.Lock()
        self._dirty = threading.Event()
        self._steady = threading.Event()
        """An object of a kind that does not churn changed since the last snapshot (or none was
        built yet): the snapshot follows within ``debounce``, and such a change ends a longer
        wait for claims."""
        self._steady.set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Objects the API server already accepted: no strict field validation (our models may
        # trail a newer server's fields), as `--validate=ignore`.
        self._decoder = ObjectDecoder(validate="ignore")
        self._problems: dict[tuple[str, str], tuple[InventoryProblem, str]] = {}
        """Objects that did not decode, by (kind, namespace/name): reported, their pools invalid."""
        self.relists = 0
        self.last_publish_seconds = 0.0
        """How long the last snapshot took to build and hand to the listeners."""
        self.on_relist: Callable[[str], None] | None = None
        rules = next((k.version for k in self.kinds if k.api == "rules"), "v1")
        self.kube = kube.Kube(api_client, taint_rule_version=rules)
        self.informers = {k.kind: self._informer(k) for k in self.kinds}

    def _informer(self, kind: KubeKind) -> Informer:
        api = {"core": self.kube.core, "resource": self.kube.resource, "rules": self.kube.rules}[kind.api]
        source = kube.ListSource(
            kind.plural, kind.kind, f"{kind.group}/{kind.version}".lstrip("/"), getattr(api, kind.list_method), optional=kind.optional
        )
        informer = Informer(
            source,
            watch_timeout=self.watch_timeout,
            retry_delay=self.retry_delay,
            on_relist=lambda _name: self._relisted(kind.kind),
            on_listed=lambda _name: self._listed(kind.kind),
        )
        informer.add_handler(lambda old, new: self._changed(kind.kind, old, new))
        return informer

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()
        t = threading.Thread(target=self._publisher, name="inventory-publisher", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        self._steady.set()  # ends a wait for more claim changes at once
        for informer in self.informers.values():
            informer.request_stop()
        for informer in self.informers.values():
            informer.stop()
        for t in self._threads:
            t.join(timeout=2)

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready:
                return True
            time.sleep(0.01)
        return self.ready

    # informer callbacks: on the informer's thread, quick, never raising into it
    def _relisted(self, kind: str) -> None:
        self.relists += 1
        if self.on_relist:
            self.on_relist(kind)

    def _listed(self, kind: str) -> None:
        with self._state_lock:
            self._state[kind].listed = True
        self._steady.set()
        self._dirty.set()

    def _changed(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        current = new if new is not None else old
        if current is None:
            return
        key = ob.key(current)
        with self._state_lock:
            self._state[kind].changed[key] = (new, old)
        if kind not in self._churning:
            self._steady.set()
        self._dirty.set()

    def _apply_changes(self) -> None:
        """Decode what changed since the last snapshot into the per-kind maps. The maps and
        ``_problems`` are the publisher thread's own: only the ``changed`` hand-over is locked."""
        with self._state_lock:
            changes = [(state, state.changed) for state in self._state.values() if state.changed]
            for state, _ in changes:
                state.changed = {}
        for state, changed in changes:
            for key, (new, old) in changed.items():
                if new is None:
                    if old is not None and self._problems:
                        self._decode(old, deleted=True)  # forgets its problem, if it had one
                    state.objects.pop(key, None)
                    continue
                obj = self._decode(new)
                if obj is not None:  # else: recorded as a problem; the last good copy stays
                    state.objects[key] = obj

    def _decode(self, raw: dict[str, Any], *, deleted: bool = False) -> o.TypedObject | None:
        """The object, or None when it does not decode: recorded as a problem (its pool becomes
        invalid) until it is fixed or deleted; one bad object must not stop the watch."""
        try:
            obj = self._decoder.decode(raw, source="kubernetes")
        except Exception as err:  # InvalidInput, or a decoder gap
            first = err.errors[0] if isinstance(err, InvalidInputs) else err
            problem = problem_of(first, raw, source="kubernetes")
            if deleted:
                self._problems.pop((problem.kind, problem.name), None)
            else:
                self._problems[(problem.kind, problem.name)] = (problem, _raw_slice_node(raw))
            return None
        self._problems.pop((obj.kind, _clipped(obj.ref, 128)), None)
        return obj

    def _publisher(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._stop.wait(self.debounce)
            if not self._steady.is_set():  # only a scheduler's writes: the longer wait for more
                self._steady.wait(max(0.0, self.churn_debounce - self.debounce))
            if self._stop.is_set():
                return
            # Cleared before the changes are taken: one recorded after this shows in this
            # snapshot or sets the flag again for the next.
            self._steady.clear()
            self._dirty.clear()
            started = time.perf_counter()
            self._apply_changes()
            with self._state_lock:
                ready = all(s.listed for s in self._state.values())
            objects = [obj for s in self._state.values() for _, obj in sorted(s.objects.items())]
            problems = [self._problems[k] for k in sorted(self._problems)]
            self.publish_objects(objects, problems=problems, namespaces_known=True, ready=ready)
            self.last_publish_seconds = time.perf_counter() - started
            self._stop.wait(min(self.holdoff * self.last_publish_seconds, self.max_holdoff))
