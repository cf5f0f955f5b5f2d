"""ScheduleGroup over real gRPC: a gang placed whole in one rack, its explanation when it does not
fit, the documented status codes, one reservation for the whole gang, and concurrent gangs that
never share a device (with tracking off the same race does share one: the test has teeth)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from dra_solver.service import engine as e
from dra_solver.service.client import Client
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.inventory import StaticSource
from dra_solver.service.reservations import ReservationStore
from tests import builders as b
from tests import gang_builders as g
from tests.service.conftest import Running

KEY = g.RACK_LABEL
FABRIC = "default/worker-fabric"

# r1: two whole nodes; r2: one whole node and one with 6 of 8 GPUs busy; r3: two half-busy nodes.
RACKS = [
    g.Rack("r1", [g.Node(), g.Node()], fabric=2),
    g.Rack("r2", [g.Node(), g.Node(busy=6)], fabric=2),
    g.Rack("r3", [g.Node(busy=4), g.Node(busy=4)], fabric=2),
]


def gpu_claim(name: str, count: int) -> dict[str, Any]:
    return b.claim(name, cls=b.CLASS).request("gpu", count=count).obj()


def fabric_claim(name: str = "train-fabric") -> dict[str, Any]:
    return b.claim(name, cls=g.FABRIC_CLASS).request("link").obj()


def gang(gpus: list[int], *, prefix: str = "worker", shared: bool = True, min_count: int | None = None, key: str = KEY,
         **extra: Any) -> pb.ScheduleGroupRequest:
    fabric = f"default/{prefix}-fabric"
    pods = [
        Client.group_pod(f"{prefix}-{i}", [gpu_claim(f"{prefix}-{i}-gpu", n)], shared_claims=[fabric] if shared else [])
        for i, n in enumerate(gpus)
    ]
    return pb.ScheduleGroupRequest(
        pod_group=f"default/{prefix}",
        pods=pods,
        shared_claims=[json.dumps(fabric_claim(f"{prefix}-fabric")).encode()] if shared else [],
        min_count=len(gpus) if min_count is None else min_count,
        topology_key=key,
        **extra,
    )


@pytest.fixture(scope="module")
def racks() -> Iterator[Running]:
    from tests.service.conftest import start

    r = start(StaticSource(g.decode(g.cluster(RACKS)), name="racks"), limits=e.Limits(max_group_pods=8))
    yield r
    r.client.close()
    r.service.stop(1)


def devices(allocation: bytes) -> list[str]:
    return [f"{d['driver']}/{d['pool']}/{d['device']}" for d in json.loads(allocation)["devices"]["results"]]


def test_gang_placed_whole_in_one_rack(racks: Running) -> None:
    answer = racks.client.schedule_group(gang([8, 8]))
    assert answer.placed and answer.pods_placed == 2
    assert (answer.domain.key, answer.domain.value) == (KEY, "r1")  # the only rack with two whole nodes
    assert sorted(p.node for p in answer.pods) == ["r1-n0", "r1-n1"]
    for pod in answer.pods:
        (claim,) = pod.claims
        assert claim.claim == f"default/{pod.name}-gpu" and claim.status == pb.CLAIM_STATUS_ALLOCATED
        assert {d.split("/")[1] for d in devices(claim.allocation)} == {pod.node}
        assert len(devices(claim.allocation)) == 8
    (shared,) = answer.shared_claims
    assert shared.claim == FABRIC and devices(shared.allocation)[0].startswith("fabric.example.com/r1-fabric/")
    assert answer.group_stats.path in ("aggregated", "joint") and answer.stats.status == "OPTIMAL"
    assert not answer.HasField("reservation")


def test_not_placeable_explains_the_closest_rack(racks: Running) -> None:
    answer = racks.client.schedule_group(gang([8, 8, 8]))
    assert not answer.placed and not answer.pods and not answer.shared_claims
    x = answer.explanation
    assert x.min_count == 3 and x.pods_placeable == 2
    assert x.closest.key == KEY and x.closest.value == "r1"
    assert x.summary and answer.reason == x.summary
    assert "r1" in x.summary and x.reasons
    assert x.domains[0].value == "r1"


def test_reservation_holds_the_whole_gang_and_releases_it_at_once(racks: Running) -> None:
    first = racks.client.schedule_group(gang([8, 8], prefix="a", reserve=True, reservation_ttl_seconds=60))
    assert first.placed and first.domain.value == "r1"
    held = first.reservation
    assert held.id and held.pod_group == "default/a" and list(held.nodes) == ["r1-n0", "r1-n1"] and not held.node
    assert sorted(held.claims) == ["default/a-0-gpu", "default/a-1-gpu", "default/a-fabric"]
    # The same gang again cannot have r1 while the first holds it: r2 has one whole node only.
    second = racks.client.schedule_group(gang([8, 8], prefix="b"))
    assert not second.placed
    smaller = racks.client.schedule_group(gang([8, 2], prefix="c"))
    assert smaller.placed and smaller.domain.value == "r2"
    assert racks.client.unreserve(held.id) == 1  # one reservation: every device of the gang
    again = racks.client.schedule_group(gang([8, 8], prefix="b"))
    assert again.placed and again.domain.value == "r1"


def test_inline_inventory(racks: Running) -> None:
    objs = [json.dumps(x).encode() for x in g.cluster([g.Rack("x", [g.Node(gpus=4)])])]
    answer = racks.client.schedule_group(gang([2, 2], shared=False, objects=objs))
    assert answer.placed and {p.node for p in answer.pods} == {"x-n0"} and answer.domain.value == "x"


@pytest.mark.parametrize(
    ("change", "code", "text"),
    [
        (lambda r: setattr(r, "min_count", 0), grpc.StatusCode.INVALID_ARGUMENT, "minCount"),
        (lambda r: r.pods.append(Client.group_pod("worker-0")), grpc.StatusCode.INVALID_ARGUMENT, "Duplicate value"),
        (lambda r: r.pods[0].shared_claims.append("default/nope"), grpc.StatusCode.INVALID_ARGUMENT, "default/nope"),
        (lambda r: setattr(r, "topology_key", "not a key!"), grpc.StatusCode.INVALID_ARGUMENT, "not a key!"),
        (lambda r: setattr(r, "path", "fastest"), grpc.StatusCode.INVALID_ARGUMENT, "path"),
        (lambda r: r.pods[0].claims.append(b"{"), grpc.StatusCode.INVALID_ARGUMENT, "pods[0].claims"),
        (lambda r: r.MergeFrom(pb.ScheduleGroupRequest(reserve=True, objects=[json.dumps(b.node("x")).encode()])), grpc.StatusCode.INVALID_ARGUMENT, "reserve"),
        (lambda r: r.pods.extend(Client.group_pod(f"extra-{i}") for i in range(8)), grpc.StatusCode.RESOURCE_EXHAUSTED, "at most 8"),
    ],
    ids=["min-count", "duplicate-pod", "unknown-shared", "bad-key", "bad-path", "bad-claim", "reserve-inline", "too-many-pods"],
)
def test_status_codes(racks: Running, change: Callable[[pb.ScheduleGroupRequest], Any], code: grpc.StatusCode, text: str) -> None:
    request = gang([8, 8])
    change(request)
    with pytest.raises(grpc.RpcError) as caught:
        racks.client.schedule_group(request)
    assert caught.value.code() == code, caught.value.details()
    assert text in (caught.value.details() or "")


def test_deadline_exceeded(racks: Running) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        racks.client.schedule_group(gang([8, 8]), timeout=0.001)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


CALLERS = 8


def _race(r: Running) -> list[str]:
    """CALLERS threads each place a 2-pod gang of 4+4 GPUs with reservation; devices handed out."""
    barrier = threading.Barrier(CALLERS)
    got: list[str] = []
    lock = threading.Lock()

    def caller(i: int) -> None:
        with Client(r.target, timeout=60) as client:
            barrier.wait()
            for _attempt in range(20):
                try:
                    answer = client.schedule_group(gang([4, 4], prefix=f"g{i}", shared=False, key="", reserve=True, reservation_ttl_seconds=120))
                except grpc.RpcError as err:
                    if err.code() == grpc.StatusCode.ABORTED:
                        continue
                    raise
                with lock:
                    for pod in answer.pods:
                        got.extend(devices(pod.claims[0].allocation))
                return

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return got


def test_concurrent_gangs_never_share_a_device(fresh: Callable[..., Running]) -> None:
    # Room for eight 4-GPU pods (r1 2+2, r2 2+0, r3 1+1): four of the eight gangs fit.
    got = _race(fresh(StaticSource(g.decode(g.cluster(RACKS)))))
    assert not [d for d, n in Counter(got).items() if n > 1]
    assert len(got) == 32  # every room used, whatever the interleaving


def test_without_tracking_the_race_does_share(fresh: Callable[..., Running]) -> None:
    got = _race(fresh(StaticSource(g.decode(g.cluster(RACKS))), reservations=ReservationStore(enabled=False)))
    assert [d for d, n in Counter(got).items() if n > 1]


def test_input_that_stops_every_node_is_failed_precondition(racks: Running) -> None:
    request = gang([1], shared=False)
    request.pods[0].claims[0] = json.dumps(b.claim("worker-0-gpu", cls="no-such-class.example.com").request("gpu").obj()).encode()
    with pytest.raises(grpc.RpcError) as caught:
        racks.client.schedule_group(request)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION, caught.value.details()
    assert "no-such-class.example.com" in (caught.value.details() or "")


def test_an_answer_the_validator_rejects_is_withheld(racks: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    from dra_solver import model
    from dra_solver.model.check import Violation

    monkeypatch.setattr(model, "check_group", lambda *a, **k: [Violation("group-domain", "planted", "a node outside the domain")])
    with pytest.raises(grpc.RpcError) as caught:
        racks.client.schedule_group(gang([8], reserve=True))
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "failed validation and was withheld" in (caught.value.details() or "")
    assert racks.engine.reservations.state().devices == frozenset()  # nothing held either
