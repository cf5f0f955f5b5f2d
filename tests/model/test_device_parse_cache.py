"""``DeviceParseCache``: pools gathered with the cache are the pools gathered without it, each
device is parsed once across calls, and an entry is never used for another object."""

from __future__ import annotations

from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.cpsat.problem import _candidates
from dra_solver.model.decode import decode_all
from dra_solver.model.features import FeatureGates
from dra_solver.model.pools import DeviceParseCache, Pool, gather_pools
from dra_solver.service.bench import device_class, gpu_node, mig_node

GATES = FeatureGates()


def _cluster() -> tuple[list[o.ResourceSlice], dict[str, o.Node]]:
    docs: list[dict[str, Any]] = [device_class(), *gpu_node("g1"), *mig_node("m1")]
    objects = decode_all(docs)
    slices = [s for s in objects if isinstance(s, o.ResourceSlice)]
    nodes = {n.name: n for n in objects if isinstance(n, o.Node)}
    return slices, nodes


def _view(pools: list[Pool]) -> list[tuple[Any, ...]]:
    return [
        (p.driver, p.name, sorted(p.counter_sets), tuple(
            (d.id, tuple(sorted((n, c.value) for n, c in d.capacity.items())),
             tuple((c.counter_set, tuple(sorted(c.counters.items()))) for c in d.counters),
             d.cel.key() if d.cel else None, d.cel_error)
            for d in (*p.devices, *p.other_devices)
        ))
        for p in pools
    ]


def test_cached_pools_equal_uncached_ones() -> None:
    slices, nodes = _cluster()
    cache = DeviceParseCache()
    for name in ("g1", "m1"):
        plain = gather_pools(slices, nodes[name], gates=GATES)
        cached = gather_pools(slices, nodes[name], gates=GATES, parsed=cache)
        again = gather_pools(slices, nodes[name], gates=GATES, parsed=cache)
        assert _view(plain) == _view(cached) == _view(again)
    devices = sum(len(s.spec.devices or []) for s in slices)
    assert len(cache) == devices  # parsed once each, whatever the number of calls


def test_an_entry_is_only_used_for_its_own_object() -> None:
    (first,) = [d for s in _cluster()[0] for d in s.spec.devices or []][:1]
    cache = DeviceParseCache()
    parsed = cache.parsed("gpu.example.com", first)
    copy = first.model_copy(deep=True)
    copy.capacity = {"memory": o.DeviceCapacity(value="1Gi")}
    other = cache.parsed("gpu.example.com", copy)
    assert other is not parsed
    assert str(other.capacity["memory"].value) == "1Gi"
    assert cache.parsed("gpu.example.com", first) is parsed


def test_a_full_cache_starts_over() -> None:
    devices = [d for s in _cluster()[0] for d in s.spec.devices or []]
    cache = DeviceParseCache(max_entries=3)
    for d in devices[:5]:
        cache.parsed("gpu.example.com", d)
    assert 1 <= len(cache) <= 3
    last = cache.parsed("gpu.example.com", devices[4])
    assert cache.parsed("gpu.example.com", devices[4]) is last


def test_pools_are_gathered_once_per_identity_of_their_inputs() -> None:
    slices, nodes = _cluster()
    frozen = tuple(slices)
    cache = DeviceParseCache()
    first = gather_pools(frozen, nodes["m1"], gates=GATES, parsed=cache)
    again = gather_pools(frozen, nodes["m1"], gates=GATES, parsed=cache)
    assert all(a is b for a, b in zip(first, again, strict=True))  # one gathering
    # Other gates, another node, other slices (a new snapshot): gathered afresh, never stale.
    off = FeatureGates.parse("DRAPartitionableDevices=false")
    assert _view(gather_pools(frozen, nodes["m1"], gates=off, parsed=cache)) == _view(gather_pools(slices, nodes["m1"], gates=off))
    assert _view(gather_pools(frozen, nodes["g1"], gates=GATES, parsed=cache)) == _view(gather_pools(slices, nodes["g1"], gates=GATES))
    changed = [s.model_copy(deep=True) for s in slices]
    for s in changed:
        for d in s.spec.devices or []:
            d.capacity = {"memory": o.DeviceCapacity(value="1Gi")}
    fresh = gather_pools(tuple(changed), nodes["m1"], gates=GATES, parsed=cache)
    assert _view(fresh) == _view(gather_pools(changed, nodes["m1"], gates=GATES)) != _view(first)


def _problem_candidates(pools: list[Pool], cache: DeviceParseCache, *, consumable: bool = False) -> list[tuple[int, Any, str, bool]]:
    candidates, by_id = _candidates(pools, consumable, cache)
    assert by_id == {c.id: c for c in candidates}
    return [(c.index, c.id, c.pool.name, c.multi) for c in candidates]


def test_candidates_are_kept_by_the_identity_of_their_pools() -> None:
    slices, nodes = _cluster()
    frozen = tuple(slices)
    cache = DeviceParseCache()
    mig = gather_pools(frozen, nodes["m1"], gates=GATES, parsed=cache)
    gpu = gather_pools(frozen, nodes["g1"], gates=GATES, parsed=cache)
    first, _ = _candidates(mig, False, cache)
    again, _ = _candidates(gather_pools(frozen, nodes["m1"], gates=GATES, parsed=cache), False, cache)
    assert all(a is b for a, b in zip(first, again, strict=True))  # built once
    # Each node's own candidates, whatever was kept for the other one.
    assert _problem_candidates(gpu, cache) == _problem_candidates(gpu, DeviceParseCache())
    assert [c[1].pool for c in _problem_candidates(gpu, cache)] == ["g1"] * 8
    assert _problem_candidates(mig, cache) == _problem_candidates(mig, DeviceParseCache())
    # Pools gathered afresh (a new snapshot, other gates) are other objects: built again.
    fresh = gather_pools(slices, nodes["m1"], gates=GATES)
    rebuilt, _ = _candidates(fresh, False, cache)
    assert all(c.pool is p for c, p in zip(rebuilt, [p for p in fresh for _ in p.devices], strict=True))


def test_kept_candidates_follow_the_consumable_capacity_gate() -> None:
    slices, nodes = _cluster()
    node = nodes["g1"]
    # A device that may be allocated more than once: shared only with the gate on.
    shared = [s.model_copy(deep=True) for s in slices if s.spec.node_name == "g1" and s.spec.devices]
    for d in shared[0].spec.devices or []:
        d.allow_multiple_allocations = True
    pools = gather_pools(tuple(shared), node, gates=GATES)
    cache = DeviceParseCache()
    assert {c[3] for c in _problem_candidates(pools, cache, consumable=True)} == {True}
    assert {c[3] for c in _problem_candidates(pools, cache, consumable=False)} == {False}
    assert {c[3] for c in _problem_candidates(pools, cache, consumable=True)} == {True}


def test_a_kept_candidate_list_is_never_used_for_other_pools() -> None:
    """An entry whose pool identities were reused by other objects is not handed out."""
    slices, nodes = _cluster()
    cache = DeviceParseCache()
    mig = gather_pools(tuple(slices), nodes["m1"], gates=GATES)
    gpu = gather_pools(tuple(slices), nodes["g1"], gates=GATES)
    stale, stale_ids = _candidates(gpu, False, DeviceParseCache())
    # As if ``mig``'s pools had been freed and their ids reused: an entry for other pools.
    cache.candidate_lists[(False, *map(id, mig))] = (tuple(gpu), tuple(stale), stale_ids)
    assert _problem_candidates(mig, cache) == _problem_candidates(mig, DeviceParseCache())
