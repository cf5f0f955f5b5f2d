"""Node states up to names (model.node_state, NodeIndex.state_key): nodes with equal state keys
share one solve, and the answer written with each node's names equals a fresh solve there."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.model import (
    AllocatedState,
    AllocationRequest,
    DeviceID,
    Inventory,
    NodeIndex,
    allocate,
    claim_reads,
    device_mapping,
    remap_results,
)
from dra_solver.model import objects as o
from dra_solver.model.cel import ALL, CelEnvironment
from tests.builders import claim, first_available, request, selector, sub
from tests.model.alloc_builders import device_class, node, slice_

DRIVER = "gpu.example.com"
CLASS = "gpu"
CEL = CelEnvironment()

# Device profiles: what a selector may read (model, numa) and what none of the claims below
# read (a per-device serial); capacity is part of every profile.
PROFILES = [("a100", 0, "80Gi"), ("a100", 1, "80Gi"), ("h100", 0, "80Gi"), ("h100", 1, "40Gi")]

CLAIMS: list[Any] = [
    [request("r", cls=CLASS, count=1)],
    [request("r", cls=CLASS, count=2)],
    [request("r", cls=CLASS, count=1, selectors=[selector(f'device.attributes["{DRIVER}"].model == "h100"')])],
    [request("r", cls=CLASS, count=2, selectors=[selector(f'device.attributes["{DRIVER}"].numa == 1')])],
    [first_available("r", sub("big", cls=CLASS, count=3), sub("small", cls=CLASS, count=1))],
    [request("r", cls=CLASS, count=2, selectors=[selector('device.capacity["gpu.example.com"].memory.compareTo(quantity("50Gi")) >= 0')])],
]
CONSTRAINED = [{"matchAttribute": f"{DRIVER}/numa", "requests": ["r"]}]


def _device(name: str, profile: int, serial: str) -> dict[str, Any]:
    model, numa, memory = PROFILES[profile]
    return {
        "name": name,
        "attributes": {"model": {"string": model}, "numa": {"int": numa}, "serial": {"string": serial}},
        "capacity": {"memory": {"value": memory}},
    }


def _inventory(nodes: list[tuple[str, str, list[str], list[int], list[bool]]]) -> Inventory:
    """Nodes as (node, pool, device names, profiles, in use) -> one inventory."""
    slices: list[o.ResourceSlice] = []
    used: set[DeviceID] = set()
    for name, pool, devices, profiles, in_use in nodes:
        built = [_device(d, p, f"{name}-{d}-serial") for d, p in zip(devices, profiles, strict=True)]
        slices.append(slice_(f"{name}-slice", pool=pool, driver=DRIVER, node_name=name, devices=built))
        used.update(DeviceID(DRIVER, pool, d) for d, u in zip(devices, in_use, strict=True) if u)
    return Inventory(
        classes=(device_class(CLASS, DRIVER),),
        slices=tuple(slices),
        nodes=tuple(node(n[0]) for n in nodes),
        extra_allocated=AllocatedState(devices=frozenset(used)),
    )


def _solve(index: NodeIndex, claims: tuple[o.ResourceClaim, ...], name: str) -> Any:
    req = AllocationRequest(claims=claims, node=index.nodes_by_name[name], inventory=index.node_inventory(name), policy="pack")
    return allocate(req, cel=CEL, validate=False)


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)


@st.composite
def clusters(draw: Any) -> list[tuple[str, str, list[str], list[int], list[bool]]]:
    """Two or three node states (profiles in layout order, devices in use), each copied onto
    nodes with random node, pool and device names."""
    size = draw(st.integers(1, 4))
    profile = st.integers(0, len(PROFILES) - 1)
    states = [(draw(st.lists(profile, min_size=size, max_size=size)), draw(st.lists(st.booleans(), min_size=size, max_size=size)))]
    for _ in range(draw(st.integers(1, 2))):
        # Near twins of the first state (one device's profile or use differs): the states a
        # too-coarse signature would wrongly merge.
        profiles, in_use = list(states[0][0]), list(states[0][1])
        at = draw(st.integers(0, size - 1))
        if draw(st.booleans()):
            profiles[at] = draw(profile)
        else:
            in_use[at] = not in_use[at]
        states.append((profiles, in_use))
    nodes = []
    node_names = draw(st.lists(names, min_size=3, max_size=6, unique=True))
    for i, name in enumerate(node_names):
        profiles, in_use = states[draw(st.integers(0, len(states) - 1)) if i >= len(states) else i]
        devices = draw(st.lists(names, min_size=len(profiles), max_size=len(profiles), unique=True))
        nodes.append((f"node-{name}", f"pool-{name}", [f"dev-{d}" for d in devices], profiles, in_use))
    return nodes


def _claims() -> list[tuple[o.ResourceClaim, ...]]:
    out = []
    for i, spec in enumerate(CLAIMS):
        for extra in [{}, {"constraints": CONSTRAINED}] if "exactly" in spec[0] else [{}]:
            built = claim(f"c{i}", *spec, cls=CLASS, driver=DRIVER, uid=f"uid-{i}", **extra).decode()
            assert isinstance(built, o.ResourceClaim)
            out.append((built,))
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_answers_mapped_from_a_shared_state_equal_fresh_solves(nodes: Any) -> None:
    inventory = _inventory(nodes)
    index = NodeIndex(inventory)
    for claims in _claims():
        _check_sharing(index, inventory, nodes, claims)


def _check_sharing(index: NodeIndex, inventory: Inventory, nodes: Any, claims: tuple[o.ResourceClaim, ...]) -> None:
    reads = claim_reads(claims, inventory.classes, compile=CEL.compile)
    assert reads is not ALL and (DRIVER, "serial") not in reads
    groups: dict[tuple[bytes, ...], list[str]] = {}
    for name, *_ in nodes:
        groups.setdefault(index.state_key(name, reads), []).append(name)
    # Nodes built from one state share a key whatever their names (the sharing happens);
    # different states may share one too when they differ only in what the claim cannot read.
    keys_by_state: dict[tuple[Any, ...], set[tuple[bytes, ...]]] = {}
    for name, _, _, profiles, in_use in nodes:
        keys_by_state.setdefault((tuple(profiles), tuple(in_use)), set()).add(index.state_key(name, reads))
    assert all(len(keys) == 1 for keys in keys_by_state.values())
    for members in groups.values():
        source = members[0]
        shared = _solve(index, claims, source)
        for member in members:
            fresh = _solve(index, claims, member)
            assert (fresh.allocated, fresh.score) == (shared.allocated, shared.score), member
            if not shared.allocated:
                continue
            mapping = device_mapping(index.node_shape(source).layout, index.node_shape(member).layout)
            mapped = remap_results(shared.results, mapping, claims=claims, source_node=source, target_node=member)
            assert [r.to_api() for r in mapped] == [r.to_api() for r in fresh.results], member


def _two_nodes(serial_a: str, serial_b: str) -> Inventory:
    def one(name: str, serial: str) -> o.ResourceSlice:
        device = _device("gpu-0", 0, serial)
        return slice_(f"{name}-slice", pool=name, driver=DRIVER, node_name=name, devices=[device])

    return Inventory(classes=(device_class(CLASS, DRIVER),), slices=(one("node-a", serial_a), one("node-b", serial_b)), nodes=(node("node-a"), node("node-b")))


def _reads(expression: str) -> Any:
    c = claim("c", request("r", cls=CLASS, selectors=[selector(expression)]), cls=CLASS, driver=DRIVER).decode()
    assert isinstance(c, o.ResourceClaim)
    return claim_reads((c,), (device_class(CLASS, DRIVER),), compile=CEL.compile)


def test_a_selector_reading_an_attribute_that_names_the_node_splits_states() -> None:
    # Each device carries its node's name (as a serial or hostname attribute would).
    index = NodeIndex(_two_nodes("node-a", "node-b"))
    unread = _reads(f'device.attributes["{DRIVER}"].model == "a100"')
    assert index.state_key("node-a", unread) == index.state_key("node-b", unread)
    naming = _reads(f'device.attributes["{DRIVER}"].serial == "node-a"')
    assert naming == frozenset({(DRIVER, "serial")})
    assert index.state_key("node-a", naming) != index.state_key("node-b", naming)
    # A selector the analysis cannot bound reads everything, names included.
    opaque = _reads(f'device.attributes["{DRIVER}"].exists(k, k == "serial")')
    assert opaque is ALL
    assert index.state_key("node-a", ALL) != index.state_key("node-b", ALL)


def test_state_keys_follow_reservations_and_inventory_changes() -> None:
    inventory = _two_nodes("x", "x")
    index = NodeIndex(inventory)
    empty = index.state_key("node-a", ALL)
    assert index.state_key("node-b", ALL) == empty
    # A device in flight on node-a: its key changes, node-b's does not; gone again, back.
    held = AllocatedState(devices=frozenset({DeviceID(DRIVER, "node-a", "gpu-0")}))
    busy = index.state_key("node-a", ALL, (b"v1",), lambda: held)
    assert busy != empty
    assert index.state_key("node-b", ALL) == empty
    assert index.state_key("node-a", ALL) == empty
    # The same device held on node-b is the same state up to names.
    held_b = AllocatedState(devices=frozenset({DeviceID(DRIVER, "node-b", "gpu-0")}))
    assert index.state_key("node-b", ALL, (b"v2",), lambda: held_b) == busy
    # A new snapshot where node-a's slice changed: node-b's shape carries over untouched.
    changed = slice_("node-a-slice", pool="node-a", driver=DRIVER, node_name="node-a", devices=[_device("gpu-0", 3, "x")], generation=2)
    after = NodeIndex(
        Inventory(classes=inventory.classes, slices=(changed, inventory.slices[1]), nodes=inventory.nodes),
        previous=index,
    )
    assert after.node_shape("node-b") is index.node_shape("node-b")
    assert after.state_key("node-a", ALL) != after.state_key("node-b", ALL)
    # The device in use in the inventory itself (an allocated claim): same as in flight.
    used = NodeIndex(
        Inventory(classes=inventory.classes, slices=inventory.slices, nodes=inventory.nodes, extra_allocated=held), previous=index
    )
    assert used.state_key("node-a", ALL) == busy
    assert used.state_key("node-b", ALL) == empty


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.attributes["d.io"].x == 1', {("d.io", "x")}),
        ("device.attributes.d.x == 1 && has(device.attributes.d.y)", {("d", "x"), ("d", "y")}),
        ('device.attributes["d"]["x"] == 1 || device.attributes[?"d"].?y.orValue(0) == 1', {("d", "x"), ("d", "y")}),
        ('has(device.attributes.d) && device.driver == "d"', set()),
        ('device.capacity["d"].memory.compareTo(quantity("1Gi")) >= 0', set()),
        # Anything else that touches the attributes reads all of them.
        ('"d" in device.attributes', None),
        ('device.attributes["d"].exists(k, k == "x")', None),
        ('cel.bind(m, device.attributes["d"], m.x == 1)', None),
        ('device.attributes["d"][device.driver] == 1', None),
        ("size(device.attributes) > 0", None),
    ],
)
def test_read_sets_are_exact_or_everything(expression: str, expected: set[tuple[str, str]] | None) -> None:
    reads = CEL.compile(expression).reads
    assert reads == (None if expected is None else frozenset(expected))


def test_kept_keys_with_devices_in_flight_follow_reads_and_the_fingerprint() -> None:
    """A node's key with devices in flight is kept per (node, reads, fingerprint): another
    read set, another fingerprint or another node is keyed afresh, never from the kept one."""
    index = NodeIndex(_two_nodes("node-a", "node-b"))
    held = AllocatedState(devices=frozenset({DeviceID(DRIVER, "node-a", "gpu-0")}))
    naming = _reads(f'device.attributes["{DRIVER}"].serial == "node-a"')
    unread = _reads(f'device.attributes["{DRIVER}"].model == "a100"')
    busy_unread = index.state_key("node-a", unread, (b"v1",), lambda: held)
    busy_naming = index.state_key("node-a", naming, (b"v1",), lambda: held)
    assert busy_unread != busy_naming  # the serial (node-a's name) is read by one only
    assert busy_unread[0] == index.state_key("node-a", unread)[0] and busy_naming[0] == index.state_key("node-a", naming)[0]
    # Nothing in flight any more under another fingerprint: the node's own state again.
    assert index.state_key("node-a", unread, (b"v2",), lambda: AllocatedState())[2] == index.state_key("node-a", unread)[2]
    assert index.state_key("node-a", unread, (b"v1",), lambda: held) == busy_unread
    # node-b with the same fingerprint bytes: its own name in the key, not node-a's.
    held_b = AllocatedState(devices=frozenset({DeviceID(DRIVER, "node-b", "gpu-0")}))
    assert index.state_key("node-b", naming, (b"v1",), lambda: held_b) != busy_naming
    assert index.state_key("node-b", unread, (b"v1",), lambda: held_b) == busy_unread


def test_an_answer_reused_node_after_node_keeps_renamed_selectors_for_the_last_node_only() -> None:
    """A filling cluster reuses one answer on node after node: each gets its own node selector,
    asked again on the same node the renamed selector is reused, and what is kept does not
    grow with the nodes visited (clearing hundreds of them at once stalled a call)."""
    from dra_solver.model.schedule import KnownAnswer, answer_on

    names = [f"node-{i:03}" for i in range(300)]
    inventory = _inventory([(n, f"pool-{n}", ["dev-0", "dev-1"], [0, 0], [False, False]) for n in names])
    index = NodeIndex(inventory)
    claims = _claims()[0]
    source = _solve(index, claims, names[0])
    assert source.allocated
    known = KnownAnswer(names[0], index.node_shape(names[0]).layout, source)

    def on(name: str) -> Any:
        req = AllocationRequest(claims=claims, node=index.nodes_by_name[name], inventory=index.node_inventory(name), policy="pack")
        return answer_on(known, req, index.node_shape(name).layout)

    first = on(names[1])
    again = on(names[1])
    assert again.results[0].node_selector is first.results[0].node_selector
    for name in names[1:]:
        mapped = on(name)
        fresh = _solve(index, claims, name)
        assert [r.to_api() for r in mapped.results] == [r.to_api() for r in fresh.results], name
        assert {node for _, node in known.selectors} == {name}
