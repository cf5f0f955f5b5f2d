"""The single-device path (model.cpsat.single) returns the CP-SAT model's answer: on MIG-like
nodes (partitions sharing counters, some in use, counters sometimes over-committed), for one-
device claims with and without selectors and FirstAvailable, under every policy it serves."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.model import AllocatedState, AllocationRequest, DeviceID, Inventory, allocate_cpsat
from dra_solver.model import objects as o
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.decode import decode_all
from dra_solver.model.pools import DeviceParseCache

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import generate

CEL = CelEnvironment()
DRIVER = generate.DRIVER


def _node(order: str, seed: int) -> tuple[list[o.TypedObject], list[DeviceID]]:
    objects = decode_all(generate.mig_cluster(order, nodes=1, seed=seed))
    devices = [DeviceID(s.spec.driver, s.spec.pool.name, d.name) for s in objects if isinstance(s, o.ResourceSlice) for d in s.spec.devices or []]
    return objects, devices


def _memory(gib: int) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{gib}Gi')) >= 0"}}] if gib else []


def _claim(kind: str, gibs: list[int]) -> o.ResourceClaim:
    if kind == "exactly":
        request: dict[str, Any] = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 1, "selectors": _memory(gibs[0])}}
    else:
        subs = [{"name": f"s{i}", "deviceClassName": DRIVER, "count": 1, "selectors": _memory(g)} for i, g in enumerate(gibs)]
        request = {"name": "gpu", "firstAvailable": subs}
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
           "spec": {"devices": {"requests": [request]}}}
    built = decode_all([doc])[0]
    assert isinstance(built, o.ResourceClaim)
    return built


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.sampled_from(["whole-first", "partitions-first", "shuffled"]),
    seed=st.integers(0, 3),
    busy=st.integers(0, 1 << 30),
    share=st.sampled_from([0.0, 0.2, 0.5, 0.9]),
    kind=st.sampled_from(["exactly", "firstAvailable"]),
    gibs=st.lists(st.sampled_from([0, 10, 20, 40, 80]), min_size=1, max_size=3),
    policy=st.sampled_from(["pack", "spread", "first-fit"]),
)
def test_single_device_answers_equal_the_model(order: str, seed: int, busy: int, share: float, kind: str, gibs: list[int], policy: str) -> None:
    objects, devices = _node(order, seed)
    rng = random.Random(busy)
    # Any subset in use, overlapping partitions included (counters may be over-committed).
    in_use = AllocatedState(devices=frozenset(d for d in devices if rng.random() < share))
    inventory = Inventory.from_objects(objects)
    request = AllocationRequest(
        claims=(_claim(kind, gibs),),
        node=inventory.nodes[0],
        inventory=Inventory(inventory.classes, inventory.slices, (), inventory.nodes, extra_allocated=in_use),
        policy=policy,
    )
    fast = allocate_cpsat(request, cel=CEL)
    model = allocate_cpsat(request, cel=CEL, fast_path=False)
    # With the service's cache (pools, selector verdicts, device sizes kept across calls): the
    # same answer on the first call and on the second, which reads what the first kept.
    kept = replace(request, device_cache=DeviceParseCache())
    for _ in range(2):
        again = allocate_cpsat(kept, cel=CEL)
        assert (again.allocated, again.score, again.reason) == (fast.allocated, fast.score, fast.reason)
        assert [r.to_api() for r in again.results] == [r.to_api() for r in fast.results]
    assert (fast.allocated, fast.score, fast.reason) == (model.allocated, model.score, model.reason)
    assert [r.to_api() for r in fast.results] == [r.to_api() for r in model.results]
    if fast.allocated:
        assert fast.stats.variables == 0  # answered without a model: the path was taken
    elif model.stats.variables:  # the model had candidates and proved none fits: so did the path
        assert (fast.stats.status, fast.stats.variables) == ("INFEASIBLE", 0)


def _counted_node(total: str, amounts: list[str], busy: list[int]) -> AllocationRequest:
    """One node, one counter set of ``total``, one device per amount drawing on it; the devices
    at ``busy`` positions in use."""
    devices = [{"name": f"d{i}", "consumesCounters": [{"counterSet": "set", "counters": {"c": {"value": a}}}]} for i, a in enumerate(amounts)]
    docs: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "counters"}, "spec": {
            "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "set", "counters": {"c": {"value": total}}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "devices"}, "spec": {
            "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2}, "devices": devices}},
    ]
    inventory = Inventory.from_objects(decode_all(docs))
    in_use = AllocatedState(devices=frozenset(DeviceID(DRIVER, "n1", f"d{i}") for i in busy))
    return AllocationRequest(
        claims=(_claim("exactly", [0]),), node=inventory.nodes[0],
        inventory=Inventory(inventory.classes, inventory.slices, (), inventory.nodes, extra_allocated=in_use),
    )


def test_fractional_and_huge_counter_amounts_follow_the_model() -> None:
    """Counters checked device by device only when every number is an integer the model keeps
    unscaled; fractions and amounts beyond its coefficient limit follow its scaling."""
    cases = [
        ("1500m", ["1", "500m", "1"], [0], "d1"),  # 0.5 left: only the 500m device fits
        ("1500m", ["1", "1", "500m"], [2], None),  # 1 left: d0 (the first) fits
        ("4Ti", ["3Ti", "2Ti", "1Ti"], [1], None),  # beyond 2**40: the model's scaling
        ("4Ti", ["3Ti", "2Ti", "3Ti"], [0], None),
    ]
    for total, amounts, busy, expected in cases:
        request = _counted_node(total, amounts, busy)
        for kept in (request, replace(request, device_cache=DeviceParseCache())):
            fast = allocate_cpsat(kept, cel=CEL)
            model = allocate_cpsat(kept, cel=CEL, fast_path=False)
            assert (fast.allocated, fast.reason) == (model.allocated, model.reason)
            assert [r.to_api() for r in fast.results] == [r.to_api() for r in model.results]
            if expected is not None:
                assert fast.results[0].devices is not None and fast.results[0].devices.results[0].device == expected  # type: ignore[index]
