"""Schedule's node choice per policy: after the FirstAvailable score, ``pack`` takes the
fullest node that fits (empty nodes stay empty for claims that need a whole node), ``spread``
the emptiest, ``first-fit`` the first in name order. Devices in flight (reservations) count."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver import model
from dra_solver.service import engine as e
from dra_solver.service.bench import device_class, gpu_node
from dra_solver.service.inventory import StaticSource, decode_documents
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from tests import builders as b

DRIVER = "gpu.example.com"


def _engine(used: dict[str, int]) -> e.Engine:
    docs: list[dict[str, Any]] = [device_class()]
    for name in ("n1", "n2", "n3", "n4"):
        docs.extend(gpu_node(name))
    for i, (node, count) in enumerate(sorted(used.items())):
        used = b.claim(f"used-{i}", ns="x", uid=f"u{i}", cls=DRIVER, driver=DRIVER, pool=node)
        docs.append(used.request("gpu", count=count).allocated(*(f"gpu-{g}" for g in range(count))).obj())
    engine = e.Engine(source=StaticSource(decode_documents(docs)), reservations=ReservationStore(), metrics=Metrics())
    engine.source.start()
    return engine


def _schedule(engine: e.Engine, claim: dict[str, Any], policy: str = "", *, reserve: bool = False,
              nodes: tuple[str, ...] = ()) -> e.ScheduleAnswer:
    return engine.schedule([json.dumps(claim).encode()], nodes, opts=e.SolveOptions(policy=policy), reserve=reserve)


@pytest.mark.parametrize(
    ("policy", "node"),
    [("", "n3"), ("pack", "n3"), ("spread", "n1"), ("first-fit", "n1"), ("score", "n1")],
)
def test_node_choice_per_policy(policy: str, node: str) -> None:
    # n1 empty, n2 has 2 GPUs in use, n3 has 6, n4 is full.
    engine = _engine({"n2": 2, "n3": 6, "n4": 8})
    answer = _schedule(engine, b.SOLVER_TEST.named("two").request("gpu", count=2).obj(), policy)
    assert answer.node == node
    assert all(c.result is not None for c in answer.claims)


def test_pack_falls_back_to_the_next_fullest_node_that_fits() -> None:
    engine = _engine({"n2": 2, "n3": 6, "n4": 8})
    assert _schedule(engine, b.SOLVER_TEST.named("four").request("gpu", count=4).obj()).node == "n2"
    assert _schedule(engine, b.SOLVER_TEST.named("eight").request("gpu", count=8).obj()).node == "n1"


def test_explicit_candidates_follow_the_policy_too() -> None:
    engine = _engine({"n2": 2, "n3": 6})
    assert _schedule(engine, b.SOLVER_TEST.named("one").request("gpu").obj(), "pack", nodes=("n1", "n2")).node == "n2"
    assert _schedule(engine, b.SOLVER_TEST.named("one").request("gpu").obj(), "spread", nodes=("n2", "n3")).node == "n2"


@pytest.mark.parametrize("policy", ["", "pack", "spread", "first-fit"])
def test_a_list_of_every_node_is_visited_as_no_list(policy: str) -> None:
    # A scheduler that filtered no node out sends them all (in its order, maybe one twice):
    # same node, same verdicts in the same order, as a call that names none, while
    # reservations fill the nodes.
    engine = _engine({"n2": 2, "n3": 6, "n4": 8})
    for i in range(12):
        claim = b.SOLVER_TEST.named(f"c{i}").request("gpu", count=1 + i % 3).obj()
        listed = _schedule(engine, claim, policy, nodes=("n4", "n1", "n3", "n2", "n1"))
        unlisted = _schedule(engine, claim, policy)
        assert listed.node == unlisted.node and listed.verdicts == unlisted.verdicts, i
        assert listed.stats.nodes_total == unlisted.stats.nodes_total == 4
        _schedule(engine, claim, policy, reserve=True)
    nothing_fits = b.SOLVER_TEST.named("nine").request("gpu", count=9).obj()
    assert len(_schedule(engine, nothing_fits, policy).verdicts) == 4


@pytest.mark.parametrize(
    "nodes",
    [("n1", "n2", "n3"), ("n1", "n1", "n2", "n3"), ("n3", "n2", "n1", "n4", "n9")],
    ids=["one left out", "as many names, one twice", "one more"],
)
def test_a_list_that_is_not_every_node_is_visited_as_given(nodes: tuple[str, ...]) -> None:
    engine = _engine({"n2": 2})
    answer = _schedule(engine, b.SOLVER_TEST.named("nine").request("gpu", count=9).obj(), "pack", nodes=nodes)
    assert sorted(v.node for v in answer.verdicts) == sorted(set(nodes))
    assert answer.stats.nodes_total == len(set(nodes))
    if "n9" in nodes:
        assert next(v.reason for v in answer.verdicts if v.node == "n9") == 'node "n9" not found in the inventory'


def test_reservations_count_as_load() -> None:
    engine = _engine({})
    placed = [_schedule(engine, b.SOLVER_TEST.named(f"c{i}").request("gpu").obj(), "spread", reserve=True).node for i in range(4)]
    assert placed == ["n1", "n2", "n3", "n4"]  # every reservation makes its node fuller
    packed = _engine({})
    placed = [_schedule(packed, b.SOLVER_TEST.named(f"c{i}").request("gpu").obj(), "pack", reserve=True).node for i in range(4)]
    assert placed == ["n1", "n1", "n1", "n1"]


def test_the_firstavailable_score_comes_before_node_preference() -> None:
    # The best alternative (8 GPUs) fits only on the empty node: pack must not prefer n3.
    engine = _engine({"n3": 6})
    claim = b.SOLVER_TEST.named("flexible").request("gpu").obj()
    claim["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "eight", "deviceClassName": DRIVER, "count": 8},
        {"name": "one", "deviceClassName": DRIVER, "count": 1},
    ]}]
    answer = _schedule(engine, claim, "pack")
    assert answer.node == "n1"
    assert answer.score == 8


def test_nodes_without_a_free_device_are_visited_last_by_claims_that_need_one() -> None:
    # pack prefers the fullest node; a full one can only be pruned, so it comes after the rest
    # and a visit that finds a node first never reports it (the choice is the same).
    engine = _engine({"n2": 2, "n3": 6, "n4": 8})
    answer = _schedule(engine, b.SOLVER_TEST.named("one").request("gpu").obj(), reserve=True)
    assert answer.node == "n3"
    assert [v.node for v in answer.verdicts] == ["n3"]
    # One more fills n3 with reservations: it then comes last as well.
    assert _schedule(engine, b.SOLVER_TEST.named("more").request("gpu").obj(), reserve=True).node == "n3"
    answer = _schedule(engine, b.SOLVER_TEST.named("next").request("gpu").obj())
    assert (answer.node, [v.node for v in answer.verdicts]) == ("n2", ["n2"])
    # Nothing fits anywhere: every node is still visited and counted.
    answer = _schedule(engine, b.SOLVER_TEST.named("nine").request("gpu", count=9).obj())
    assert answer.node == "" and len(answer.verdicts) == 4
    # The scheduler tells these verdicts by their words (nothing to explain on such a node).
    assert all(model.is_too_few_free(v.reason) for v in answer.verdicts)
    assert not model.is_too_few_free("cannot allocate all claims") and not model.is_too_few_free(answer.reason)
    assert answer.reason.startswith("0/4 nodes are available: 4 cannot allocate all claims")


@pytest.mark.parametrize("policy", ["pack", "spread", "first-fit"])
def test_the_visit_order_kept_across_calls_equals_a_fresh_one(policy: str) -> None:
    from dra_solver.model import FlightOrder
    from dra_solver.model.node_load import node_key
    from dra_solver.model.policy import NODE_POLICIES
    from dra_solver.model.schedule import visit_order

    engine = _engine({"n2": 3, "n4": 8})
    store = engine.reservations
    snap = engine.current()
    kept = FlightOrder()
    # n4 is full in the snapshot; n2 has three GPUs in use.
    for step in _random_reservations(store, 80, seed=7, free={"n1": 8, "n2": 5, "n3": 8}):
        now = store.now()
        # now() keeps per-pool states between calls: they must be what the store holds.
        assert now.fingerprints() == store.fingerprints() and now.state() == store.state()
        for full_last in (False, True):
            for explicit in (False, True):
                # A caller's candidates: a subset, out of order, with a name the index does not know.
                names = ("n4", "n9", "n1", "n3") if explicit else snap.index.node_names
                got = list(visit_order(snap.index, names, policy, explicit=explicit, in_flight=now, memo=kept, generation=snap.generation, full_last=full_last))
                fresh = list(visit_order(snap.index, names, policy, explicit=explicit, in_flight=now, memo=FlightOrder(), generation=snap.generation, full_last=full_last))
                assert got == fresh, (step, full_last, explicit)
                if policy in NODE_POLICIES:
                    moved, _ = kept.ordered(snap.index, now, snap.generation, policy, full_last)
                    flight_keys = {n: k for k, n in moved}
                    held = now.held_pools()
                    pools_of = {n: pools for n in snap.index.node_names if (pools := tuple(p for p in snap.index.views[n].pools if p in held))}
                    assert set(flight_keys) == set(pools_of) and len(moved) == len(pools_of), step
                    assert all(n in moved for n in pools_of) and "n9" not in moved and not any(n in moved for n in set(snap.index.node_names) - set(pools_of))
                    # Each node's key from its own state, not from another node's kept load.
                    for n, pools in pools_of.items():
                        units = snap.index.free_units(n, now.state(pools))
                        full = snap.index.no_free_device(n, now.devices(pools))
                        assert flight_keys[n] == (int(full_last and full), *node_key(policy, units, n)), (step, n)
                    expected = sorted(names, key=lambda n: flight_keys.get(n) or snap.index.order_key(policy, n, full_last=full_last))
                else:  # first-fit: the caller's order, or name order with full nodes last
                    expected = sorted(names, key=lambda n: snap.index.order_key("", n, full_last=True)) if full_last else list(names)
                assert got == expected, (step, full_last, explicit)
                if explicit:  # a name given twice is visited twice, in its place
                    twice = (*names, "n1")
                    again = list(visit_order(snap.index, twice, policy, explicit=True, in_flight=now, memo=kept, generation=snap.generation, full_last=full_last))
                    assert sorted(again) == sorted(twice) and [n for n in again if n != "n1"] == [n for n in got if n != "n1"]


def _random_reservations(store: ReservationStore, steps: int, seed: int, free: dict[str, int] | None = None) -> Iterator[int]:
    """Reserves and releases single GPUs at random, yielding each step's number after its
    change. ``free``: each node's free GPUs, its last ones (default: n1-n4, all 8)."""
    import random

    from dra_solver.model import DeviceID
    from dra_solver.model.cluster import AllocatedState

    rng = random.Random(seed)
    held: list[tuple[str, str, str]] = []
    counts = free or {n: 8 for n in ("n1", "n2", "n3", "n4")}
    free_of = {n: [f"gpu-{g}" for g in range(8 - count, 8)] for n, count in counts.items()}
    for step in range(steps):
        open_nodes = sorted(n for n, devs in free_of.items() if devs)
        if held and (rng.random() < 0.35 or not open_nodes):
            rid, node, dev = held.pop(rng.randrange(len(held)))
            store.release(rid)
            free_of[node].append(dev)
        else:
            node = rng.choice(open_nodes)
            dev = free_of[node].pop(rng.randrange(len(free_of[node])))
            r = store.reserve(node=node, claims=[(f"ns/c{step}", f"u{step}")], state=AllocatedState(frozenset({DeviceID(DRIVER, node, dev)})),
                              taken=AllocatedState())
            held.append((r.id, node, dev))
        yield step


def test_each_read_of_the_reservations_says_what_changed_since_an_earlier_one() -> None:
    """``HeldNow.changes_since``: an earlier read's fingerprints with the changes since it
    applied are this read's, whether the earlier read is the one just before or several
    before (reads made in between, as a reservation's own check makes them); what FlightOrder
    relies on to re-key only the nodes whose pools changed. Too far back: not known."""
    store = ReservationStore()
    reads = [store.now()]
    for _ in _random_reservations(store, 150, seed=3):
        now = store.now()
        for back in (1, 2, 5, 64):
            if back > len(reads):
                continue
            earlier = reads[-back]
            kept = earlier.fingerprints()
            current, changes = now.changes_since(earlier.version)
            assert current == now.version and changes is not None, back
            for pool, fingerprint in changes.items():
                if fingerprint is None:
                    kept.pop(pool)
                else:
                    kept[pool] = fingerprint
            assert kept == now.fingerprints() and set(now.held_pools()) == set(kept), back
        assert store.now() is now and now.changes_since(now.version) == (now.version, {}), "no change: the same read"
        if len(reads) > 65:
            assert now.changes_since(reads[-66].version) == (now.version, None)
        reads.append(now)


def test_a_visit_order_kept_over_reads_out_of_sequence_equals_a_fresh_one() -> None:
    """Concurrent calls may bring reads older or newer than the last one the order saw: it
    then compares every pool's fingerprint instead of applying a delta."""
    from dra_solver.model import FlightOrder
    from dra_solver.model.schedule import visit_order

    engine = _engine({"n2": 3})
    snap = engine.current()
    store = engine.reservations
    reads = [store.now() for _ in _random_reservations(store, 60, seed=11)]
    kept = FlightOrder()
    for i in [0, 5, 4, 6, 7, 30, 29, 31, 59, 2, 3]:
        names = snap.index.node_names
        got = list(visit_order(snap.index, names, "pack", explicit=False, in_flight=reads[i], memo=kept, generation=snap.generation, full_last=True))
        fresh = list(visit_order(snap.index, names, "pack", explicit=False, in_flight=reads[i], memo=FlightOrder(), generation=snap.generation, full_last=True))
        assert got == fresh, i


def test_a_visit_order_kept_over_reads_it_did_not_see_re_keys_from_the_changes() -> None:
    """Reads the order never saw (a reservation's own check, an expiry, another caller) come
    between the ones it sees: it still applies the changes since the last one it saw instead
    of comparing every pool's fingerprint (which, under steady expiry, took a fifth of a
    streamed Schedule), and orders as a fresh one does."""
    from dra_solver.model import FlightOrder
    from dra_solver.model.schedule import visit_order

    class NoFullComparison:
        def __init__(self, read: Any) -> None:
            self.read = read

        def __getattr__(self, name: str) -> Any:
            return getattr(self.read, name)

        def fingerprints(self) -> dict[Any, bytes]:
            raise AssertionError("compared every pool's fingerprint")

    engine = _engine({"n2": 3})
    snap = engine.current()
    store = engine.reservations
    kept = FlightOrder()
    names = snap.index.node_names
    for step in _random_reservations(store, 90, seed=5):
        read = store.now()
        if step % 3:
            continue  # read by someone else
        # The first read the order sees is compared in full: it knows no version yet.
        seen = read if step == 0 else NoFullComparison(read)
        got = list(visit_order(snap.index, names, "pack", explicit=False, in_flight=seen, memo=kept, generation=snap.generation, full_last=True))
        fresh = list(visit_order(snap.index, names, "pack", explicit=False, in_flight=read, memo=FlightOrder(), generation=snap.generation, full_last=True))
        assert got == fresh, step


def test_nodes_holding_the_same_devices_in_flight_are_told_apart_by_what_is_in_use() -> None:
    """Signatures and loads with devices in flight are kept by the node's state up to names;
    n1 and n2 hold the same GPU in flight, but n2 has three more in use: never one state."""
    from functools import partial

    from dra_solver.model import DeviceID, FlightOrder
    from dra_solver.model.cluster import AllocatedState
    from dra_solver.model.node_state import state_signature

    engine = _engine({"n2": 3})
    snap = engine.current()
    index = snap.index
    store = engine.reservations
    for node in ("n1", "n2", "n3"):
        store.reserve(node=node, claims=[(f"ns/{node}", node)], state=AllocatedState(frozenset({DeviceID(DRIVER, node, "gpu-5")})),
                      taken=AllocatedState())
    now = store.now()
    signatures = {}
    for node in ("n1", "n2", "n3"):
        pools = index.views[node].pools
        signatures[node] = index.state_signature(node, now.pool_keys(pools), partial(now.state, pools))
        fresh = state_signature(index.in_use(node).merge(now.state(pools)), index.node_shape(node).positions())
        assert signatures[node] == fresh, node
    assert signatures["n1"] == signatures["n3"] != signatures["n2"]
    moved, _ = FlightOrder().ordered(index, now, snap.generation, "pack", False)
    keys = {n: k for k, n in moved}
    assert keys["n1"][1:2] == keys["n3"][1:2] != keys["n2"][1:2], keys  # free units: 7, 7 and 4


def test_a_snapshot_in_which_only_claims_changed_is_carried_and_says_so_in_metrics() -> None:
    from dra_solver.model import objects as o
    from dra_solver.model.cluster import AllocatedState

    engine = _engine({"n2": 2})
    source = engine.source
    first = engine.current()
    engine.on_snapshot(first)
    objects: list[o.TypedObject] = [*first.inventory.classes, *first.inventory.slices, *first.inventory.nodes]
    released = [c.model_copy(update={"status": None}) for c in first.inventory.claims]
    second = source.publish_objects([*objects, *released])
    engine.on_snapshot(second)
    assert second.index.carried and second.index.views is first.index.views
    assert second.index.in_use("n2") == AllocatedState()
    relabelled = [n.model_copy(update={"metadata": n.metadata.model_copy(update={"labels": {"zone": "b"}})}) if n.name == "n1" else n for n in first.inventory.nodes]
    third = source.publish_objects([*first.inventory.classes, *first.inventory.slices, *relabelled, *released])
    engine.on_snapshot(third)
    assert not third.index.carried

    def builds(layout: str) -> float:
        value = engine.metrics.registry.get_sample_value("dra_solver_inventory_index_duration_seconds_count", {"layout": layout})
        return value or 0.0

    assert builds("carried") == 1
    assert builds("laid_out") == 2
