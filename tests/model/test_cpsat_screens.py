"""Screened candidates (``model.cpsat.problem._screened``): a node's candidates for a request,
checked once for what reads nothing in use and kept in the device cache, give every option the
candidates and the errors the full check gives, in every in-use state that follows."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.model import AllocatedState, AllocationRequest, DeviceID, Inventory
from dra_solver.model import objects as o
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.cpsat.problem import CandidatesById, Problem, prepare_problem
from dra_solver.model.decode import decode_all
from dra_solver.model.pools import DeviceParseCache

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import generate

CEL = CelEnvironment()
DRIVER = generate.DRIVER
SELECTORS = {
    "none": [],
    "20Gi": [f"device.capacity['{DRIVER}'].memory.compareTo(quantity('20Gi')) >= 0"],
    "small": [f"device.attributes['{DRIVER}'].profile in ['1g.10gb', '2g.20gb']"],
    # Division by zero on GPU 1's devices: a CEL runtime error for those, a verdict for the rest.
    "errors": [f"device.attributes['{DRIVER}'].gpu / (device.attributes['{DRIVER}'].gpu - 1) >= 0"],
    "two": [f"device.capacity['{DRIVER}'].memory.compareTo(quantity('10Gi')) >= 0", f"device.attributes['{DRIVER}'].gpu != 2"],
}


def _claim(options: list[str], tolerate: bool) -> o.ResourceClaim:
    def request(name: str, selectors: str) -> dict[str, Any]:
        out: dict[str, Any] = {"deviceClassName": DRIVER, "count": 1, "selectors": [{"cel": {"expression": e}} for e in SELECTORS[selectors]]}
        if tolerate:
            out["tolerations"] = [{"key": "example.com/broken", "operator": "Exists"}]
        return {"name": name, **out}

    if len(options) == 1:
        req: dict[str, Any] = {"name": "gpu", "exactly": {k: v for k, v in request("gpu", options[0]).items() if k != "name"}}
    else:
        req = {"name": "gpu", "firstAvailable": [request(f"s{i}", s) for i, s in enumerate(options)]}
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
           "spec": {"devices": {"requests": [req]}}}
    built = decode_all([doc])[0]
    assert isinstance(built, o.ResourceClaim)
    return built


def _options(problem: Problem) -> list[Any]:
    return [[[(opt.view.ref, [c.id for c in opt.candidates], opt.possible) for opt in req] for req in claim] for claim in problem.options]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.sampled_from(["whole-first", "partitions-first", "shuffled"]),
    seed=st.integers(0, 3),
    options=st.lists(st.sampled_from(sorted(SELECTORS)), min_size=1, max_size=3),
    tolerate=st.booleans(),
    states=st.lists(st.tuples(st.integers(0, 1 << 30), st.sampled_from([0.0, 0.3, 0.7, 1.0])), min_size=2, max_size=4),
)
def test_screened_options_equal_the_full_check(order: str, seed: int, options: list[str], tolerate: bool, states: list[tuple[int, float]]) -> None:
    objects = decode_all(generate.mig_cluster(order, nodes=1, seed=seed))
    devices = [DeviceID(s.spec.driver, s.spec.pool.name, d.name) for s in objects if isinstance(s, o.ResourceSlice) for d in s.spec.devices or []]
    inventory = Inventory.from_objects(objects)
    claim = _claim(options, tolerate)
    cache = DeviceParseCache()
    for busy, share in states:
        rng = random.Random(busy)
        in_use = AllocatedState(devices=frozenset(d for d in devices if rng.random() < share))
        request = AllocationRequest(
            claims=(claim,), node=inventory.nodes[0],
            inventory=Inventory(inventory.classes, inventory.slices, (), inventory.nodes, extra_allocated=in_use),
        )
        full = prepare_problem(request, cel=CEL)
        kept = prepare_problem(replace(request, device_cache=cache), cel=CEL)
        assert _options(kept) == _options(full)
        assert [str(e) for e in kept.deferred_errors] == [str(e) for e in full.deferred_errors]
    # Requests without tolerations were screened once per node and selectors, then reused.
    assert any(_screens(cache)) == (not tolerate)


def _screens(cache: DeviceParseCache) -> list[dict[int, Any]]:
    return [entry[2].screens for entry in cache.candidate_lists.values() if isinstance(entry[2], CandidatesById)]


def test_screens_live_and_go_with_their_candidate_list() -> None:
    """Screens are kept with the node's kept candidate list: the same list reuses them, new
    pools (a new snapshot) start without any, and a caller without a cache never screens."""
    objects = decode_all(generate.mig_cluster("whole-first", nodes=1, seed=0))
    inventory = Inventory.from_objects(objects)
    request = AllocationRequest(claims=(_claim(["20Gi"], False),), node=inventory.nodes[0], inventory=inventory)
    cache = DeviceParseCache()
    first = prepare_problem(replace(request, device_cache=cache), cel=CEL)
    (screens,) = _screens(cache)
    ((number, (order, live)),) = screens.items()
    assert len(order) == len(_options(first)[0][0][0][1]) > 1 and not live
    screens[number] = (order[:1], live)  # reused as kept: the next problem reads this one
    assert len(_options(prepare_problem(replace(request, device_cache=cache), cel=CEL))[0][0][0][1]) == 1
    # The same objects read afresh are other pools: another candidate list, screened anew.
    fresh = Inventory.from_objects(decode_all(generate.mig_cluster("whole-first", nodes=1, seed=0)))
    again = prepare_problem(replace(request, node=fresh.nodes[0], inventory=fresh, device_cache=cache), cel=CEL)
    assert _options(again) == _options(first) == _options(prepare_problem(request, cel=CEL))
    assert len(_screens(cache)) == 2
    assert prepare_problem(request, cel=CEL).options  # no cache: the full check, nothing kept
