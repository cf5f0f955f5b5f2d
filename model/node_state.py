"""Node states up to names: when two nodes pose the same allocation problem.

API:
- ``NodeShape.of(slices)``: what a node's own slices (``spec.nodeName`` = the node) offer, with
  every name factored out: ``layout`` (the node's devices in upstream's search order), ``base``
  (a fingerprint of everything but device names and attribute values: drivers, slice and pool
  structure, capacities, counters, taints, binding conditions, which attributes fail CEL
  conversion), ``columns`` (per attribute, qualified as ``(domain, name)``, a fingerprint of its
  values over the layout), ``exclusive_devices``; ``under(reads)`` the fingerprint of the shape
  with attributes projected onto a read set (``ALL``: every attribute), ``positions()``.
- ``state_signature(state, positions) -> bytes``: the fingerprint of devices in use (exclusively,
  shares, consumed capacity) by their positions in a layout, not their names (b"" when none).
- ``claim_reads(claims, classes, *, compile) -> AttributeReads``: the attributes an allocation of
  ``claims`` can read: their requests' and their classes' selectors (``model.cel.reads``) and
  their constraints' attributes; ``ALL`` when any of them cannot be analysed.
- ``device_mapping(source, target, *, positions=None) -> Mapping[DeviceID, DeviceID]`` and
  ``remap_results(results, mapping, *, claims, source_node, target_node, selectors=None)``: an
  answer found on one node, written with another node's device names (device references,
  share IDs, the node selector).

Why it is sound (the invariant ``model.schedule`` relies on): two nodes with equal ``under(R)``
and equal state signatures, asked for claims whose reads are within ``R``, pose isomorphic
problems: the same devices at the same positions of upstream's search order, with the same
properties every rule reads; only names differ, and names reach answers only as device
references, share IDs and the node selector, which ``remap_results`` rewrites. Whatever else
might read a name keeps names in the caller's fingerprint (``model.node_index``: pools of
several nodes, DeviceTaintRules, node selectors). The service checks every remapped answer on
the real node's inventory (``model.check``), so a mistake here fails closed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dra_solver.model import objects as o
from dra_solver.model.cel import (
    ALL,
    AttributeReads,
    CelCompileError,
    CompiledSelector,
)
from dra_solver.model.cluster import AllocatedState, DeviceID
from dra_solver.model.pools import attribute_value
from dra_solver.model.results import share_id_for

__all__ = [
    "ALL",
    "AttributeReads",
    "NodeShape",
    "claim_reads",
    "device_mapping",
    "remap_results",
    "state_signature",
]

Attribute = tuple[str, str]
"""A qualified attribute name: (domain, name)."""

_ABSENT = b"\x00absent"


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True, eq=False)
class NodeShape:
    """A node's own devices with names factored out (see the module docstring)."""

    layout: tuple[DeviceID, ...]
    base: bytes
    columns: Mapping[Attribute, bytes]
    exclusive_devices: int
    """Devices that are allocated exclusively (not ``allowMultipleAllocations``)."""
    shareable: frozenset[int] = frozenset()
    """Positions of devices that allow multiple allocations."""
    _positions: dict[DeviceID, int] = field(default_factory=dict, repr=False)
    _under: dict[AttributeReads, bytes] = field(default_factory=dict, repr=False)

    def under(self, reads: AttributeReads) -> bytes:
        """The fingerprint with attributes projected onto ``reads`` (``ALL``: all of them)."""
        key = self._under.get(reads)
        if key is None:
            names = sorted(self.columns) if reads is ALL else sorted(reads)
            key = _digest(self.base, [(n, self.columns.get(n, _ABSENT)) for n in names])
            if len(self._under) < 8:
                self._under[reads] = key
        return key

    def exclusive(self) -> frozenset[DeviceID]:
        """The devices allocated exclusively."""
        return frozenset(d for i, d in enumerate(self.layout) if i not in self.shareable)

    def positions(self) -> Mapping[DeviceID, int]:
        """Each device's position in the layout."""
        if not self._positions and self.layout:
            self._positions.update((d, i) for i, d in enumerate(self.layout))
        return self._positions

    @staticmethod
    def of(slices: Iterable[o.ResourceSlice], *, device_parts: dict[int, Any] | None = None) -> NodeShape:
        """The shape of a node's own slices. ``device_parts`` caches each Device object's parts
        (by identity, for the duration of one build: identical devices are often shared)."""
        by_pool: dict[tuple[str, str], list[o.ResourceSlice]] = {}
        for s in slices:
            by_pool.setdefault((s.spec.driver, s.spec.pool.name), []).append(s)
        pools: list[tuple[bool, tuple[str, str], list[o.ResourceSlice]]] = []
        for key, members in by_pool.items():
            # Upstream looks at the newest generation only; slices in name order.
            newest = max(s.spec.pool.generation for s in members)
            current = sorted((s for s in members if s.spec.pool.generation == newest), key=lambda s: s.name)
            binding = any(d.binding_conditions is not None for s in current for d in s.spec.devices or [])
            pools.append((binding, key, current))
        # Pools with binding conditions come last, as upstream's GatherPools sorts them.
        pools.sort(key=lambda p: (p[0], p[1]))
        parts = device_parts if device_parts is not None else {}
        layout: list[DeviceID] = []
        base: list[object] = []
        columns: dict[Attribute, list[tuple[int, object]]] = {}
        shareable: set[int] = set()
        for binding, (driver, pool), current in pools:
            pool_part: list[object] = [driver, binding]
            for s in current:
                head = s.spec.model_dump_json(exclude=_SLICE_NAMES)
                devices: list[bytes] = []
                for d in s.spec.devices or []:
                    part = parts.get(id(d))
                    if part is None or part[0] is not d:
                        part = parts[id(d)] = (d, *_device_parts(driver, d))
                    _, device_base, attributes = part
                    position = len(layout)
                    layout.append(DeviceID(driver, pool, d.name))
                    devices.append(device_base)
                    for attribute, value in attributes:
                        columns.setdefault(attribute, []).append((position, value))
                    if d.allow_multiple_allocations:
                        shareable.add(position)
                pool_part.append((head, devices))
            base.append(pool_part)
        return NodeShape(
            layout=tuple(layout),
            base=_digest(base),
            columns={name: _digest(values) for name, values in columns.items()},
            exclusive_devices=len(layout) - len(shareable),
            shareable=frozenset(shareable),
        )


_SLICE_NAMES: Final[Any] = {"devices": True, "node_name": True, "pool": {"name", "generation"}}
_DEVICE_NAMES: Final = {"name", "attributes"}


def _device_parts(driver: str, device: o.Device) -> tuple[bytes, tuple[tuple[Attribute, object], ...]]:
    """A device without its name and attribute values (a fingerprint), and its attribute
    values by qualified name. An attribute CEL cannot represent fails every selector on the
    device, read or not, so that stays in the fingerprint."""
    attributes: list[tuple[Attribute, object]] = []
    broken = ""
    for name, attr in (device.attributes or {}).items():
        domain, slash, ident = name.partition("/")
        value: object
        if attr.string is not None:
            value = attr.string
        elif attr.int_ is not None and attr.bool_ is None:
            value = ("int", attr.int_)
        else:
            value = (attr.int_, attr.bool_, attr.version, attr.ints, attr.bools, attr.strings, attr.versions)
        attributes.append(((domain, ident) if slash else (driver, name), value))
        if not broken and attr.string is None and attr.int_ is None and attr.bool_ is None:
            _, error = attribute_value(attr)
            if error:
                broken = f"{name}: {error}"
    text = device.model_dump_json(exclude=_DEVICE_NAMES) + broken
    return hashlib.blake2b(text.encode(), digest_size=16).digest(), tuple(attributes)


def state_signature(state: AllocatedState, positions: Mapping[DeviceID, int]) -> bytes:
    """Devices in use by position in the layout (by name when outside it); b"" when none."""
    if not (state.devices or state.shared or state.capacity):
        return b""

    def where(d: DeviceID) -> object:
        at = positions.get(d)
        return at if at is not None else (d.driver, d.pool, d.device)

    shares: dict[str, tuple[object, int]] = {}
    for d, _share in state.shared:
        spot = where(d)
        key = repr(spot)
        shares[key] = (spot, shares.get(key, (spot, 0))[1] + 1)
    return _digest(
        sorted(repr(where(d)) for d in state.devices),
        sorted(shares),
        [shares[k][1] for k in sorted(shares)],
        sorted(
            (repr(where(d)), sorted((k, str(v)) for k, v in amounts.items())) for d, amounts in state.capacity.items()
        ),
    )


# --- what a claim can read -------------------------------------------------------------------


def claim_reads(
    claims: Sequence[o.ResourceClaim],
    classes: Sequence[o.DeviceClass],
    *,
    compile: Callable[[str], CompiledSelector],
) -> AttributeReads:
    """The device attributes an allocation of ``claims`` can read (see the module docstring)."""
    by_name = {c.name: c for c in classes}
    reads: set[Attribute] = set()
    expressions: list[str] = []
    for claim in claims:
        devices = claim.spec.devices
        for request in devices.requests or []:
            wanted: list[o.ExactDeviceRequest | o.DeviceSubRequest] = []
            if request.exactly is not None:
                wanted.append(request.exactly)
            wanted.extend(request.first_available or [])
            for want in wanted:
                cls_ = by_name.get(want.device_class_name)
                for selector in [*(cls_.spec.selectors or [] if cls_ else []), *(want.selectors or [])]:
                    if selector.cel is None:
                        return ALL
                    expressions.append(selector.cel.expression)
        for constraint in devices.constraints or []:
            name = constraint.match_attribute or constraint.distinct_attribute
            if name is None:
                continue
            domain, sep, ident = name.partition("/")
            if not sep:
                return ALL  # a bare name matches whatever domain has it
            reads.add((domain, ident))
    for expression in expressions:
        try:
            found = compile(expression).reads
        except CelCompileError:
            return ALL  # the allocation reports it; nothing to share
        if found is ALL:
            return ALL
        reads.update(found)
    return frozenset(reads)


# --- answers on another node -----------------------------------------------------------------


def device_mapping(
    source: Sequence[DeviceID], target: Sequence[DeviceID], *, positions: Mapping[DeviceID, int] | None = None
) -> Mapping[DeviceID, DeviceID]:
    """Position by position: a device of the source layout to the target's. ``positions``: the
    source's devices by position, when the caller keeps them (an answer reused on many nodes),
    so that nothing is built per target."""
    if len(source) != len(target):
        raise ValueError("layouts of different lengths")
    return _ByPosition(positions if positions is not None else {d: i for i, d in enumerate(source)}, target)


class _ByPosition(Mapping[DeviceID, DeviceID]):
    def __init__(self, positions: Mapping[DeviceID, int], target: Sequence[DeviceID]) -> None:
        self._positions = positions
        self._target = target

    def __getitem__(self, device: DeviceID) -> DeviceID:
        return self._target[self._positions[device]]

    def get(self, device: DeviceID, default: DeviceID | None = None) -> DeviceID | None:  # type: ignore[override]
        at = self._positions.get(device)
        return self._target[at] if at is not None else default

    def __iter__(self) -> Iterator[DeviceID]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)


def remap_results(
    results: Sequence[o.AllocationResult],
    mapping: Mapping[DeviceID, DeviceID],
    *,
    claims: Sequence[o.ResourceClaim],
    source_node: str,
    target_node: str,
    selectors: dict[tuple[int, str], o.NodeSelector] | None = None,
) -> tuple[o.AllocationResult, ...]:
    """``results`` (found on ``source_node``, maybe for other claims with the same specs) for
    ``claims`` on ``target_node``. Devices outside the mapping keep their names (pools shared
    by nodes). Share IDs are derived again from the claim and the new device, as
    ``model.results`` derives them; a node selector naming the source node names the target
    (kept in ``selectors`` by result and target node, when given: read-only, like every answer)."""
    out: list[o.AllocationResult] = []
    for at, (claim, result) in enumerate(zip(claims, results, strict=True)):
        # New objects where names change; the rest is shared with ``results`` (read-only, as
        # every answer is once made).
        update: dict[str, Any] = {}
        if result.devices is not None and result.devices.results:
            renamed: list[o.DeviceRequestAllocationResult] = []
            for index, r in enumerate(result.devices.results):
                was = DeviceID(r.driver, r.pool, r.device)
                now = mapping.get(was, was)
                changes: dict[str, Any] = {}
                if now != was:
                    changes.update(driver=now.driver, pool=now.pool, device=now.device)
                if r.share_id is not None:
                    changes["share_id"] = share_id_for(claim, index, now)
                renamed.append(r.model_copy(update=changes) if changes else r)
            update["devices"] = result.devices.model_copy(update={"results": renamed})
        selector = result.node_selector
        known = selectors.get((at, target_node)) if selectors is not None else None
        if known is not None:
            update["node_selector"] = known
        elif selector is not None and any(_selects(req, source_node) for term in selector.node_selector_terms for req in term.match_fields or []):
            terms = []
            for term in selector.node_selector_terms:
                fields = term.match_fields or []
                if any(_selects(req, source_node) for req in fields):
                    renamed_fields = [req.model_copy(update={"values": [target_node]}) if _selects(req, source_node) else req for req in fields]
                    term = term.model_copy(update={"match_fields": renamed_fields})
                terms.append(term)
            update["node_selector"] = selector.model_copy(update={"node_selector_terms": terms})
            if selectors is not None:
                selectors[(at, target_node)] = update["node_selector"]
        out.append(result.model_copy(update=update) if update else result)
    return tuple(out)


def _selects(req: o.NodeSelectorRequirement, node: str) -> bool:
    return req.key == "metadata.name" and req.values == [node]
