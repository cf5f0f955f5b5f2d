"""The cluster inventory the service answers from: immutable snapshots and their sources.

A request takes one :class:`Snapshot` when it starts and reads only that (snapshot isolation):
a reload or a watch event builds a new snapshot and never changes one in use. Sources:

- :class:`StaticSource`: a fixed set of objects (tests, benchmarks, inline inventories);
- :class:`FileSource`: a file or directory of the YAML/JSON objects ``dra-solver allocate``
  reads, polled for changes and reloaded (a broken edit keeps the previous snapshot);
- :class:`KubeSource`: list+watch through the ``kubernetes`` client, relisting after
  ``410 Gone``, ready only once every kind has been listed.

Per snapshot, :class:`NodeIndex` precomputes what whole-cluster questions need: each node's
slices (so the core sees only what a node can reach), a fingerprint of each node's device shape
with the node's own name factored out (nodes with equal fingerprints and equal in-use devices
have the same answer), and free-device counts for pruning. Identical ``Device`` objects are
shared between slices when decoding (a 5,000-node cluster of identical GPUs holds each distinct
device once), so consumers must treat inventory objects as immutable and never key by ``id()``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model import objects as o
from model.allocation import AllocatedState, DeviceID, Inventory
from model.decode import decode_object, parse_documents
from model.errors import InvalidInput, InvalidInputs
from model.node_load import NodeUnits, node_key
from service.files import expand_paths, read_text

log = logging.getLogger(__name__)

PoolKey = tuple[str, str]
"""(driver, pool name)."""

KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "DeviceTaintRule", "Node")

_PLACEHOLDER = "\x00node\x00"


# --- decoding with shared devices -----------------------------------------------------------


class ObjectDecoder:
    """Decodes API objects, sharing identical ``Device`` values between ResourceSlices.

    Real clusters publish the same device description on every node; sharing cuts memory by
    the node count and decodes each distinct device once.
    """

    def __init__(self) -> None:
        self._devices: dict[str, o.Device] = {}

    def decode(self, doc: dict[str, Any], *, source: str = "") -> o.TypedObject:
        spec = doc.get("spec")
        devices = spec.get("devices") if isinstance(spec, dict) else None
        if doc.get("kind") != "ResourceSlice" or not isinstance(devices, list) or not devices:
            return decode_object(doc, source=source)
        assert isinstance(spec, dict)
        try:
            keys = [repr(d) for d in devices]  # equal repr => equal content; key order only costs a miss
        except (TypeError, ValueError):
            return decode_object(doc, source=source)
        if any(k not in self._devices for k in keys):
            # Decode the whole object once: errors then carry the exact field path.
            full = decode_object(doc, source=source)
            assert isinstance(full, o.ResourceSlice)
            for key, dev in zip(keys, full.spec.devices or [], strict=True):
                self._devices.setdefault(key, dev)
        head = decode_object({**doc, "spec": {**spec, "devices": []}}, source=source)
        assert isinstance(head, o.ResourceSlice)
        head.spec.devices = [self._devices[k] for k in keys]
        return head


def decode_documents(docs: Iterable[dict[str, Any]], *, source: str = "", decoder: ObjectDecoder | None = None) -> list[o.TypedObject]:
    dec = decoder or ObjectDecoder()
    return [dec.decode(doc, source=source) for doc in docs]


# --- snapshots ------------------------------------------------------------------------------


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def _canonical(model: o.K8sModel) -> str:
    return json.dumps(model.to_api(), sort_keys=True, separators=(",", ":"))


def _placeholder(text: str, node: str) -> str:
    return text.replace(node, _PLACEHOLDER) if node else text


def _exclusive_capable(device: o.Device) -> bool:
    return not device.allow_multiple_allocations


@dataclass(frozen=True, slots=True)
class NodeView:
    """What one node can reach, in one snapshot."""

    name: str
    pools: tuple[PoolKey, ...]
    """Pools with a slice local to this node (``spec.nodeName``)."""
    slices: tuple[o.ResourceSlice, ...]
    """Every slice the core needs for this node: its pools' slices and all non-local slices."""
    shape: bytes
    """Fingerprint of the node's devices with its own name factored out."""
    exclusive_devices: int
    """Devices of this node's local slices that are allocated exclusively (not shareable)."""
    shared_devices: int
    """Devices outside node-local slices the node may reach (no pruning by count then)."""


class NodeIndex:
    """Per-snapshot lookup structures for whole-cluster questions (built once, read-only)."""

    def __init__(self, inventory: Inventory, *, previous: NodeIndex | None = None) -> None:
        self.inventory = inventory
        # Fingerprints of unchanged slices carry over from the previous snapshot's index, so a
        # watch event about a claim does not re-fingerprint 5,000 nodes' devices.
        self._slice_parts: dict[int, tuple[o.ResourceSlice, tuple[str, str, tuple[str, ...]]]] = {}
        carried = previous._slice_parts if previous is not None else {}
        self.nodes_by_name: dict[str, o.Node] = {n.name: n for n in inventory.nodes if n.name}
        slices_by_pool: dict[PoolKey, list[o.ResourceSlice]] = {}
        local_by_node: dict[str, list[o.ResourceSlice]] = {}
        nonlocal_slices: list[o.ResourceSlice] = []
        for s in sorted(inventory.slices, key=lambda s: (s.spec.driver, s.spec.pool.name, s.name)):
            slices_by_pool.setdefault((s.spec.driver, s.spec.pool.name), []).append(s)
            if s.spec.node_name:
                local_by_node.setdefault(s.spec.node_name, []).append(s)
            else:
                nonlocal_slices.append(s)
        self.slices_by_pool = {k: tuple(v) for k, v in slices_by_pool.items()}
        nonlocal_pools = sorted({(s.spec.driver, s.spec.pool.name) for s in nonlocal_slices})
        # Pools spanning several nodes make nodes' answers depend on each other: never group them.
        pool_nodes: dict[PoolKey, set[str]] = {}
        for node, local in local_by_node.items():
            for s in local:
                pool_nodes.setdefault((s.spec.driver, s.spec.pool.name), set()).add(node)
        entangled = {p for p, ns in pool_nodes.items() if len(ns) > 1} | set(nonlocal_pools)
        shared_slices: list[o.ResourceSlice] = []
        for pool in nonlocal_pools:
            shared_slices.extend(self.slices_by_pool[pool])
        self.shared_slices = tuple(shared_slices)
        self.shared_pools = tuple(nonlocal_pools)
        shared_device_count = sum(len(s.spec.devices or []) for s in nonlocal_slices)
        selector_keys = self._selector_keys(nonlocal_slices)
        self.global_key = _digest(
            [_canonical(c) for c in sorted(inventory.classes, key=lambda c: c.name)],
            [_canonical(r) for r in sorted(inventory.taint_rules, key=lambda r: r.name)],
            [_canonical(s) for s in shared_slices],
        )
        rule_pools = {r.spec.device_selector.pool for r in inventory.taint_rules if r.spec.device_selector and r.spec.device_selector.pool}
        device_fp: dict[int, str] = {}
        views: dict[str, NodeView] = {}
        for name in inventory.node_names():
            local = local_by_node.get(name, [])
            pools = tuple(sorted({(s.spec.driver, s.spec.pool.name) for s in local}))
            slices: list[o.ResourceSlice] = []
            for pool in pools:
                slices.extend(self.slices_by_pool[pool])
            slices.extend(shared_slices)
            parts: list[object] = []
            for s in local:
                known = carried.get(id(s))
                if known is not None and known[0] is s:
                    part = known[1]
                else:
                    devs = []
                    for d in s.spec.devices or []:
                        fp = device_fp.get(id(d))
                        if fp is None:
                            fp = device_fp[id(d)] = _canonical(d)
                        devs.append(fp)
                    head = s.spec.model_copy(update={"devices": None, "node_name": None})
                    part = (_placeholder(s.name, name), _placeholder(_canonical(head), name), tuple(devs))
                self._slice_parts[id(s)] = (s, part)
                parts.append(part)
            node_obj = self.nodes_by_name.get(name)
            labels = (node_obj.metadata.labels or {}) if node_obj else {}
            parts.append(tuple(sorted((k, labels.get(k)) for k in selector_keys)))
            if selector_keys & {"metadata.name", "\x00name"}:
                parts.append(name)
            if any(p in entangled for p in pools) or any(p[1] in rule_pools for p in pools):
                parts.append(("node", name))
            exclusive = sum(1 for s in local for d in s.spec.devices or [] if _exclusive_capable(d))
            views[name] = NodeView(
                name=name,
                pools=pools,
                slices=tuple(slices),
                shape=_digest(parts),
                exclusive_devices=exclusive,
                shared_devices=shared_device_count,
            )
        self.views = views
        self.node_names = tuple(sorted(views))
        self.pool_node: dict[PoolKey, str] = {}
        for name, view in views.items():
            for pool in view.pools:
                if pool not in entangled:
                    self.pool_node[pool] = name
        self._allocated = inventory.allocated_state()
        self._inuse_by_node = _split_by_node(self._allocated, self.pool_node)
        self.device_count_by_driver: dict[str, int] = {}
        for s in inventory.slices:
            self.device_count_by_driver[s.spec.driver] = self.device_count_by_driver.get(s.spec.driver, 0) + len(s.spec.devices or [])
        self._inuse_keys: dict[str, bytes] = {}
        self._local_sets: dict[str, frozenset[DeviceID]] = {}
        self.shared_inuse_key = state_key(self._shared_state(), "")
        self._holders: dict[DeviceID, str] | None = None
        self._lock = threading.Lock()
        # Units per node shape carry over: most snapshots change claims, not devices.
        self._units: dict[bytes, NodeUnits] = previous._units if previous is not None else {}
        if len(self._units) > 2 * len(views) + 16:
            self._units = {}  # shapes that no longer exist
        self._free_units: dict[str, float] = {}
        self._orders: dict[str, list[tuple[tuple[float, str], str]]] = {}

    @staticmethod
    def _selector_keys(slices: Sequence[o.ResourceSlice]) -> frozenset[str]:
        # Node labels matter only where a node selector reads them.
        keys: set[str] = set()
        selectors: list[o.NodeSelector] = []
        for s in slices:
            if s.spec.node_selector:
                selectors.append(s.spec.node_selector)
            for d in s.spec.devices or []:
                if d.node_selector:
                    selectors.append(d.node_selector)
                if d.node_name:
                    keys.add("\x00name")
        for sel in selectors:
            for term in sel.node_selector_terms:
                for req in term.match_expressions or []:
                    keys.add(req.key)
                for req in term.match_fields or []:
                    keys.add(req.key)
        return frozenset(keys)

    def view(self, node: str) -> NodeView | None:
        return self.views.get(node)

    # --- node preference (model.node_load): computed lazily, cached per snapshot -------------

    def units(self, node: str) -> NodeUnits:
        """``node``'s devices in units (GPUs, whatever they are partitioned into); one object
        per node shape, pools named after the node renamed (see ``free_units``)."""
        view = self.views.get(node)
        if view is None:
            return NodeUnits()
        units = self._units.get(view.shape)
        if units is None:
            local = [s for pool in view.pools for s in self.slices_by_pool[pool] if s.spec.node_name == node]
            units = self._units[view.shape] = NodeUnits.of(local, pool=lambda p: _placeholder(p, node))
        return units

    def free_units(self, node: str, extra: AllocatedState | None = None) -> float:
        """Free units of ``node`` with its devices in use (plus ``extra``, e.g. in flight)."""
        if extra is None:
            cached = self._free_units.get(node)
            if cached is not None:
                return cached
        state = self.in_use(node) if extra is None else self.in_use(node).merge(extra)
        units = self.units(node)
        free = units.free(state, pool=lambda p: _placeholder(p, node)) if state is not _EMPTY else units.total
        if extra is None:
            self._free_units[node] = free
        return free

    def preference_order(self, policy: str) -> list[tuple[tuple[float, str], str]]:
        """Every node by the policy's preference (``model.node_load.node_key``) with the devices
        in use of this snapshot; computed once per snapshot and policy."""
        order = self._orders.get(policy)
        if order is None:
            order = self._orders[policy] = sorted(
                (node_key(policy, self.free_units(n), n), n) for n in self.node_names
            )
        return order

    def free_devices(self, node: str, taken: frozenset[DeviceID]) -> int:
        """Exclusive devices of ``node``'s local slices neither in use nor in ``taken``."""
        view = self.views[node]
        busy = self.in_use(node).devices | taken
        if not busy:
            return view.exclusive_devices
        local = self._local_sets.get(node)
        if local is None:
            # Built only for nodes with devices in use: most nodes of a big cluster have none.
            local = self._local_sets[node] = frozenset(
                DeviceID(s.spec.driver, s.spec.pool.name, d.name)
                for pool in view.pools
                for s in self.slices_by_pool[pool]
                if s.spec.node_name == node
                for d in s.spec.devices or []
                if _exclusive_capable(d)
            )
        return view.exclusive_devices - len(local & busy)

    @property
    def allocated(self) -> AllocatedState:
        return self._allocated

    def in_use(self, node: str) -> AllocatedState:
        """In-use state of the devices ``node`` can reach (node-local pools + shared pools)."""
        return self._inuse_by_node.get(node, _EMPTY)

    def inuse_key(self, node: str) -> bytes:
        """Fingerprint of the devices in use on ``node`` (b"" when none), name factored out."""
        key = self._inuse_keys.get(node)
        if key is None:
            state = self._inuse_by_node.get(node)
            key = self._inuse_keys[node] = b"" if state is None else state_key(state, node)
        return key

    def node_inventory(self, node: str, extra: AllocatedState | None = None) -> Inventory:
        """The reduced inventory the core needs to answer for ``node``."""
        view = self.views.get(node)
        slices = view.slices if view else self.shared_slices
        state = self._shared_state().merge(self.in_use(node))
        if extra is not None:
            state = state.merge(extra)
        node_obj = self.nodes_by_name.get(node) or self.inventory.node(node)
        return Inventory(
            classes=self.inventory.classes,
            slices=slices,
            taint_rules=self.inventory.taint_rules,
            nodes=(node_obj,),
            claims=(),
            extra_allocated=state,
        )

    def _shared_state(self) -> AllocatedState:
        return self._inuse_by_node.get("", _EMPTY)

    def holders(self) -> Mapping[DeviceID, str]:
        """Which allocated claim holds each device (for explanations)."""
        with self._lock:
            if self._holders is None:
                holders: dict[DeviceID, str] = {}
                for claim in self.inventory.claims:
                    alloc = claim.status.allocation if claim.status else None
                    if alloc is None or alloc.devices is None:
                        continue
                    for r in alloc.devices.results or []:
                        holders.setdefault(DeviceID(r.driver, r.pool, r.device), claim.ref)
                self._holders = holders
            return self._holders


_EMPTY = AllocatedState()


def device_node(dev: DeviceID, pool_node: Mapping[PoolKey, str]) -> str:
    """The node owning ``dev``'s pool, or "" for shared (network-attached) pools."""
    return pool_node.get((dev.driver, dev.pool), "")


def _split_by_node(state: AllocatedState, pool_node: Mapping[PoolKey, str]) -> dict[str, AllocatedState]:
    devices: dict[str, set[DeviceID]] = {}
    shared: dict[str, set[tuple[DeviceID, str]]] = {}
    capacity: dict[str, dict[DeviceID, Mapping[str, Any]]] = {}
    for dev in state.devices:
        devices.setdefault(device_node(dev, pool_node), set()).add(dev)
    for dev, share in state.shared:
        shared.setdefault(device_node(dev, pool_node), set()).add((dev, share))
    for dev, amounts in state.capacity.items():
        capacity.setdefault(device_node(dev, pool_node), {})[dev] = amounts
    out: dict[str, AllocatedState] = {}
    for node in set(devices) | set(shared) | set(capacity):
        out[node] = AllocatedState(
            frozenset(devices.get(node, ())), frozenset(shared.get(node, ())), capacity.get(node, {})
        )
    return out


def state_key(state: AllocatedState, node: str) -> bytes:
    """Fingerprint of an in-use state with ``node``'s name factored out of pool names."""

    def dev(d: DeviceID) -> tuple[str, str, str]:
        return (d.driver, _placeholder(d.pool, node), d.device)

    shares: dict[tuple[str, str, str], int] = {}
    for d, _share in state.shared:
        shares[dev(d)] = shares.get(dev(d), 0) + 1
    return _digest(
        sorted(dev(d) for d in state.devices),
        sorted(shares.items()),
        sorted((dev(d), sorted((k, str(v)) for k, v in amounts.items())) for d, amounts in state.capacity.items()),
    )


class Snapshot:
    """One consistent, immutable view of the inventory."""

    def __init__(self, inventory: Inventory, *, generation: int, source: str, ready: bool = True, previous: Snapshot | None = None) -> None:
        self.inventory = inventory
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
                    self._index = NodeIndex(self.inventory, previous=prev)
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

    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def ready(self) -> bool:
        return self._snapshot.ready

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def publish(self, inventory: Inventory, *, ready: bool = True) -> Snapshot:
        with self._lock:
            self._generation += 1
            snap = Snapshot(inventory, generation=self._generation, source=self.name, ready=ready, previous=self._snapshot)
            self._snapshot = snap
        for listener in list(self._listeners):
            try:
                listener(snap)
            except Exception:  # a listener bug must not stop inventory updates
                log.exception("inventory listener failed")
        return snap

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
            self.publish(Inventory.from_objects(self._objects))


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
    check: Any = None
    errors: list[InvalidInput] = []
    for path in files:
        loaded = [dec.decode(doc, source=path) for doc in parse_documents(read_text(path), source=path)]
        if validate:
            from model.validation import default_selector_check, validate_object

            check = check or default_selector_check() or (lambda _expr: None)
            for obj in loaded:
                for err in validate_object(obj, selector_check=check):
                    errors.append(InvalidInput(err.obj, err.field_path, err.detail, source=path))
        objects.extend(loaded)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise InvalidInputs(errors)
    return objects


class FileSource(InventorySource):
    """Objects from a file or directory, reloaded when a file changes (polled)."""

    def __init__(self, path: str, *, poll_interval: float = 1.0, validate: bool = True) -> None:
        super().__init__()
        self.path = path
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
        objects = load_objects([self.path], validate=self.validate)
        self._stamp = stamp
        return self.publish(Inventory.from_objects(objects))

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
    optional: bool = False
    """A kind the API server may not serve (alpha APIs): 404 means none, not an error."""


DEFAULT_KUBE_KINDS: tuple[KubeKind, ...] = (
    KubeKind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses"),
    KubeKind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices"),
    KubeKind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims"),
    KubeKind("DeviceTaintRule", "resource.k8s.io", "v1alpha3", "devicetaintrules", optional=True),
    KubeKind("Node", "", "v1", "nodes"),
)


@dataclass
class _KindState:
    objects: dict[str, o.TypedObject] = field(default_factory=dict)
    listed: bool = False
    resource_version: str = ""


class KubeSource(InventorySource):
    """Inventory from the Kubernetes API: list, then watch from the list's resourceVersion.

    A watch that ends is resumed from the last resourceVersion seen; ``410 Gone`` (the version
    is too old) triggers a fresh list. Events are applied to per-kind maps; a new snapshot is
    built at most every ``debounce`` seconds, so a burst of events costs one rebuild. Ready
    (health SERVING) only after every kind has been listed once.
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
        self._decoder = ObjectDecoder()
        self._watches: list[Any] = []
        self.relists = 0
        self.on_relist: Callable[[str], None] | None = None

    def start(self) -> None:
        for kind in self.kinds:
            t = threading.Thread(target=self._run_kind, args=(kind,), name=f"watch-{kind.plural}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._publisher, name="inventory-publisher", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        with self._state_lock:
            watches = list(self._watches)
        for w in watches:
            # Closing the stream wakes the thread blocked reading it.
            w.stop()
            resp = getattr(w, "_resp", None)
            if resp is not None:
                with contextlib.suppress(Exception):  # already closed
                    resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
        for t in self._threads:
            t.join(timeout=2)

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready:
                return True
            time.sleep(0.01)
        return self.ready

    # each kind: list, then watch until error/410, forever
    def _run_kind(self, kind: KubeKind) -> None:
        from kubernetes.client.exceptions import ApiException  # local: only this source needs it

        while not self._stop.is_set():
            try:
                self._list(kind)
                while not self._stop.is_set():
                    self._watch(kind)
            except ApiException as err:
                if err.status == 410:
                    self.relists += 1
                    log.info("watch %s: 410 Gone, relisting", kind.plural)
                    if self.on_relist:
                        self.on_relist(kind.kind)
                    continue
                if err.status == 404 and kind.optional:
                    log.info("%s.%s/%s not served; treating as empty", kind.plural, kind.group, kind.version)
                    with self._state_lock:
                        self._state[kind.kind] = _KindState(listed=True)
                    self._dirty.set()
                    self._stop.wait(60)
                    continue
                log.warning("list/watch %s failed: %s", kind.plural, err)
            except Exception as err:  # network errors: retry, keep the last good state
                if self._stop.is_set():
                    return
                log.warning("list/watch %s failed: %s", kind.plural, err)
            self._stop.wait(self.retry_delay)

    def _call(self, kind: KubeKind, **kwargs: Any) -> Any:
        from kubernetes import client

        if kind.group:
            api = client.CustomObjectsApi(self.api_client)
            return api.list_cluster_custom_object, (kind.group, kind.version, kind.plural), kwargs
        core = client.CoreV1Api(self.api_client)
        return getattr(core, f"list_{kind.kind.lower()}"), (), kwargs

    def _list(self, kind: KubeKind) -> None:
        func, args, _ = self._call(kind)
        resp = func(*args, _preload_content=False)
        body = json.loads(resp.data)
        objects: dict[str, o.TypedObject] = {}
        for item in body.get("items") or []:
            item = {"apiVersion": f"{kind.group}/{kind.version}".lstrip("/"), "kind": kind.kind, **item}
            obj = self._decode(item)
            if obj is not None:
                objects[obj.ref] = obj
        with self._state_lock:
            self._state[kind.kind] = _KindState(objects, True, (body.get("metadata") or {}).get("resourceVersion", ""))
        self._dirty.set()

    def _watch(self, kind: KubeKind) -> None:
        from kubernetes import watch as kwatch

        watch: Any = kwatch  # untyped module
        func, args, _ = self._call(kind)
        w = watch.Watch()
        with self._state_lock:
            rv = self._state[kind.kind].resource_version
            self._watches.append(w)
        try:
            self._consume(kind, w, w.stream(func, *args, resource_version=rv, timeout_seconds=self.watch_timeout, allow_watch_bookmarks=True))
        finally:
            with self._state_lock:
                self._watches.remove(w)

    def _consume(self, kind: KubeKind, w: Any, events: Any) -> None:
        for event in events:
            if self._stop.is_set():
                w.stop()
                return
            etype = event.get("type")
            raw = event.get("raw_object") or {}
            new_rv = (raw.get("metadata") or {}).get("resourceVersion", "")
            if etype == "BOOKMARK":
                with self._state_lock:
                    self._state[kind.kind].resource_version = new_rv
                continue
            raw = {"apiVersion": f"{kind.group}/{kind.version}".lstrip("/"), "kind": kind.kind, **raw}
            obj = self._decode(raw)
            with self._state_lock:
                state = self._state[kind.kind]
                if new_rv:
                    state.resource_version = new_rv
                if obj is None:
                    continue
                if etype == "DELETED":
                    state.objects.pop(obj.ref, None)
                else:
                    state.objects[obj.ref] = obj
            self._dirty.set()

    def _decode(self, raw: dict[str, Any]) -> o.TypedObject | None:
        try:
            return self._decoder.decode(raw, source="kubernetes")
        except InvalidInput as err:  # one bad object must not stop the watch
            log.warning("ignoring object: %s", err)
            return None

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
            self.publish(Inventory.from_objects(objects), ready=ready)


def kube_api_client(*, kubeconfig: str | None, in_cluster: bool) -> Any:
    """A configured ``kubernetes.client.ApiClient``."""
    from kubernetes import client
    from kubernetes import config as kconfig

    config: Any = kconfig  # untyped module
    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return client.ApiClient(cfg)
