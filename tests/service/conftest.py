"""Fixtures for the service tests: a real server on loopback (the bundled demo cluster, the real
core) and a real client. Every allocation a test receives can be checked with ``assert_valid``."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationOutcome, AllocationRequest, SolveStats
from dra_solver.service import engine as e
from dra_solver.service.client import Client
from dra_solver.service.files import read_objects
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.inventory import InventorySource, StaticSource
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from dra_solver.service.server import ServerDeps, Service

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``dra-solver ARGS...`` in a child process, from the repository, output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dra_solver.cli", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def demo_objects() -> list[o.TypedObject]:
    return read_objects([str(DEMO / "cluster.yaml")])


def workload() -> dict[str, dict[str, Any]]:
    """Demo workload claims by name, as API dicts."""
    return {c.name: c.to_api() for c in read_objects([str(DEMO / "workload.yaml")])}


@functools.cache
def cel() -> Any:
    """The CEL environment the service uses for the default gates (every feature on)."""
    from dra_solver.model import default_cel
    from dra_solver.model.allocation import Inventory

    return default_cel(AllocationRequest(claims=(), node=o.Node(), inventory=Inventory()))


@dataclass
class Running:
    service: Service
    client: Client
    engine: e.Engine
    objects: list[o.TypedObject]

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.service.port}"

    @property
    def metrics_url(self) -> str:
        assert self.service.metrics_server is not None
        return f"http://127.0.0.1:{self.service.metrics_server.port}/metrics"

    def assert_valid(self, claims: list[dict[str, Any]], response: pb.AllocateResponse | pb.ScheduleResponse, node: str) -> None:
        """The returned allocation passes the independent validator on the server's inventory."""
        assert_valid(self.objects, claims, response, node, extra=self.engine.reservations)


def assert_valid(objects: list[o.TypedObject], claims: list[dict[str, Any]], response: Any, node: str, *, extra: ReservationStore | None = None) -> None:
    from dra_solver.model.allocation import Inventory
    from dra_solver.model.check import check_allocation
    from dra_solver.model.decode import decode_object

    decoded = tuple(decode_object(c) for c in claims)
    assert all(isinstance(c, o.ResourceClaim) for c in decoded)
    results = tuple(o.AllocationResult.model_validate(json.loads(a.allocation)) for a in response.claims)
    inventory = Inventory.from_objects(objects)
    node_obj = inventory.node(node)
    request = AllocationRequest(claims=decoded, node=node_obj, inventory=inventory)  # type: ignore[arg-type]
    outcome = AllocationOutcome(True, results, response.score, SolveStats("test", "GIVEN", 0.0))
    problems = check_allocation(request, outcome, cel=cel())
    assert not problems, problems


def start(
    source: InventorySource | None = None,
    *,
    reservations: ReservationStore | None = None,
    allocate_fn: e.AllocateFn | None = None,
    check_fn: e.CheckFn | None = None,
    limits: e.Limits | None = None,
    address: str = "127.0.0.1:0",
    max_concurrent: int | None = 64,
    max_message_bytes: int = 64 * 1024 * 1024,
    max_streams: int | None = None,
    credentials: Any = None,
    metrics: bool = True,
) -> Running:
    objects = demo_objects()
    src = source or StaticSource(objects, name="demo")
    engine = e.Engine(
        source=src,
        reservations=ReservationStore() if reservations is None else reservations,
        metrics=Metrics(),
        allocate_fn=allocate_fn,
        check_fn=check_fn,
        limits=limits or e.Limits(),
    )
    deps = ServerDeps(engine=engine, max_concurrent_rpcs=max_concurrent, max_message_bytes=max_message_bytes, max_streams=max_streams,
                      credentials=credentials)
    service = Service(address, deps, metrics_address="127.0.0.1", metrics_port=0 if metrics else None).start()
    target = address if address.startswith("unix:") else f"127.0.0.1:{service.port}"
    client = Client(target, timeout=30)  # plaintext: unused against TLS servers
    return Running(service, client, engine, objects)


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    r = start()
    yield r
    r.client.close()
    r.service.stop(1)


@pytest.fixture
def fresh() -> Iterator[Callable[..., Running]]:
    """Start servers with custom dependencies; all are stopped after the test."""
    made: list[Running] = []

    def make(*args: Any, **kwargs: Any) -> Running:
        r = start(*args, **kwargs)
        made.append(r)
        return r

    yield make
    for r in made:
        r.client.close()
        r.service.stop(0)
