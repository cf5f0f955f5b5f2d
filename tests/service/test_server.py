"""The gRPC service on loopback, driven by the real client: every RPC and every status code."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from dra_solver.model.allocation import AllocationOutcome, AllocationRequest
from dra_solver.service import engine as e
from dra_solver.service.client import Client
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.inventory import InventorySource
from dra_solver.service.server import SERVICE_NAME
from tests import builders as b
from tests.service.conftest import Running, workload


def _code(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    err = info.value
    return err.code(), err.details() or ""


# --- Allocate ---------------------------------------------------------------------------------


def test_allocate_first_available_prefers_the_first_subrequest(running: Running) -> None:
    claim = workload()["inference"]
    a = running.client.allocate([claim], "node-a")
    assert a.allocated and a.node == "node-a"
    assert a.score == 8, "node-a has a free 80Gi GPU: the first subrequest"
    assert [c.status for c in a.claims] == [pb.CLAIM_STATUS_ALLOCATED]
    result = json.loads(a.claims[0].allocation)
    assert [r["request"] for r in result["devices"]["results"]] == ["gpu/big"]
    assert a.stats.allocator == "cpsat" and a.stats.status in ("OPTIMAL", "TRIVIAL")
    running.assert_valid([claim], a, "node-a")

    b = running.client.allocate([claim], "node-b")
    assert b.allocated and b.score == 7, "node-b only has 24Gi GPUs: the second subrequest"
    running.assert_valid([claim], b, "node-b")


def test_allocate_unsatisfiable_is_an_answer_not_an_error(running: Running) -> None:
    a = running.client.allocate([workload()["big-training"]], "node-a")
    assert not a.allocated
    assert a.reason
    assert [c.status for c in a.claims] == [pb.CLAIM_STATUS_UNSATISFIABLE]
    assert not a.claims[0].allocation


def test_allocate_with_backtracking(running: Running) -> None:
    claim = workload()["train"]
    a = running.client.allocate([claim], "node-c", allocator="backtracking")
    assert a.allocated and a.stats.allocator == "backtracking" and a.stats.steps > 0
    running.assert_valid([claim], a, "node-c")


def test_allocate_against_an_inline_inventory(running: Running) -> None:
    objects = [x.to_api() for x in running.objects if x.kind != "ResourceClaim"]
    claim = b.SOLVER_TEST.named("inline").request("gpu", count=4).obj()
    a = running.client.allocate([claim], "node-a", objects=objects)
    assert a.allocated, "inline inventory has no claims in use: all four GPUs of node-a are free"
    code, details = _code(lambda: running.client.allocate([claim], "node-a", objects=objects, reserve=True))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "reserve" in details


def test_allocated_devices_skip_devices_in_use_and_tainted(running: Running) -> None:
    a = running.client.allocate([b.SOLVER_TEST.named("two").request("gpu", count=2).obj()], "node-a")
    devices = {r["device"] for r in json.loads(a.claims[0].allocation)["devices"]["results"]}
    assert devices == {"gpu-2", "gpu-3"}, "gpu-0 and gpu-1 are held by team-a/existing-training"
    c = running.client.allocate([b.SOLVER_TEST.named("eight").request("gpu", count=8).obj()], "node-c")
    assert not c.allocated, "gpu-7 of node-c carries an untolerated NoSchedule taint"


# --- Schedule ---------------------------------------------------------------------------------


def test_schedule_picks_a_node_and_reports_verdicts(running: Running) -> None:
    claim = workload()["train"]
    s = running.client.schedule([claim], feasible_nodes_wanted=3)
    assert s.node in ("node-a", "node-c")
    verdicts = {v.node: v for v in s.nodes}
    assert verdicts["node-b"].verdict == pb.VERDICT_UNSCHEDULABLE and verdicts["node-b"].reason
    assert verdicts["node-c"].verdict == pb.VERDICT_FEASIBLE
    assert s.schedule_stats.nodes_total == 3
    running.assert_valid([claim], s, s.node)


def test_schedule_candidates_and_unknown_nodes(running: Running) -> None:
    s = running.client.schedule([b.SOLVER_TEST.named("one").request("gpu").obj()], ["node-b", "no-such-node"])
    assert s.node == "node-b"
    unknown = next(v for v in s.nodes if v.node == "no-such-node")
    assert unknown.verdict == pb.VERDICT_UNSCHEDULABLE and "not found" in unknown.reason


def test_schedule_stops_when_the_best_score_is_found(running: Running) -> None:
    s = running.client.schedule([workload()["inference"]])
    assert s.node == "node-a" and s.score == 8
    assert s.schedule_stats.nodes_evaluated == 1, "node-a already reaches the best possible score"


def test_schedule_node_choice_follows_the_policy(running: Running) -> None:
    # node-a has two GPUs in use: pack (the default) fills it, spread avoids it.
    packed = running.client.schedule([b.SOLVER_TEST.named("one").request("gpu").obj()])
    spread = running.client.schedule([b.SOLVER_TEST.named("one").request("gpu").obj()], policy="spread")
    first = running.client.schedule([b.SOLVER_TEST.named("one").request("gpu").obj()], policy="first-fit")
    assert packed.node == "node-a" and packed.stats.policy == "pack"
    assert spread.node != "node-a" and spread.stats.policy == "spread"
    assert first.node == "node-a" and first.stats.policy == "first-fit"
    assert spread.nodes[0].node == spread.node, "verdicts come in visiting order"
    for answer in (packed, spread, first):
        running.assert_valid([b.SOLVER_TEST.named("one").request("gpu").obj()], answer, answer.node)
    code, details = _code(lambda: running.client.schedule([b.SOLVER_TEST.named("one").request("gpu").obj()], policy="tightest"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "policy" in details


def test_schedule_nowhere_summarizes_like_the_scheduler(running: Running) -> None:
    s = running.client.schedule([workload()["big-training"]])
    assert s.node == ""
    assert s.reason.startswith("0/3 nodes are available")
    assert all(v.verdict == pb.VERDICT_UNSCHEDULABLE for v in s.nodes)


def test_schedule_can_answer_with_the_chosen_nodes_verdict_only(running: Running) -> None:
    claim = workload()["train"]
    full = running.client.schedule([claim], feasible_nodes_wanted=3)
    short = running.client.schedule([claim], feasible_nodes_wanted=3, chosen_verdict_only=True)
    assert short.node == full.node and short.claims == full.claims and len(full.nodes) == 3
    assert [(v.node, v.verdict) for v in short.nodes] == [(full.node, pb.VERDICT_FEASIBLE)]
    assert short.schedule_stats.nodes_evaluated == full.schedule_stats.nodes_evaluated == 3  # still counted
    # Placed nowhere: every verdict, as the explanation needs them.
    nowhere = running.client.schedule([workload()["big-training"]], chosen_verdict_only=True)
    assert nowhere.node == "" and len(nowhere.nodes) == 3
    assert all(v.verdict == pb.VERDICT_UNSCHEDULABLE and v.reason for v in nowhere.nodes)


# --- Reserve / Unreserve ----------------------------------------------------------------------


def test_reserve_holds_devices_until_released(running: Running) -> None:
    client = running.client
    claim = b.SOLVER_TEST.named("held").request("gpu", count=2).obj()
    a = client.allocate([claim], "node-a")
    held = Client.with_allocations([claim], a)
    r = client.reserve(held, "node-a", ttl=60)
    assert r.id and r.claims == ["test/held"] and 0 < r.expires_in_seconds <= 60
    assert client.reserve(held, "node-a", ttl=60).id == r.id, "reserving the same allocation again is idempotent"
    # Both free GPUs of node-a are now held: nobody else gets them.
    other = client.allocate([b.SOLVER_TEST.named("other").request("gpu").obj()], "node-a")
    assert not other.allocated
    # Reserving the same devices for another claim conflicts.
    thief = dict(held[0], metadata={"name": "thief", "namespace": "test", "uid": "uid-thief"})
    code, details = _code(lambda: client.reserve([thief], "node-a"))
    assert code == grpc.StatusCode.ABORTED and "reserved" in details
    assert client.inventory().reservations >= 1
    assert client.unreserve(r.id) == 1
    assert client.allocate([b.SOLVER_TEST.named("other").request("gpu").obj()], "node-a").allocated
    code, _ = _code(lambda: client.unreserve(r.id))
    assert code == grpc.StatusCode.NOT_FOUND


def test_schedule_with_reserve_and_unreserve_by_claim(running: Running) -> None:
    s = running.client.schedule([b.SOLVER_TEST.named("sched-held").request("gpu").obj()], reserve=True, ttl=30)
    assert s.reservation.id and s.reservation.node == s.node
    assert running.client.unreserve(claims=["test/sched-held"]) == 1


def test_reservations_expire(fresh: Callable[..., Running]) -> None:
    from dra_solver.service.reservations import ReservationStore

    now = [1000.0]
    r = fresh(reservations=ReservationStore(clock=lambda: now[0]))
    s = r.client.allocate([b.SOLVER_TEST.named("a").request("gpu", count=2).obj()], "node-a", reserve=True, ttl=5)
    assert s.reservation.id
    assert not r.client.allocate([b.SOLVER_TEST.named("b").request("gpu").obj()], "node-a").allocated
    now[0] += 6
    assert r.client.allocate([b.SOLVER_TEST.named("b").request("gpu").obj()], "node-a").allocated, "the reservation expired"
    assert r.client.inventory().reservations == 0


def test_reservation_ends_when_the_inventory_shows_the_claim_allocated(fresh: Callable[..., Running]) -> None:
    from dra_solver.model.decode import decode_object

    r = fresh()
    claim = b.SOLVER_TEST.named("soon-allocated").request("gpu").obj()
    s = r.client.schedule([claim], reserve=True)
    assert r.client.inventory().reservations == 1
    written = decode_object(Client.with_allocations([claim], s)[0])
    r.engine.source.publish(type(r.engine.source.snapshot().inventory).from_objects([*r.objects, written]))
    assert r.client.inventory().reservations == 0


# --- Explain ----------------------------------------------------------------------------------


def test_explain_names_the_smallest_set_of_reasons(running: Running) -> None:
    claim = workload()["big-training"]
    x = running.client.explain([claim], "node-a")
    assert not x.allocatable and x.minimal
    kinds = {r.kind for r in x.reasons}
    assert "request" in kinds and "constraint" in kinds, x
    assert "numa" in x.summary
    assert x.fixes, "the solver also says what would make it fit"
    b = running.client.explain([claim], "node-b")
    assert any(r.kind == "selector" and "rejects" in r.message for r in b.reasons), b


def test_explain_in_use_devices(running: Running) -> None:
    x = running.client.explain([b.SOLVER_TEST.named("three-a").request("gpu", count=3).obj()], "node-a")
    assert not x.allocatable
    in_use = [r for r in x.reasons if r.kind == "in-use"]
    assert in_use and all("team-a/existing-training" in r.message for r in in_use)


def test_explain_taint(running: Running) -> None:
    x = running.client.explain([b.SOLVER_TEST.named("all-c").request("gpu", count=8).obj()], "node-c")
    assert any(r.kind == "taint" and "example.com/maintenance" in r.message for r in x.reasons), x


def test_explain_when_the_claims_fit(running: Running) -> None:
    x = running.client.explain([b.SOLVER_TEST.named("fits").request("gpu").obj()], "node-b")
    assert x.allocatable and not x.reasons


# --- Inventory, health, reflection ------------------------------------------------------------


def test_get_inventory(running: Running) -> None:
    inv = running.client.inventory()
    assert inv.ready and inv.nodes == 3 and inv.objects["Node"] == 3 and inv.objects["ResourceSlice"] == 3
    assert inv.source == "demo" and inv.generation >= 1


def test_health(running: Running) -> None:
    assert running.client.health() == "SERVING"
    assert running.client.health(SERVICE_NAME) == "SERVING"


def test_reflection_lists_the_service(running: Running) -> None:
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    db = ProtoReflectionDescriptorDatabase(running.client.channel)
    services = set(db.get_services())
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= services
    file = db.FindFileContainingSymbol(SERVICE_NAME)
    assert file.name == "drasolver/v1/allocation.proto"
    assert [m.name for m in file.service[0].method] == ["Allocate", "Schedule", "Reserve", "Unreserve", "Explain", "GetInventory", "ScheduleGroup", "ScheduleBatch",
                                                    "ScheduleStream"]


# --- status codes -----------------------------------------------------------------------------


def test_invalid_argument_names_object_and_field(running: Running) -> None:
    bad = b.SOLVER_TEST.named("bad").request("gpu", count=0).obj()
    with pytest.raises(grpc.RpcError) as info:
        running.client.allocate([bad], "node-a")
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.details() or ""
    assert "ResourceClaim test/bad" in details and "spec.devices.requests[0].exactly.count" in details
    rpc_status = pytest.importorskip("grpc_status.rpc_status", reason="grpcio-status carries the BadRequest detail")
    status = rpc_status.from_call(err)
    assert status is not None
    from google.rpc import error_details_pb2

    detail = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(detail)
    assert "spec.devices.requests[0].exactly.count" in detail.field_violations[0].field


@pytest.mark.parametrize(
    ("claims", "fragment"),
    [
        ([b"{not json"], "claims[0]"),
        ([json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "x"}}).encode()], "ResourceClaim"),
        ([], "at least one"),
    ],
    ids=["not-json", "wrong-kind", "no-claims"],
)
def test_invalid_argument_for_bad_claims(running: Running, claims: list[bytes], fragment: str) -> None:
    code, details = _code(lambda: running.client.allocate(claims, "node-a"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fragment in details


def test_invalid_argument_for_unknown_allocator(running: Running) -> None:
    code, details = _code(lambda: running.client.allocate([b.SOLVER_TEST.named("x").request("gpu").obj()], "node-a", allocator="greedy"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "options.allocator" in details


def test_too_many_claims(running: Running) -> None:
    claims = [b.SOLVER_TEST.named(f"c{i}").request("gpu").obj() for i in range(33)]
    code, details = _code(lambda: running.client.allocate(claims, "node-a"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "at most 32" in details


def test_not_found_for_unknown_node(running: Running) -> None:
    for call in (lambda: running.client.allocate([b.SOLVER_TEST.named("x").request("gpu").obj()], "node-z"), lambda: running.client.explain([b.SOLVER_TEST.named("x").request("gpu").obj()], "node-z")):
        code, details = _code(call)
        assert code == grpc.StatusCode.NOT_FOUND and "node-z" in details


def test_failed_precondition_for_unknown_device_class(running: Running) -> None:
    code, details = _code(lambda: running.client.allocate([b.SOLVER_TEST.named("x").request("gpu", cls="no-such-class").obj()], "node-a"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "no-such-class" in details


def _exploding_for_backtracking(partitions: int = 40) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One GPU split into partitions on a shared counter that fits 8, and a claim for 9:
    unsatisfiable, and first-fit search tries every 8-subset before it knows."""
    def slice_(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
                "spec": {"driver": "gpu.example.com", "nodeName": "w", "pool": {"name": "w", "generation": 1, "resourceSliceCount": 2}, **spec}}

    devices = [{"name": f"part-{i}", "consumesCounters": [{"counterSet": "gpu", "counters": {"mem": {"value": "1"}}}]} for i in range(partitions)]
    objects = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"}, "spec": {}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w"}},
        slice_("w-counters", {"sharedCounters": [{"name": "gpu", "counters": {"mem": {"value": "8"}}}]}),
        slice_("w-parts", {"devices": devices}),
    ]
    return [b.SOLVER_TEST.named("nine").request("gpu", count=9).obj()], objects


def test_deadline_exceeded(running: Running) -> None:
    claims, objects = _exploding_for_backtracking()
    start = time.monotonic()
    code, _ = _code(lambda: running.client.allocate(claims, "w", objects=objects, allocator="backtracking", timeout=0.5))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - start < 5, "the solver's time limit came from the deadline"
    # CP-SAT proves the same question unsatisfiable at once; the server keeps answering.
    a = running.client.allocate(claims, "w", objects=objects, timeout=10)
    assert not a.allocated and a.stats.allocator == "cpsat"


def _blocking_allocator(gate: threading.Event, entered: threading.Event) -> e.AllocateFn:
    from dra_solver.model import allocate

    def run(request: AllocationRequest) -> AllocationOutcome:
        entered.set()
        gate.wait(10)
        return allocate(request)

    return run


def test_resource_exhausted_when_overloaded(fresh: Callable[..., Running]) -> None:
    gate, entered = threading.Event(), threading.Event()
    r = fresh(allocate_fn=_blocking_allocator(gate, entered), max_concurrent=1)
    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(r.client.allocate([b.SOLVER_TEST.named("slow").request("gpu").obj()], "node-b")))
    t.start()
    assert entered.wait(10)
    code, _ = _code(lambda: r.client.allocate([b.SOLVER_TEST.named("second").request("gpu").obj()], "node-b"))
    gate.set()
    t.join(10)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert results and results[0].allocated, "the call in flight was not affected"


def test_resource_exhausted_for_oversized_messages(fresh: Callable[..., Running]) -> None:
    r = fresh(max_message_bytes=16 * 1024)
    huge = b.SOLVER_TEST.named("huge").request("gpu", selectors=[b.selector("true" + " || true" * 3000)]).obj()
    code, _ = _code(lambda: r.client.allocate([huge], "node-a"))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert r.client.allocate([b.SOLVER_TEST.named("small").request("gpu").obj()], "node-a").allocated


def test_unavailable_until_the_inventory_is_ready(fresh: Callable[..., Running]) -> None:
    class Never(InventorySource):
        name = "never"

    r = fresh(source=Never())
    assert r.client.health() == "NOT_SERVING"
    code, details = _code(lambda: r.client.allocate([b.SOLVER_TEST.named("x").request("gpu").obj()], "node-a"))
    assert code == grpc.StatusCode.UNAVAILABLE and "not loaded" in details


def test_internal_and_no_answer_when_validation_fails(fresh: Callable[..., Running]) -> None:
    def reject(request: AllocationRequest, outcome: AllocationOutcome) -> None:
        raise e.CheckFailed("device counted twice")

    r = fresh(check_fn=reject)
    code, details = _code(lambda: r.client.allocate([b.SOLVER_TEST.named("x").request("gpu").obj()], "node-a"))
    assert code == grpc.StatusCode.INTERNAL and "withheld" in details


def test_graceful_shutdown_drains_in_flight_calls(fresh: Callable[..., Running]) -> None:
    gate, entered = threading.Event(), threading.Event()
    r = fresh(allocate_fn=_blocking_allocator(gate, entered))
    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(r.client.allocate([b.SOLVER_TEST.named("draining").request("gpu").obj()], "node-b")))
    t.start()
    assert entered.wait(10)
    stopper = threading.Thread(target=lambda: r.service.stop(10))
    stopper.start()
    time.sleep(0.2)
    gate.set()
    t.join(10)
    stopper.join(10)
    assert results and results[0].allocated


def test_explain_names_reservations_in_flight(fresh: Callable[..., Running]) -> None:
    r = fresh()
    held = r.client.allocate([b.SOLVER_TEST.named("holder").request("gpu", count=4).obj()], "node-b", reserve=True)
    assert held.reservation.id
    x = r.client.explain([b.SOLVER_TEST.named("late").request("gpu").obj()], "node-b")
    assert not x.allocatable
    reserved = [f for f in x.fixes if f.kind == "reserved"]
    assert len(reserved) == 1 and "test/holder" in reserved[0].message, "freeing one reserved GPU is the smallest fix"


def test_reservation_ends_when_its_claim_is_deleted(fresh: Callable[..., Running]) -> None:
    from dra_solver.model.allocation import Inventory
    from dra_solver.model.decode import decode_object

    r = fresh()
    claim = b.SOLVER_TEST.named("deleted-soon").request("gpu").obj()
    pending = decode_object(claim)
    r.engine.source.publish(Inventory.from_objects([*r.objects, pending]))
    r.client.schedule([claim], reserve=True)
    r.engine.source.publish(Inventory.from_objects([*r.objects, pending]))
    assert r.client.inventory().reservations == 1, "the claim is still pending: keep holding"
    r.engine.source.publish(Inventory.from_objects(r.objects))
    assert r.client.inventory().reservations == 0, "the claim was deleted before it was allocated"
