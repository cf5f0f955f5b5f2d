"""Schedule reuses allocations by node state up to names (issue 16): the chosen node's answer is
rewritten from an earlier solve of a node in the same state instead of solved again. Reused
answers equal solved ones, and a reservation or an inventory change never brings back an answer
for a state the node is no longer in."""

from __future__ import annotations

import json
from typing import Any

from dra_solver.model import AllocatedState, DeviceID, SolveStats, state_key
from dra_solver.service import engine as e
from dra_solver.service import messages
from dra_solver.service.inventory import StaticSource, decode_documents
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from tests import builders as b

A100 = f'device.attributes["{b.DRIVER}"].model == "a100"'


def _cluster(nodes: int, *, h100: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """``nodes`` nodes of 4 a100 GPUs; ``h100`` = (node, device) turns that GPU into an h100."""
    docs: list[dict[str, Any]] = [b.device_class()]
    for i in range(nodes):
        name = f"node-{i}"
        docs.append(b.node(name))
        sl = b.gpu_slice(name, count=4)
        for d in sl["spec"]["devices"]:
            if h100 == (name, d["name"]):
                d["attributes"]["model"] = {"string": "h100"}
        docs.append(sl)
    return docs


def _engine(docs: list[dict[str, Any]], **limits: Any) -> e.Engine:
    engine = e.Engine(
        source=StaticSource(decode_documents(docs)), reservations=ReservationStore(), metrics=Metrics(), limits=e.Limits(**limits)
    )
    engine.source.start()
    return engine


def _claim(i: int) -> bytes:
    claim = b.claim(f"pod-{i}", ns="test", uid=f"uid-{i}", cls=b.CLASS).request("gpu", selectors=[b.selector(A100)]).obj()
    return json.dumps(claim).encode()


def _placed(answer: e.ScheduleAnswer) -> tuple[str, list[str]]:
    devices = [r.device for c in answer.claims if c.result and c.result.devices for r in c.result.devices.results or []]
    pools = {r.pool for c in answer.claims if c.result and c.result.devices for r in c.result.devices.results or []}
    assert pools == {answer.node}  # rewritten with the chosen node's names
    return answer.node, devices


def test_reused_answers_are_the_answers_a_solve_gives() -> None:
    docs = _cluster(4)
    cached, uncached = _engine(docs), _engine(docs, answer_entries=0)
    placed: list[tuple[str, list[str]]] = []
    solves = {"cached": 0, "uncached": 0}
    for i in range(14):
        one = cached.schedule([_claim(i)], reserve=True, ttl=600)
        other = uncached.schedule([_claim(i)], reserve=True, ttl=600)
        assert _placed(one) == _placed(other)
        placed.append(_placed(one))
        solves["cached"] += one.stats.solves
        solves["uncached"] += other.stats.solves
    taken = [(node, d) for node, devices in placed for d in devices]
    assert len(taken) == len(set(taken)) == 14  # never a device twice
    # Uncached: one solve per pod at least (the chosen node). Cached: only states not seen before.
    assert solves["uncached"] >= 14
    assert solves["cached"] <= 5, solves


def test_a_reservation_changes_the_state_an_answer_is_reused_for() -> None:
    engine = _engine(_cluster(2))
    first = engine.schedule([_claim(0)], nodes=["node-0"], reserve=True, ttl=600)
    assert _placed(first) == ("node-0", ["gpu-0"]) and first.stats.solves == 1
    # node-1 is in the state node-0 was in: the answer is node-0's, renamed, without a solve.
    second = engine.schedule([_claim(1)], nodes=["node-1"], reserve=True, ttl=600)
    assert _placed(second) == ("node-1", ["gpu-0"]) and second.stats.solves == 0
    # Said on the answer: its solver figures are node-0's solve, not one this call made.
    assert first.solve_stats is not None and not first.solve_stats.reused
    assert second.solve_stats is not None and second.solve_stats.reused
    assert second.solve_stats.wall_seconds == first.solve_stats.wall_seconds
    # node-0 now holds a reservation: not the state of the first answer (gpu-0 again would be
    # withheld by the validator).
    third = engine.schedule([_claim(2)], nodes=["node-0"], reserve=True, ttl=600)
    assert _placed(third) == ("node-0", ["gpu-1"])
    # Released: node-0 is empty again, and the empty state's answer applies once more.
    engine.unreserve("", [f"test/pod-{i}" for i in (0, 2)])
    fourth = engine.schedule([_claim(3)], nodes=["node-0"], reserve=True, ttl=600)
    assert _placed(fourth) == ("node-0", ["gpu-0"]) and fourth.stats.solves == 0


def test_an_inventory_change_is_a_different_state() -> None:
    source = StaticSource(decode_documents(_cluster(2)))
    engine = e.Engine(source=source, reservations=ReservationStore(), metrics=Metrics())
    source.start()
    assert _placed(engine.schedule([_claim(0)], nodes=["node-0"])) == ("node-0", ["gpu-0"])
    # gpu-0 of node-1 becomes an h100, which the selector rejects: a new shape, solved afresh.
    source.publish_objects(decode_documents(_cluster(2, h100=("node-1", "gpu-0"))))
    answer = engine.schedule([_claim(1)], nodes=["node-1"])
    assert _placed(answer) == ("node-1", ["gpu-1"]) and answer.stats.solves == 1


def test_one_read_of_the_reservations_answers_as_the_store_did() -> None:
    store = ReservationStore()
    gpu = [DeviceID(b.DRIVER, "node-0", f"gpu-{g}") for g in range(2)]
    pools = [(b.DRIVER, "node-0"), (b.DRIVER, "node-1")]
    store.reserve(node="node-0", claims=[("test/a", "ua")], state=AllocatedState(devices=frozenset(gpu[:1])), taken=AllocatedState())
    read = store.now()
    assert read.version == store.version
    assert (read.held_pools(), read.devices(pools), read.pool_keys(pools), read.state(pools)) == (
        store.held_pools(), store.devices(pools), store.pool_keys(pools), store.state(pools),
    )
    # A later reservation changes the store, not the read (a call visits one state); the
    # version tells a reservation made from the read to check again.
    store.reserve(node="node-0", claims=[("test/b", "ub")], state=AllocatedState(devices=frozenset(gpu[1:])), taken=AllocatedState())
    assert read.devices(pools) == frozenset(gpu[:1]) and store.devices(pools) == frozenset(gpu)
    assert read.pool_keys(pools) != store.pool_keys(pools) and read.version != store.version


def test_each_read_of_the_reservations_shows_every_change_since_the_last() -> None:
    """``now()`` re-reads only the pools changed since the previous read: after reservations
    in held and new pools, releases and expiry, every read answers as the store does, and an
    earlier read keeps what it showed."""
    clock = [0.0]
    store = ReservationStore(clock=lambda: clock[0], default_ttl=100.0, max_ttl=1000.0)
    pools = [(b.DRIVER, f"node-{n}") for n in range(3)]

    def dev(n: int, g: int) -> DeviceID:
        return DeviceID(b.DRIVER, f"node-{n}", f"gpu-{g}")

    def agrees(read: Any) -> None:
        assert read.version == store.version
        assert (read.held_pools(), read.devices(pools), read.pool_keys(pools), read.state(pools)) == (
            store.held_pools(), store.devices(pools), store.pool_keys(pools), store.state(pools),
        )
        for p in pools:
            assert (read.devices([p]), read.pool_keys([p])) == (store.devices([p]), store.pool_keys([p]))

    def hold(name: str, *devices: DeviceID, ttl: float = 0.0) -> str:
        state = AllocatedState(devices=frozenset(devices))
        return store.reserve(node=devices[0].pool, claims=[(f"test/{name}", name)], state=state, taken=AllocatedState(), ttl=ttl).id

    agrees(store.now())
    hold("a", dev(0, 0))
    first = store.now()
    agrees(first)
    assert store.now() is first  # nothing changed: the same read
    hold("b", dev(0, 1))  # a pool already held
    agrees(store.now())
    assert first.devices(pools[:1]) == {dev(0, 0)}  # the earlier read is unchanged
    c = hold("c", dev(1, 0))  # a new pool
    hold("d", dev(2, 0), ttl=10.0)
    agrees(store.now())
    hold("e", dev(1, 1))
    store.release(c)  # node-1 keeps e
    agrees(store.now())
    clock[0] = 50.0  # d expires: node-2 holds nothing any more
    agrees(store.now())
    assert set(store.now().held_pools()) == set(pools[:2])
    f = hold("f", dev(0, 2))
    agrees(store.now())
    store.release(f)  # node-0 keeps a and b
    agrees(store.now())


def test_a_pool_filled_one_reservation_at_a_time_reads_as_if_rebuilt() -> None:
    """A reservation in a held pool is merged into the pool's kept state: the state and its
    fingerprint are those of all the pool's reservations read afresh (more than ten, so ids
    sort otherwise as text; one without a node, as a gang's; another node's on a shared pool)."""
    store = ReservationStore()
    pool = (b.DRIVER, "node-0")
    shared = (b.DRIVER, "node-1-rack")

    def expected(p: tuple[str, str]) -> tuple[AllocatedState, bytes]:
        held = sorted((r for r in store.all() if p in r.pools()), key=lambda r: r.id)
        state = AllocatedState(devices=frozenset(d for r in held for d in r.state.devices if (d.driver, d.pool) == p))
        node = next((r.node for r in held if r.node), "")
        return state, state_key(state, node)

    for g in range(14):
        dev = DeviceID(b.DRIVER, "node-0", f"gpu-{g}")
        store.reserve(node="node-0" if g != 5 else "", claims=[(f"test/c{g}", f"u{g}")], state=AllocatedState(devices=frozenset({dev})), taken=AllocatedState())
        if g % 4 == 0:
            assert store.now().state([pool]) == expected(pool)[0]
        assert (store.state([pool]), store.pool_keys([pool])) == (expected(pool)[0], (expected(pool)[1],))
    for n, node in enumerate(("", "node-1", "node-2")):  # a shared pool reserved from several nodes
        dev = DeviceID(b.DRIVER, "node-1-rack", f"nic-{n}")
        store.reserve(node=node, claims=[(f"test/n{n}", f"v{n}")], state=AllocatedState(devices=frozenset({dev})), taken=AllocatedState())
        assert (store.state([shared]), store.pool_keys([shared])) == (expected(shared)[0], (expected(shared)[1],))
    read = store.now()
    assert (read.state([pool]), read.pool_keys([pool, shared])) == (expected(pool)[0], (expected(pool)[1], expected(shared)[1]))


def test_a_reused_answer_says_so_on_the_wire() -> None:
    assert messages.stats(SolveStats("cpsat", "OPTIMAL", 0.002, reused=True)).reused
    assert not messages.stats(SolveStats("cpsat", "OPTIMAL", 0.002)).reused


def test_an_answer_is_not_reused_when_a_reservation_lands_during_the_call() -> None:
    """Another caller's reservation between the visit and the chosen node's request: the state
    the answer was keyed on may be gone, so the node is solved (a race; the hook makes it
    happen at that point every time)."""
    engine = _engine(_cluster(3))
    engine.schedule([_claim(0)], nodes=["node-0"], reserve=True, ttl=600)
    request_for = engine._node_request
    landed: list[e.ScheduleAnswer] = []
    raced_once: list[bool] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not raced_once:
            raced_once.append(True)
            landed.append(engine.schedule([_claim(9)], nodes=["node-2"], reserve=True, ttl=600))
        return request_for(*args, **kwargs)

    engine._node_request = racing  # type: ignore[method-assign]
    raced = engine.schedule([_claim(1)], nodes=["node-1"], reserve=True, ttl=600)
    assert landed and _placed(landed[0]) == ("node-2", ["gpu-0"])
    assert _placed(raced) == ("node-1", ["gpu-0"])
    assert raced.solve_stats is not None and not raced.solve_stats.reused
    # Without the race the same call is answered from node-0's solve.
    engine._node_request = request_for  # type: ignore[method-assign]
    engine.unreserve("", ["test/pod-1"])
    calm = engine.schedule([_claim(1)], nodes=["node-1"], reserve=True, ttl=600)
    assert _placed(calm) == ("node-1", ["gpu-0"]) and calm.solve_stats is not None and calm.solve_stats.reused
