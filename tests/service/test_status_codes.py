"""Whatever a caller sends gets a documented status code and a short message (issue 15).

Real gRPC on loopback; payloads are sent as raw bytes where the typed client could not even
build them (invalid UTF-8 in a string field, bytes that are no protobuf message).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.server import MAX_STATUS_MESSAGE, SERVICE_NAME
from tests import builders as b
from tests.service.conftest import Running

DOCUMENTED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
"""Codes for what a caller sent (docs/limits-and-errors.md); never INTERNAL or UNKNOWN."""

STATUS_BYTES = 8 * 1024
"""Bound on everything a refusal sends back: message plus details."""


@pytest.fixture
def raw(running: Running) -> Iterator[Callable[[str, bytes], Any]]:
    """Call a method with raw request bytes; returns the error (the call must fail)."""
    channel = grpc.insecure_channel(running.target)

    def call(method: str, body: bytes) -> Any:
        stub = channel.unary_unary(f"/{SERVICE_NAME}/{method}", request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as info:
            stub(body, timeout=30)
        return info.value

    yield call
    channel.close()


def _fails(call: Callable[[], Any]) -> Any:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def _size(err: Any) -> int:
    trailers = err.trailing_metadata() or ()
    return len((err.details() or "").encode()) + sum(len(m.value) for m in trailers)


def _allocate(claims: list[bytes], node: str = "node-a", **options: str) -> bytes:
    return pb.AllocateRequest(claims=claims, node=node, options=pb.SolveOptions(**options)).SerializeToString()


def test_bytes_that_are_no_message_are_invalid_argument(raw: Callable[[str, bytes], Any]) -> None:
    for method in ("Allocate", "Schedule", "Reserve", "Unreserve", "Explain"):
        err = raw(method, b"\xff\xff\xff\xff garbage")
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err)
        assert "not a valid drasolver.v1." in (err.details() or "")


def test_invalid_utf8_in_a_string_field_is_invalid_argument(raw: Callable[[str, bytes], Any]) -> None:
    # AllocateRequest.node (field 2, a string) holding a lone surrogate's UTF-8-like bytes.
    body = b"\x12\x03\xed\xa0\x80"
    err = raw("Allocate", body)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("payload", [b"", b"null", b"[]", b"---\n", b"{}"])
def test_empty_claim_payloads_are_invalid(raw: Callable[[str, bytes], Any], payload: bytes) -> None:
    err = raw("Allocate", _allocate([payload]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()


@pytest.mark.parametrize("validate", ["", "ignore"])
def test_a_lone_surrogate_in_a_name_is_invalid_argument(raw: Callable[[str, bytes], Any], validate: str) -> None:
    claim = b.SOLVER_TEST.named("x").request("gpu").obj()
    text = json.dumps(claim).replace('"name": "x"', '"name": "x\\ud800"')
    # Without validation the name gets as far as the answer, which cannot carry it.
    err = raw("Allocate", _allocate([text.encode()], validate=validate))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    err.details().encode()


def test_huge_values_are_quoted_by_a_short_prefix(raw: Callable[[str, bytes], Any]) -> None:
    mib = "n" * (1 << 20)
    claim = b.SOLVER_TEST.named("x").request("gpu").obj()
    claim["metadata"]["name"] = mib
    cases = {
        "name": _allocate([json.dumps(claim).encode()]),
        "node": _allocate([json.dumps(b.SOLVER_TEST.named("x").request("gpu").obj()).encode()], node=mib),
        "allocator": _allocate([json.dumps(b.SOLVER_TEST.named("x").request("gpu").obj()).encode()], allocator=mib),
        "feature_gates": _allocate([json.dumps(b.SOLVER_TEST.named("x").request("gpu").obj()).encode()], feature_gates=mib),
        "policy": _allocate([json.dumps(b.SOLVER_TEST.named("x").request("gpu").obj()).encode()], policy=mib),
    }
    for what, body in cases.items():
        err = raw("Allocate", body)
        assert err.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (what, err.code())
        assert len(err.details() or "") <= MAX_STATUS_MESSAGE + 100, what
        assert _size(err) < STATUS_BYTES, (what, _size(err))
        # docs/limits-and-errors.md: the first 64 characters and the length, wherever it is quoted.
        assert "n" * 64 in err.details() and "n" * 65 not in err.details(), (what, err.details())
        assert f"({1 << 20} characters)" in err.details(), (what, err.details())


def test_many_field_errors_are_summarised(running: Running) -> None:
    claim = b.SOLVER_TEST.named("x").request("gpu").obj()
    claim["spec"]["devices"]["requests"] = [{"name": f"BAD_{i}" * 50, "exactly": {"deviceClassName": "gpu.example.com", "count": -1}} for i in range(32)]
    err = _fails(lambda: running.client.allocate([claim], "node-a"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _size(err) < 2 * STATUS_BYTES


def test_deep_nesting_is_invalid_argument(raw: Callable[[str, bytes], Any]) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    assert raw("Allocate", _allocate([deep])).code() == grpc.StatusCode.INVALID_ARGUMENT
    deep_map = ("a:\n" + "".join(" " * i + "b:\n" for i in range(1, 2000))).encode()
    assert raw("Allocate", _allocate([deep_map])).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_odd_types_are_invalid_argument(raw: Callable[[str, bytes], Any]) -> None:
    for payload in (b'"a string"', b"42", b"true", b'{"kind": ["ResourceClaim"]}', b'{"kind": "ResourceClaim", "metadata": 7}',
                    b'{? {a: 1} : b}', b"\x00\x01\x02", b'{"kind": "ResourceClaim", "spec": {"devices": {"requests": [{"exactly": {"count": 1e400}}]}}}'):
        err = raw("Allocate", _allocate([payload]))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (payload, err.code(), err.details())


def test_unknown_node_is_not_found_and_unknown_reservation_too(running: Running) -> None:
    assert _fails(lambda: running.client.allocate([b.SOLVER_TEST.named("x").request("gpu").obj()], "node-zz")).code() == grpc.StatusCode.NOT_FOUND
    assert _fails(lambda: running.client.unreserve("r-none")).code() == grpc.StatusCode.NOT_FOUND


def test_allocator_metric_label_comes_from_a_fixed_set(running: Running) -> None:
    import urllib.request

    for allocator in (f"bogus-{i}" for i in range(5)):
        err = _fails(functools.partial(running.client.allocate, [b.SOLVER_TEST.named("x").request("gpu").obj()], "node-a", allocator=allocator))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    text = urllib.request.urlopen(running.metrics_url, timeout=10).read().decode()
    assert "bogus" not in text
    assert 'allocator="invalid"' in text
    import re

    codes = set(re.findall(r'^dra_solver_grpc_requests_total\{[^}]*grpc_status_code="([A-Z_]+)"', text, re.MULTILINE))
    assert codes and codes <= {c.name for c in DOCUMENTED} | {"OK"}, codes
