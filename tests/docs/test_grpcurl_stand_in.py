"""The grpcurl stand-in used by the docs examples behaves like grpcurl against a real server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tests.docs.runner import ROOT


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    names = (health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def _grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.docs.grpcurl", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_list_and_describe(address: str) -> None:
    done = _grpcurl("-plaintext", address, "list")
    assert done.returncode == 0, done.stderr
    assert "grpc.health.v1.Health" in done.stdout.split()
    done = _grpcurl("-plaintext", address, "list", "grpc.health.v1.Health")
    assert "grpc.health.v1.Health.Check" in done.stdout.split()
    done = _grpcurl("-plaintext", address, "describe", "grpc.health.v1.Health")
    assert "grpc.health.v1.Health is a service:" in done.stdout
    assert "rpc Watch ( .grpc.health.v1.HealthCheckRequest ) returns ( stream" in done.stdout


def test_unary_call_prints_json(address: str) -> None:
    done = _grpcurl("-plaintext", "-d", '{"service": ""}', address, "grpc.health.v1.Health/Check")
    assert done.returncode == 0, done.stderr
    assert '"status": "SERVING"' in done.stdout


def test_error_status_and_exit_code(address: str) -> None:
    done = _grpcurl("-plaintext", "-d", '{"service": "nope"}', address, "grpc.health.v1.Health/Check")
    assert done.returncode == 64 + grpc.StatusCode.NOT_FOUND.value[0]
    assert "Code: NotFound" in done.stderr
