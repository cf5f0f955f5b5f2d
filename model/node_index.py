"""Per-snapshot lookup structures for whole-cluster questions: the node index.

API:
- ``NodeIndex(inventory, *, previous=None, invalid_pools=None, invalid_pool_nodes=None)``: built
  once per inventory snapshot, read-only afterwards; when only claims changed since
  ``previous`` (the same slices, classes, taint rules and invalid pools, nodes with the same
  names and labels), it carries ``previous``'s layout and reads again only the nodes whose
  claims changed (``model.in_use``), keeping every per-node cache and visit order of the others:
  - ``views`` / ``view(node)``: what each node can reach (``NodeView``: its pools, the slices
    the core needs for it, a fingerprint of its device shape with its own name factored out,
    its exclusive device count);
  - ``node_inventory(node, extra=None)``: the reduced ``Inventory`` the core needs for ``node``
    (its pools' slices, non-local slices, its devices in use plus ``extra``);
  - ``local_shape(node)``: the fingerprint of the node's own slices alone (gang placement);
  - ``inuse_key(node)``, ``global_key``, ``shared_inuse_key``: fingerprints that make equal
    questions on equal nodes recognisable (nodes with equal shape and in-use fingerprints have
    the same answer);
  - ``free_devices(node, taken)``, ``units(node)``, ``free_units(node, extra)``,
    ``preference_order(policy)``: pruning by count and node preference (``model.node_load``);
  - ``invalid_pools_of(node)``, ``holders()``, ``allocated``, ``in_use(node)``, ``claims_by_ref()``.
- ``state_key(state, node)``: the fingerprint of an in-use state, ``node``'s name factored out.
- ``PoolKey``: ``(driver, pool name)``.

Why in the core: which nodes can share an answer, which can be pruned without a solve and in
which order a policy visits them is allocation logic (``model.schedule`` reads it), not I/O.
Identical ``Device`` objects may be shared between slices (a 5,000-node cluster of identical
GPUs holds each distinct device once), so the index treats inventory objects as immutable and
never keys by ``id()`` beyond the lifetime of the objects it holds.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.cel import AttributeReads
from dra_solver.model.cluster import AllocatedState, DeviceID, Inventory
from dra_solver.model.in_use import InUseByNode
from dra_solver.model.node_load import NodeUnits, node_key
from dra_solver.model.node_state import NodeShape, state_signature

PoolKey = tuple[str, str]
"""(driver, pool name)."""

_PLACEHOLDER = "\x00node\x00"


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def _canonical(model: o.K8sModel) -> str:
    # The API form as JSON, written by pydantic in one call (3x json.dumps of to_api()): a
    # fingerprint, so equal text must mean equal content (it does: every field and extra is
    # written), while equal content written in another key order only costs a missed share.
    return model.model_dump_json(by_alias=True, exclude_none=True)


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

    def __init__(
        self,
        inventory: Inventory,
        *,
        previous: NodeIndex | None = None,
        invalid_pools: Mapping[PoolKey, str] | None = None,
        invalid_pool_nodes: Mapping[PoolKey, str] | None = None,
    ) -> None:
        self.inventory = inventory
        self.invalid_pools: Mapping[PoolKey, str] = invalid_pools or {}
        self._invalid_pool_nodes: Mapping[PoolKey, str] = invalid_pool_nodes or {}
        self._lock = threading.Lock()
        self._holders: dict[DeviceID, str] | None = None
        self._allocated: AllocatedState | None = None
        self.carried = previous is not None and previous._same_layout(inventory, self.invalid_pools, self._invalid_pool_nodes)
        """Whether this index was carried from ``previous`` (only claims changed) or laid out."""
        if previous is not None and self.carried:
            self._carry(previous)
        else:
            self._lay_out(inventory, previous)

    def _lay_out(self, inventory: Inventory, previous: NodeIndex | None) -> None:
        invalid_pool_nodes = self._invalid_pool_nodes
        # Invalid pools a node reaches: its own (node-local) and those of no single node.
        self._invalid_local: dict[str, list[PoolKey]] = {}
        shared_invalid: list[PoolKey] = []
        for pool in sorted(self.invalid_pools):
            owner = invalid_pool_nodes.get(pool, "")
            if owner:
                self._invalid_local.setdefault(owner, []).append(pool)
            else:
                shared_invalid.append(pool)
        self._invalid_shared = tuple(shared_invalid)
        # Fingerprints of unchanged slices carry over from the previous snapshot's index, so a
        # watch event about a claim does not re-fingerprint 5,000 nodes' devices.
        self._slice_parts: dict[int, tuple[o.ResourceSlice, tuple[str, str, bytes], int]] = {}
        """Per slice: its fingerprint parts and its exclusive-capable device count."""
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
        device_fp: dict[int, str] = {}  # by identity: the inventory holds every device meanwhile
        device_lists: dict[tuple[int, ...], tuple[bytes, int]] = {}  # fingerprint, exclusive-capable devices
        views: dict[str, NodeView] = {}
        # Taint rules that select devices by name or by CEL see what state signatures factor
        # out (device names, unread attributes): nodes are then never shared.
        names_read = any(
            r.spec.device_selector is not None
            and (r.spec.device_selector.device or r.spec.device_selector.device_class_name or r.spec.device_selector.selectors)
            for r in inventory.taint_rules
        )
        self._extras: dict[str, bytes] = {}
        self._local_by_node = local_by_node
        for name in sorted(set(inventory.node_names()) | set(self._invalid_local)):
            local = local_by_node.get(name, [])
            pools = tuple(sorted({(s.spec.driver, s.spec.pool.name) for s in local}))
            slices: list[o.ResourceSlice] = []
            for pool in pools:
                slices.extend(self.slices_by_pool[pool])
            slices.extend(shared_slices)
            parts: list[object] = []
            exclusive = 0
            for s in local:
                known = carried.get(id(s))
                if known is not None and known[0] is s:
                    _, part, count = known
                else:
                    devices = s.spec.devices or []
                    ids = tuple(map(id, devices))
                    listed = device_lists.get(ids)
                    if listed is None:  # identical nodes' slices share their device lists
                        fps = []
                        for d in devices:
                            fp = device_fp.get(id(d))
                            if fp is None:
                                fp = device_fp[id(d)] = _canonical(d)
                            fps.append(fp)
                        # One digest per list keeps the node's own digest short.
                        listed = device_lists[ids] = (_digest(fps), sum(1 for d in devices if _exclusive_capable(d)))
                    devs, count = listed
                    head = s.spec.model_copy(update={"devices": None, "node_name": None})
                    part = (_placeholder(s.name, name), _placeholder(_canonical(head), name), devs)
                self._slice_parts[id(s)] = (s, part, count)
                parts.append(part)
                exclusive += count
            node_obj = self.nodes_by_name.get(name)
            labels = (node_obj.metadata.labels or {}) if node_obj else {}
            label_part = tuple(sorted((k, labels.get(k)) for k in selector_keys))
            parts.append(label_part)
            if selector_keys & {"metadata.name", "\x00name"}:
                parts.append(name)
            entangled_here = any(p in entangled for p in pools) or any(p[1] in rule_pools for p in pools)
            if entangled_here:
                parts.append(("node", name))
            broken = self.invalid_pools_of(name)
            if broken:
                parts.append(("invalid", tuple((d, _placeholder(p, name), self.invalid_pools[(d, p)]) for d, p in broken)))
            # What a state signature adds to the node's devices: everything outside its own
            # slices that may tell it apart (the node's name where anything may read it).
            named = entangled_here or bool(broken) or names_read or bool(selector_keys & {"metadata.name", "\x00name"})
            self._extras[name] = _digest(label_part, name if named else "")
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
        self.node_name_set = frozenset(views)
        self.pool_node: dict[PoolKey, str] = {}
        for name, view in views.items():
            for pool in view.pools:
                if pool not in entangled:
                    self.pool_node[pool] = name
        self._in_use = InUseByNode.of(inventory.claims, inventory.extra_allocated, self.pool_node)
        self._inuse_by_node = self._in_use.states
        self.device_count_by_driver: dict[str, int] = {}
        for s in inventory.slices:
            self.device_count_by_driver[s.spec.driver] = self.device_count_by_driver.get(s.spec.driver, 0) + len(s.spec.devices or [])
        self._inuse_keys: dict[str, bytes] = {}
        self._local_sets: dict[str, frozenset[DeviceID]] = {}
        self.shared_inuse_key = state_key(self._shared_state(), "")
        # Units per node shape carry over: most snapshots change claims, not devices.
        self._units: dict[bytes, NodeUnits] = previous._units if previous is not None else {}
        if len(self._units) > 2 * len(views) + 16:
            self._units = {}  # shapes that no longer exist
        self._free_units: dict[str, float] = {}
        self._orders: dict[tuple[str, bool], list[tuple[tuple[int, float, str], str]]] = {}
        self._order_names: dict[tuple[str, bool], tuple[str, ...]] = {}
        self._free_counts: dict[str, int] = {}
        self._free_taken: dict[str, tuple[frozenset[DeviceID], int]] = {}
        # Node shapes up to names (model.node_state) carry over while a node's slices are the
        # same objects; computed lazily (a Schedule visits them, a load need not).
        self._shapes: dict[str, tuple[tuple[o.ResourceSlice, ...], NodeShape]] = {}
        if previous is not None:
            for name, (held, shape) in previous._shapes.items():
                now = local_by_node.get(name, [])
                if len(now) == len(held) and all(a is b for a, b in zip(now, held, strict=True)):
                    self._shapes[name] = (held, shape)
        self._device_parts: dict[int, Any] = {}
        self._keys: dict[AttributeReads, dict[str, tuple[bytes, bytes, bytes]]] = {}
        self._signatures: dict[str, bytes] = {}
        self._flight_signatures: dict[tuple[object, ...], bytes] = {}
        self._flight_keys: dict[tuple[str, AttributeReads, tuple[bytes, ...]], tuple[bytes, bytes, bytes]] = {}

    def _same_layout(self, inventory: Inventory, invalid_pools: Mapping[PoolKey, str], invalid_pool_nodes: Mapping[PoolKey, str]) -> bool:
        """Whether ``inventory`` differs from this index's in claims only (and in Node objects
        that kept their names and labels): the next index then carries this one's layout."""
        mine = self.inventory
        if not (_same(mine.slices, inventory.slices) and _same(mine.classes, inventory.classes) and _same(mine.taint_rules, inventory.taint_rules)):
            return False
        if mine.extra_allocated is not inventory.extra_allocated and not (_empty(mine.extra_allocated) and _empty(inventory.extra_allocated)):
            return False
        if len(mine.nodes) != len(inventory.nodes) or any(
            a is not b and (a.name != b.name or a.metadata.labels != b.metadata.labels) for a, b in zip(mine.nodes, inventory.nodes, strict=True)
        ):
            return False
        return dict(invalid_pools) == dict(self.invalid_pools) and dict(invalid_pool_nodes) == dict(self._invalid_pool_nodes)

    def _carry(self, previous: NodeIndex) -> None:
        """This index from ``previous`` of the same layout: only the nodes whose claims changed
        are read again, and every per-node cache of the other nodes is kept."""
        for name in _LAYOUT:
            setattr(self, name, getattr(previous, name))
        self._shapes = dict(previous._shapes)
        self._device_parts = dict(previous._device_parts)
        self._local_sets = dict(previous._local_sets)
        if not _same(previous.inventory.nodes, self.inventory.nodes):
            self.nodes_by_name = {n.name: n for n in self.inventory.nodes if n.name}
        self._in_use, touched = previous._in_use.updated(self.inventory.claims)
        self._inuse_by_node = self._in_use.states
        self.shared_inuse_key = state_key(self._shared_state(), "") if "" in touched else previous.shared_inuse_key

        def kept(cache: dict[str, Any]) -> dict[str, Any]:
            out = dict(cache)  # one C-level copy: other threads may be filling ``cache``
            for node in touched:
                out.pop(node, None)
            return out

        self._inuse_keys = kept(previous._inuse_keys)
        self._free_units = kept(previous._free_units)
        self._free_counts = kept(previous._free_counts)
        self._free_taken = kept(previous._free_taken)
        self._signatures = kept(previous._signatures)
        self._keys = {reads: kept(keys) for reads, keys in dict(previous._keys).items()}
        self._flight_signatures = {}
        self._flight_keys = {}
        self._order_names = {}
        self._orders = {}
        moved = touched & self.views.keys()
        for (policy, full_last), order in dict(previous._orders).items():
            # A node's place depends on its own devices in use only: the touched ones move.
            kept_order = [entry for entry in order if entry[1] not in moved]
            for name in moved:
                bisect.insort(kept_order, (self.order_key(policy, name, full_last=full_last), name))
            self._orders[(policy, full_last)] = kept_order

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

    # --- node states up to names (model.node_state) ------------------------------------------

    def node_shape(self, node: str) -> NodeShape:
        """``node``'s own devices with names factored out (cached across snapshots while its
        slices are unchanged)."""
        known = self._shapes.get(node)
        if known is None:
            local = tuple(self._local_by_node.get(node, ()))
            with self._lock:
                shape = NodeShape.of(local, device_parts=self._device_parts)
            known = self._shapes[node] = (local, shape)
        return known[1]

    def state_signature(
        self, node: str, flight_key: tuple[bytes, ...] = (), in_flight: Callable[[], AllocatedState] | None = None
    ) -> bytes:
        """What a node's devices in use (plus those ``in_flight()`` holds, fingerprinted by
        ``flight_key``) look like up to names: devices by their position in the node's layout.
        Kept per node and per in-flight fingerprint, so a reservation re-signs its node only."""
        if in_flight is None or not flight_key:
            sig = self._signatures.get(node)
            if sig is None:
                state = self._inuse_by_node.get(node)
                sig = b"" if state is None else state_signature(state, self.node_shape(node).positions())
                self._signatures[node] = sig
            return sig
        # By the node's state up to names (its devices, those in use, those in flight), so
        # that identical nodes filling up through the same states are signed once.
        view = self.views.get(node)
        memo: tuple[object, ...] = ("state", view.shape, self.inuse_key(node), flight_key) if view is not None else ("node", node, flight_key)
        sig = self._flight_signatures.get(memo)
        if sig is None:
            sig = state_signature(self.in_use(node).merge(in_flight()), self.node_shape(node).positions())
            if len(self._flight_signatures) > 4 * len(self.views) + 64:
                self._flight_signatures.clear()
            self._flight_signatures[memo] = sig
        return sig

    def state_keys(self, reads: AttributeReads) -> Mapping[str, tuple[bytes, bytes, bytes]]:
        """Every node's ``state_key`` without devices in flight, for ``reads``: filled as nodes
        are keyed, kept for the snapshot (a few read sets at a time)."""
        return self._state_keys(reads)

    def _state_keys(self, reads: AttributeReads) -> dict[str, tuple[bytes, bytes, bytes]]:
        with self._lock:
            keys = self._keys.get(reads)
            if keys is None:
                if len(self._keys) >= 8:
                    self._keys.pop(next(iter(self._keys)))
                keys = self._keys[reads] = {}
            return keys

    def state_key(
        self,
        node: str,
        reads: AttributeReads,
        flight_key: tuple[bytes, ...] = (),
        in_flight: Callable[[], AllocatedState] | None = None,
    ) -> tuple[bytes, bytes, bytes]:
        """The node's state signature for claims that read ``reads``: nodes with equal keys
        pose the same problem up to names (``model.node_state``), so they share one solve.
        With devices in flight the key is kept per (node, reads, in-flight fingerprint), like
        the signature: a node that stays full is visited call after call with the same one."""
        if in_flight is not None and flight_key:
            memo = (node, reads, flight_key)
            known = self._flight_keys.get(memo)
            if known is None:
                known = (self.node_shape(node).under(reads), self._extras.get(node, b""), self.state_signature(node, flight_key, in_flight))
                if len(self._flight_keys) > 4 * len(self.views) + 64:
                    self._flight_keys.clear()
                self._flight_keys[memo] = known
            return known
        key = (
            self.node_shape(node).under(reads),
            self._extras.get(node, b""),
            self.state_signature(node, flight_key, in_flight),
        )
        self._state_keys(reads)[node] = key
        return key

    def view(self, node: str) -> NodeView | None:
        return self.views.get(node)

    def local_shape(self, node: str) -> bytes:
        """Fingerprint of ``node``'s own slices only, its name factored out: what claims that
        can only use node-local devices see of it (nodes of racks with different rack-level
        devices have different ``shape``s but may have equal local shapes)."""
        view = self.views.get(node)
        if view is None:
            return b""
        parts = [
            self._slice_parts[id(s)][1]
            for pool in view.pools
            for s in self.slices_by_pool[pool]
            if s.spec.node_name == node and id(s) in self._slice_parts
        ]
        return _digest(parts)

    def invalid_pools_of(self, node: str) -> tuple[PoolKey, ...]:
        """Invalid pools ``node`` may reach (their devices are never allocated)."""
        return tuple(self._invalid_local.get(node, ())) + self._invalid_shared

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
        if extra is None and node in self.views:  # never cache names callers made up
            self._free_units[node] = free
        return free

    def preference_order(self, policy: str, *, full_last: bool = False) -> list[tuple[tuple[int, float, str], str]]:
        """Every node by the policy's preference (``model.node_load.node_key``) with the devices
        in use of this snapshot; computed once per snapshot and policy. ``full_last``: nodes
        with no free device (``no_free_device``) after all others, for claims that need one."""
        order = self._orders.get((policy, full_last))
        if order is None:
            order = self._orders[(policy, full_last)] = sorted(
                (self.order_key(policy, n, full_last=full_last), n) for n in self.node_names
            )
        return order

    def order_key(self, policy: str, node: str, *, full_last: bool = False) -> tuple[int, float, str]:
        """``node``'s place in ``preference_order`` (ascending: most preferred first)."""
        return (int(full_last and self.no_free_device(node)), *node_key(policy, self.free_units(node), node))

    def preference_names(self, policy: str, *, full_last: bool = False) -> Sequence[str]:
        """``preference_order`` without the keys (cached the same way)."""
        names = self._order_names.get((policy, full_last))
        if names is None:
            order = self.preference_order(policy, full_last=full_last)
            names = self._order_names[(policy, full_last)] = tuple(n for _, n in order)
        return names

    def no_free_device(self, node: str, taken: frozenset[DeviceID] = frozenset()) -> bool:
        """Whether no claim that needs a device of its own can fit on ``node``: it has no
        devices, or none shareable and every exclusive one in use or in ``taken``."""
        view = self.views.get(node)
        return view is None or (not view.shared_devices and self.free_devices(node, taken) == 0)

    def free_devices(self, node: str, taken: frozenset[DeviceID]) -> int:
        """Exclusive devices of ``node``'s local slices neither in use nor in ``taken``."""
        if not taken:
            free = self._free_counts.get(node)
            if free is None:
                free = self._free_counts[node] = self._free_devices(node, taken)
            return free
        # Devices in flight come as one frozenset per pool state (the same object until the
        # pool's reservations change): a node pruned call after call is counted once.
        known = self._free_taken.get(node)
        if known is not None and known[0] is taken:
            return known[1]
        free = self._free_devices(node, taken)
        self._free_taken[node] = (taken, free)
        return free

    def _free_devices(self, node: str, taken: frozenset[DeviceID]) -> int:
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
        """Every device in use in this snapshot (merged from the nodes' states on first use)."""
        with self._lock:
            if self._allocated is None:
                self._allocated = self._in_use.merged()
            return self._allocated

    def claims_by_ref(self) -> Mapping[str, o.ResourceClaim]:
        """The snapshot's claims by ``namespace/name`` (kept across snapshots like ``in_use``)."""
        return self._in_use.by_ref

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

_LAYOUT = (
    "_invalid_local", "_invalid_shared", "_slice_parts", "nodes_by_name", "slices_by_pool", "shared_slices", "shared_pools",
    "global_key", "_extras", "_local_by_node", "views", "node_names", "node_name_set", "pool_node", "device_count_by_driver", "_units",
)
"""What an index built from the same slices, classes, taint rules, nodes and invalid pools
shares with its predecessor (``NodeIndex._carry``)."""


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _empty(state: AllocatedState) -> bool:
    return not (state.devices or state.shared or state.capacity)


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
