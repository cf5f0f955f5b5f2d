"""Blast radius (issue 15): a bad object in the inventory costs its pool, not the cluster.

As upstream's allocator treats invalid pools: their devices are never allocated; a node that
reaches one and fits nothing else answers "invalid resource pools were encountered"; every
other node keeps scheduling. The problem is logged, counted in /metrics and listed by
GetInventory. Real FileSource, real gRPC, the real core.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.inventory import FileSource, KubeSource, screen_objects
from tests import builders as b
from tests.realkube import KubeCluster
from tests.service.conftest import Running

NODES = [f"n{i}" for i in range(6)]
POISONED = "n2"
DRIVER = "gpu.example.com"


def _pool(node: str, *, counter: str = "80Gi", device_name: str = "gpu-0") -> list[dict[str, Any]]:
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-counters"},
         "spec": {"driver": DRIVER, "nodeName": node, "pool": pool,
                  "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": counter}}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
         "spec": {"driver": DRIVER, "nodeName": node, "pool": pool,
                  "devices": [{"name": name, "consumesCounters": [{"counterSet": "mem", "counters": {"memory": {"value": "40Gi"}}}]}
                              for name in (device_name, "gpu-1")]}},
    ]


def _inventory(path: Path, *, poison: dict[str, Any]) -> Path:
    docs: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}},
    ]
    for node in NODES:
        docs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        docs.extend(_pool(node, **(poison if node == POISONED else {})))
    path.write_text(yaml.safe_dump_all(docs))
    return path


TWO_GPUS = b.claim("c", ns="t", cls="gpu").request("gpu", count=2)


POISONS = {
    "counter value that is no quantity": {"counter": "7\n"},
    "device name that fails validation": {"device_name": "GPU_0"},
}


@pytest.mark.parametrize("poison", POISONS.values(), ids=list(POISONS))
def test_a_poisoned_slice_costs_only_its_pool(tmp_path: Path, fresh: Callable[..., Running], poison: dict[str, Any]) -> None:
    source = FileSource(str(_inventory(tmp_path / "inv.yaml", poison=poison)))
    r = fresh(source)

    for node in NODES:
        if node == POISONED:
            continue
        answer = r.client.schedule([TWO_GPUS.named(f"c-{node}").obj()], [node])
        assert answer.node == node, (node, answer.reason)
    # The whole cluster: answers, never on the poisoned node.
    everywhere = r.client.schedule([TWO_GPUS.named("c-all").obj()], feasible_nodes_wanted=len(NODES))
    assert everywhere.node and everywhere.node != POISONED
    verdicts = {v.node: v for v in everywhere.nodes}
    assert verdicts[POISONED].verdict == pb.VERDICT_UNSCHEDULABLE
    assert verdicts[POISONED].reason.startswith("invalid resource pools were encountered")
    assert sum(v.verdict == pb.VERDICT_FEASIBLE for v in everywhere.nodes) == len(NODES) - 1

    alone = r.client.schedule([TWO_GPUS.named("c-alone").obj()], [POISONED])
    assert not alone.node and "invalid resource pools were encountered" in alone.nodes[0].reason
    with pytest.raises(grpc.RpcError) as info:
        r.client.allocate([TWO_GPUS.named("c-one").obj()], POISONED)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "invalid resource pools were encountered" in (info.value.details() or "")

    inv = r.client.inventory()
    assert [(p.driver, p.pool) for p in inv.invalid_pools] == [(DRIVER, POISONED)]
    assert inv.problem_count == 1 and inv.problems[0].kind == "ResourceSlice"
    assert inv.problems[0].invalid_pool == f"{DRIVER}/{POISONED}" and str(tmp_path / "inv.yaml") == inv.problems[0].source
    metrics = urllib.request.urlopen(r.metrics_url, timeout=10).read().decode()
    assert "dra_solver_inventory_invalid_pools 1.0" in metrics
    assert 'dra_solver_inventory_problems{kind="ResourceSlice"} 1.0' in metrics


def test_a_poisoned_slice_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _inventory(tmp_path / "inv.yaml", poison=POISONS["counter value that is no quantity"])
    source = FileSource(str(tmp_path))
    with caplog.at_level("WARNING", logger="dra_solver.service.inventory"):
        source.load()
        (tmp_path / "node.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n9"}}))
        assert source.check()
    lines = [rec.getMessage() for rec in caplog.records if "n2-counters" in rec.getMessage()]
    assert len(lines) == 1 and "pool gpu.example.com/n2 is invalid" in lines[0]


def test_only_broken_inventories_fail_to_load(tmp_path: Path) -> None:
    from dra_solver.model.errors import InvalidInput

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump_all(_pool("n0", counter="lots")))
    with pytest.raises(InvalidInput):
        FileSource(str(tmp_path)).load()


def test_kube_objects_that_do_not_decode_invalidate_their_pool(kube_cluster: KubeCluster) -> None:
    """The API server validates what it stores, so a bad object only reaches the service from
    a server newer than our decoder (or a version skew): delivered here as the informer would."""
    from dra_solver.service.kubeapi.client import api_client

    kube_cluster.create("/apis/resource.k8s.io/v1/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
    for node in ("n0", "n1"):
        kube_cluster.node(node)
    for doc in _pool("n0"):
        kube_cluster.create("/apis/resource.k8s.io/v1/resourceslices", doc)
    src = KubeSource(api_client(kubeconfig=kube_cluster.kubeconfig, user_agent="dra-solver-test"), debounce=0.01, retry_delay=0.1)
    src.start()
    try:
        assert src.wait_ready(30)
        _until(lambda: len(src.snapshot().inventory.slices) == 2)
        for doc in _pool("n1", counter="7\n"):
            src._changed("ResourceSlice", None, {**doc, "metadata": {**doc["metadata"], "resourceVersion": "1"}})
        _until(lambda: bool(src.snapshot().invalid_pools))
        snap = src.snapshot()
        assert dict(snap.invalid_pools).keys() == {(DRIVER, "n1")}
        assert {s.name for s in snap.inventory.slices} == {"n0-counters", "n0-gpus"}
        assert snap.index.invalid_pools_of("n1") == ((DRIVER, "n1"),) and snap.index.invalid_pools_of("n0") == ()
        assert [p.name for p in snap.problems] == ["n1-counters"]
        # Deleting the bad object forgets the problem.
        src._changed("ResourceSlice", _pool("n1", counter="7\n")[0], None)
        _until(lambda: not src.snapshot().invalid_pools)
    finally:
        src.stop()


def _until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "not reached"
        time.sleep(0.02)


def test_screening_keeps_claims_that_fail_validation() -> None:
    claim = decode_object(b.claim("Bad_Name", ns="t", cls="gpu").request("gpu", count=None).obj())
    screened = screen_objects([claim], validate=True)
    assert screened.inventory.claims == (claim,), "its allocation (if any) still holds devices"
    assert screened.problem_count == 1 and not screened.invalid_pools


def test_a_problem_names_each_field_once() -> None:
    from dra_solver.model.errors import InvalidInput, StrictDecodingError
    from dra_solver.service.inventory import problem_of

    doc = {"kind": "ResourceSlice", "metadata": {"name": "s"}}
    strict = problem_of(StrictDecodingError("ResourceSlice s", [(("spec", "devices", 0, "x"), "unknown field")]), doc, source="f")
    assert strict.detail == 'strict decoding error: unknown field "spec.devices[0].x"'
    invalid = problem_of(InvalidInput("ResourceSlice s", ("spec", "driver"), "Required value"), doc, source="f")
    assert invalid.detail == "spec.driver: Required value"


def test_a_device_list_shared_by_slices_fails_the_allocators_parsing_in_each() -> None:
    # Identical nodes share their device lists; the parse verdict is kept per list of the same
    # devices in the same order, and reported for every slice (and pool) that holds it.
    def slice_(name: str) -> o.ResourceSlice:
        obj = decode_object({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
                             "spec": {"driver": "d.example.com", "nodeName": name, "pool": {"name": name, "resourceSliceCount": 1},
                                      "devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "8Gi"}}},
                                                  {"name": "gpu-1", "capacity": {"memory": {"value": "8Gi"}}}]}})
        assert isinstance(obj, o.ResourceSlice)
        return obj

    a, b, c, d = (slice_(n) for n in "abcd")
    good, bad = a.spec.devices or []
    assert bad.capacity is not None
    # A value the decoder would refuse, as only a broken writer could leave it.
    bad.capacity = {"memory": bad.capacity["memory"].model_copy(update={"value": "12x"})}
    b.spec.devices = [good, bad]
    c.spec.devices = [bad, good]
    d.spec.devices = [good]
    screened = screen_objects([a, b, c, d], validate=False)
    where = {pool[1]: why.split(": ", 1)[1].split(":")[0] for pool, why in screened.invalid_pools.items()}
    assert where == {"a": "spec.devices[1].capacity[memory]", "b": "spec.devices[1].capacity[memory]",
                     "c": "spec.devices[0].capacity[memory]"}
