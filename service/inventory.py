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

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    ValidationMode,
    check_fields,
    decode_object,
    default_selector_check,
    dns1123_label_errors,
    parse_documents,
    parse_quantity,
    validate_object,
)
from dra_solver.model import objects as o
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
    the node count and decodes each distinct device once.
    """

    def __init__(self, *, validate: ValidationMode = "strict") -> None:
        self._devices: dict[str, o.Device] = {}
        self.validate: ValidationMode = validate
        """Field validation (kubectl's --validate) of every object decoded."""
        self._warnings: list[StrictDecodingError] = []

    def take_warnings(self) -> list[str]:
        """``validate="warn"`` problems found since the last call, one line each."""
        out = [w.warning() for w in self._warnings]
        self._warnings.clear()
        return out

    def decode(self, doc: dict[str, Any], *, source: str = "") -> o.TypedObject:
        if doc.get("kind") == "Namespace":
            return decode_namespace(doc, source=source)
        spec = doc.get("spec")
        devices = spec.get("devices") if isinstance(spec, dict) else None
        if doc.get("kind") != "ResourceSlice" or not isinstance(devices, list) or not devices:
            return decode_object(doc, source=source, validate=self.validate, warnings=self._warnings)
        assert isinstance(spec, dict)
        # Unknown and duplicate fields are checked on the whole document, shared devices or not.
        check_fields(doc, source=source, validate=self.validate, warnings=self._warnings)
        try:
            keys = [repr(d) for d in devices]  # equal repr => equal content; key order only costs a miss
        except (TypeError, ValueError):
            return decode_object(doc, source=source, validate="ignore")
        if any(k not in self._devices for k in keys):
            # Decode the whole object once: errors then carry the exact field path.
            full = decode_object(doc, source=source, validate="ignore")
            assert isinstance(full, o.ResourceSlice)
            for key, dev in zip(keys, full.spec.devices or [], strict=True):
                self._devices.setdefault(key, dev)
        head = decode_object({**doc, "spec": {**spec, "devices": []}}, source=source, validate="ignore")
        assert isinstance(head, o.ResourceSlice)
        head.spec.devices = [self._devices[k] for k in keys]
        return head


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


def allocator_parse_error(obj: o.ResourceSlice) -> str:
    """What the allocator's own parsing of a slice would fail on (quantities of counters and
    capacities), or "": checked for every slice whatever the validation mode, so such a slice
    can only ever invalidate its pool, never fail a call."""
    try:
        for i, counter_set in enumerate(obj.spec.shared_counters or []):
            for name, c in counter_set.counters.items():
                _parse_at(parse_quantity, c.value, f"spec.sharedCounters[{i}].counters[{name}].value")
        for i, device in enumerate(obj.spec.devices or []):
            for j, consumed in enumerate(device.consumes_counters or []):
                for name, c in consumed.counters.items():
                    _parse_at(parse_quantity, c.value, f"spec.devices[{i}].consumesCounters[{j}].counters[{name}].value")
            for name, cap in (device.capacity or {}).items():
                _parse_at(CapacitySpec.from_api, cap, f"spec.devices[{i}].capacity[{name}]")
    except _ParseFailure as err:
        return str(err)
    return ""


class _ParseFailure(Exception):
    pass


def _parse_at(parse: Callable[[Any], object], value: Any, path: str) -> None:
    try:
        parse(value)
    except Exception as err:  # QuantityError, and anything else the parser trips on
        raise _ParseFailure(f"{path}: Invalid value: {_clipped(repr(getattr(value, 'value', value)), 64)}: {_clipped(str(err), 200)}") from None


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
) -> Screened:
    """Set aside what the allocator cannot use: slices that fail validation (when
    ``validate``) or the allocator's parsing make their pool invalid (all of the pool's slices
    leave the inventory); other objects that fail validation are left out, except
    ResourceClaims, whose allocations still hold their devices. ``problems``: objects that did
    not even decode, each with the node of its slice. ``checked``: verdicts by object
    identity carried between calls (objects are immutable), so a watch event does not re-check
    a whole cluster. ``sources``: the file of each object, by identity (for reports).
    """
    known: list[tuple[InventoryProblem, str]] = list(problems)
    kept: list[o.TypedObject] = []
    namespaces: dict[str, Mapping[str, str]] | None = {} if namespaces_known else None
    check: SelectorCheck | None = None
    fresh: dict[int, tuple[o.TypedObject, str]] = {}
    for obj in objects:
        if isinstance(obj, Namespace):
            if namespaces is None:
                namespaces = {}
            namespaces[obj.name] = dict(obj.metadata.labels or {})
            continue
        prior = checked.get(id(obj)) if checked is not None else None
        if prior is not None and prior[0] is obj:
            error = prior[1]
        else:
            error = ""
            if validate:
                check = check or default_selector_check()
                errs = validate_object(obj, selector_check=check)
                if errs:
                    error = "; ".join(f"{e.field}: {e.detail}" if e.field_path else e.detail for e in errs[:3])
            if not error and isinstance(obj, o.ResourceSlice):
                error = allocator_parse_error(obj)
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
                try:
                    self._index = NodeIndex(self.inventory, previous=prev, invalid_pools=self.invalid_pools, invalid_pool_nodes=self._invalid_pool_nodes)
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

    def allocated_claims(self) -> dict[str, str]:
        """``namespace/name`` -> uid of every claim the inventory shows allocated."""
        return {c.ref: c.metadata.uid or "" for c in self.inventory.claims if c.allocated}


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


def load_inventory_files(
    paths: Sequence[str], *, decoder: ObjectDecoder | None = None, sources: dict[int, str] | None = None
) -> tuple[list[o.TypedObject], list[tuple[InventoryProblem, str]]]:
    """Objects of an inventory's files, and the documents that did not decode (each with the
    node of its slice): a bad object costs itself (or its pool), not the inventory. A file
    that cannot be read or parsed at all still fails the load. ``sources`` gets each object's
    file, by identity."""
    dec = decoder or ObjectDecoder()
    objects: list[o.TypedObject] = []
    problems: list[tuple[InventoryProblem, str]] = []
    files = expand_paths(paths)
    if not files:
        raise InvalidInput("", (), "no .yaml, .yml or .json files", source=", ".join(paths))
    for path in files:
        for doc in parse_documents(read_text(path), source=path):
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
    return objects, problems


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
        """Load now; raises InvalidInput (naming file, object and field) on bad content."""
        stamp = self._stamps()
        sources: dict[int, str] = {}
        decoder = ObjectDecoder(validate=self.field_validation)
        objects, problems = load_inventory_files([self.path], sources=sources, decoder=decoder)
        for line in decoder.take_warnings()[:100]:
            log.warning("inventory: %s", line)
        screened = screen_objects(objects, problems=problems, validate=self.validate, namespaces_known=True, checked=self._checked, sources=sources)
        inv = screened.inventory
        if screened.problems and not (inv.classes or inv.slices or inv.claims or inv.taint_rules or inv.nodes or screened.namespaces):
            # Nothing usable at all: a broken inventory, not a broken pool.
            errors = [InvalidInput(f"{p.kind} {p.name}", (), p.detail, source=p.source or self.path) for p in screened.problems]
            raise errors[0] if len(errors) == 1 else InvalidInputs(errors)
        self._stamp = stamp
        return self.publish_screened(screened)

    def start(self) -> None:
        self.load()
        self._thread = threading.Thread(target=self._poll, name="inventory-file-poll", daemon=True)
        self._thread.start()

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


DEFAULT_KUBE_KINDS: tuple[KubeKind, ...] = (
    KubeKind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", "resource", "list_device_class"),
    KubeKind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", "resource", "list_resource_slice"),
    KubeKind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", "resource", "list_resource_claim_for_all_namespaces"),
    KubeKind("DeviceTaintRule", "resource.k8s.io", "v1", "devicetaintrules", "rules", "list_device_taint_rule", optional=True),
    KubeKind("Node", "", "v1", "nodes", "core", "list_node"),
    KubeKind("Namespace", "", "v1", "namespaces", "core", "list_namespace"),
)


@dataclass
class _KindState:
    objects: dict[str, o.TypedObject] = field(default_factory=dict)
    """Decoded objects by ``namespace/name`` (the informer's key)."""
    listed: bool = False


class KubeSource(InventorySource):
    """Inventory from the Kubernetes API: one informer per kind (``service.kubeapi``).

    Each informer lists, then watches from the list's resourceVersion; a watch that ends is
    resumed, ``410 Gone`` or a broken connection (an API server restart) lead to a fresh list
    whose differences arrive as changes, so nothing is lost. Changes are decoded into per-kind
    maps; a new snapshot is built at most every ``debounce`` seconds, so a burst of events costs
    one rebuild. Ready (health SERVING) only after every kind has been listed once.
    """

    name = "kubernetes"

    def __init__(
        self,
        api_client: Any,
        *,
        kinds: Sequence[KubeKind] = DEFAULT_KUBE_KINDS,
        watch_timeout: int = 300,
        debounce: float = 0.05,
        retry_delay: float = 1.0,
    ) -> None:
        super().__init__()
        self.api_client = api_client
        self.kinds = tuple(kinds)
        self.watch_timeout = watch_timeout
        self.debounce = debounce
        self.retry_delay = retry_delay
        self._state = {k.kind: _KindState() for k in self.kinds}
        self._state_lock = threading.Lock()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Objects the API server already accepted: no strict field validation (our models may
        # trail a newer server's fields), as `--validate=ignore`.
        self._decoder = ObjectDecoder(validate="ignore")
        self._problems: dict[tuple[str, str], tuple[InventoryProblem, str]] = {}
        """Objects that did not decode, by (kind, namespace/name): reported, their pools invalid."""
        self.relists = 0
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
        self._dirty.set()

    def _changed(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            if old is not None:
                self._decode(old, deleted=True)  # forgets its problem, if it had one
                with self._state_lock:
                    self._state[kind].objects.pop(ob.key(old), None)
        else:
            obj = self._decode(new)
            if obj is not None:  # else: recorded as a problem; the last good copy stays
                with self._state_lock:
                    self._state[kind].objects[ob.key(new)] = obj
        self._dirty.set()

    def _decode(self, raw: dict[str, Any], *, deleted: bool = False) -> o.TypedObject | None:
        """The object, or None when it does not decode: recorded as a problem (its pool becomes
        invalid) until it is fixed or deleted; one bad object must not stop the watch."""
        try:
            obj = self._decoder.decode(raw, source="kubernetes")
        except Exception as err:  # InvalidInput, or a decoder gap
            first = err.errors[0] if isinstance(err, InvalidInputs) else err
            problem = problem_of(first, raw, source="kubernetes")
            with self._state_lock:
                if deleted:
                    self._problems.pop((problem.kind, problem.name), None)
                else:
                    self._problems[(problem.kind, problem.name)] = (problem, _raw_slice_node(raw))
            self._dirty.set()
            return None
        with self._state_lock:
            self._problems.pop((obj.kind, _clipped(obj.ref, 128)), None)
        return obj

    def _publisher(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._stop.wait(self.debounce)
            self._dirty.clear()
            with self._state_lock:
                ready = all(s.listed for s in self._state.values())
                objects = [obj for s in self._state.values() for _, obj in sorted(s.objects.items())]
                problems = [self._problems[k] for k in sorted(self._problems)]
            self.publish_objects(objects, problems=problems, namespaces_known=True, ready=ready)
