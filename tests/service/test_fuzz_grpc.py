"""Fuzzing the gRPC payloads (issue 15): whatever a caller sends, the answer is OK or a
documented status code, with a bounded message; never INTERNAL or UNKNOWN. Each call is
answered within a time bound (hypothesis' deadline) and memory bounds: the Python memory the
in-process server takes for one call at its peak (``tests/fuzzbounds``), and the process's
resident size, native memory included, grows by less than a fixed cap over one call.

Hypothesis, derandomized by the suite's default profile (tests/conftest.py);
``HYPOTHESIS_PROFILE=long`` explores fresh examples before landing.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.server import SERVICE_NAME
from tests import builders as b
from tests.fuzzbounds import bounded, peaks, rss_mib
from tests.service.conftest import Running
from tests.service.test_status_codes import DOCUMENTED, STATUS_BYTES

ALLOWED = {*DOCUMENTED, grpc.StatusCode.OK}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
# Strings a protobuf string field can hold (no lone surrogates: the client cannot send them).
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


@st.composite
def claim_payloads(draw: st.DrawFn) -> bytes:
    """A valid claim with a few fields replaced, dropped or added; or text; or raw bytes."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "text", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "text":
        return draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    claim = b.SOLVER_TEST.named("c").request("gpu", count=draw(st.integers(min_value=1, max_value=3))).obj()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(claim) if p]
        path = draw(st.sampled_from(paths))
        parent: Any = claim
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "drop" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(json_values)
        else:
            parent[path[-1]] = copy.deepcopy(draw(json_values))
    text = json.dumps(claim, allow_nan=True)
    if draw(st.booleans()):
        text = text.replace('"c"', json.dumps(draw(st.text(max_size=8))), 1)  # may hold lone surrogates, escaped
    return text.encode()


options = st.builds(
    pb.SolveOptions,
    allocator=st.sampled_from(["", "cpsat", "backtracking"]) | texts,
    policy=st.sampled_from(["", "pack", "spread", "first-fit", "score"]) | texts,
    feature_gates=st.sampled_from(["", "AdminAccess=false", "DeviceTaints=true,PrioritizedList=false"]) | texts,
)
nodes = st.sampled_from(["node-a", "node-b", "node-c", ""]) | texts


def _check(err: Any) -> None:
    code = err.code()
    assert code in ALLOWED, (code, err.details())
    size = len((err.details() or "").encode()) + sum(len(m.value) for m in err.trailing_metadata() or ())
    assert size < STATUS_BYTES, size


MEMORY_CAP_MIB = 32
"""Python memory of one call at its peak (client and in-process server)."""

RSS_CAP_MIB = 64
"""Growth of the process's resident size over one call, native memory included (CP-SAT, the
gRPC core). Measured per call, not over the campaign: the test process also holds hypothesis'
own bookkeeping, which grows by some 20 KiB an example (a real ``serve`` process's growth over
10,000 calls is tests/service/test_serve_bounds.py's)."""


def _call(method: Any, request: Any) -> None:
    before = rss_mib()
    with bounded(MEMORY_CAP_MIB, campaign="grpc"):
        try:
            method(request, timeout=30)
        except grpc.RpcError as err:
            _check(err)
    grown = rss_mib() - before
    peaks["grpc per-call RSS growth"] = max(peaks.get("grpc per-call RSS growth", 0.0), grown)
    assert grown < RSS_CAP_MIB, f"one call grew the process by {grown:.0f} MiB"


@pytest.fixture(scope="module", autouse=True)
def _warm(running: Running) -> None:
    """A few calls before the campaign, outside the bound: first calls import and build what
    every later call reuses (CEL environment, solver, reflection of the messages)."""
    claim = json.dumps(b.SOLVER_TEST.named("warm").request("gpu").obj()).encode()
    for call in (lambda: running.client.stub.Allocate(pb.AllocateRequest(claims=[claim], node="node-a"), timeout=30),
                 lambda: running.client.stub.Schedule(pb.ScheduleRequest(claims=[claim]), timeout=30),
                 lambda: running.client.stub.Explain(pb.ExplainRequest(claims=[claim], node="node-a"), timeout=30)):
        try:
            call()
        except grpc.RpcError as err:
            _check(err)


@pytest.fixture(scope="module")
def channel(running: Running) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(running.target)
    yield ch
    ch.close()


@settings(deadline=timedelta(seconds=30))
@given(claims=st.lists(claim_payloads(), min_size=0, max_size=3), node=nodes, opts=options, reserve=st.booleans(),
       ttl=st.floats(allow_nan=True, allow_infinity=True))
def test_allocate_answers_with_a_documented_code(running: Running, claims: list[bytes], node: str, opts: pb.SolveOptions,
                                                 reserve: bool, ttl: float) -> None:
    _call(running.client.stub.Allocate, pb.AllocateRequest(claims=claims, node=node, options=opts, reserve=reserve, reservation_ttl_seconds=ttl))
    running.engine.reservations.release(claims=[r for res in running.engine.reservations.all() for r in res.claim_refs])


@settings(deadline=timedelta(seconds=30))
@given(claims=st.lists(claim_payloads(), min_size=0, max_size=3), candidates=st.lists(nodes, max_size=3), opts=options,
       wanted=st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_schedule_and_explain_answer_with_a_documented_code(running: Running, claims: list[bytes], candidates: list[str],
                                                            opts: pb.SolveOptions, wanted: int) -> None:
    _call(running.client.stub.Schedule, pb.ScheduleRequest(claims=claims, nodes=candidates, options=opts, feasible_nodes_wanted=wanted))
    _call(running.client.stub.Explain, pb.ExplainRequest(claims=claims, node=candidates[0] if candidates else "node-a", options=opts))


@settings(deadline=timedelta(seconds=30))
@given(items=st.lists(st.tuples(st.lists(claim_payloads(), min_size=0, max_size=2), st.lists(nodes, max_size=2), options, st.booleans(),
                                st.booleans()), max_size=4))
def test_schedule_batch_items_answer_with_a_documented_code(running: Running, items: list[tuple[list[bytes], list[str], pb.SolveOptions, bool, bool]]) -> None:
    requests = [pb.ScheduleRequest(claims=claims, nodes=candidates, options=opts, reserve=reserve, in_flight_complete=stateless)
                for claims, candidates, opts, reserve, stateless in items]
    _call(running.client.stub.ScheduleBatch, pb.ScheduleBatchRequest(requests=requests))
    results = running.client.schedule_batch(requests)
    assert len(results) == len(requests)
    allowed = {code.value[0] for code in ALLOWED} | {grpc.StatusCode.OK.value[0]}
    for result in results:
        assert result.status.code in allowed, (result.status.code, result.status.message)
        assert len(result.status.SerializeToString()) < STATUS_BYTES
        assert result.HasField("response") == (result.status.code == grpc.StatusCode.OK.value[0])
    running.engine.reservations.release(claims=[r for res in running.engine.reservations.all() for r in res.claim_refs])


@settings(deadline=timedelta(seconds=30))
@given(method=st.sampled_from(["Allocate", "Schedule", "Reserve", "Unreserve", "Explain", "GetInventory", "ScheduleBatch"]), body=st.binary(max_size=300))
def test_raw_bytes_answer_with_a_documented_code(channel: grpc.Channel, method: str, body: bytes) -> None:
    stub = channel.unary_unary(f"/{SERVICE_NAME}/{method}", request_serializer=None, response_deserializer=None)
    _call(stub, body)


@settings(deadline=timedelta(seconds=30))
@given(claims=st.lists(claim_payloads(), min_size=0, max_size=2), node=nodes, ids=st.lists(texts, max_size=2))
def test_reserve_and_unreserve_answer_with_a_documented_code(running: Running, claims: list[bytes], node: str, ids: list[str]) -> None:
    _call(running.client.stub.Reserve, pb.ReserveRequest(claims=claims, node=node))
    _call(running.client.stub.Unreserve, pb.UnreserveRequest(reservation_id=ids[0] if ids else "", claims=ids[1:]))
