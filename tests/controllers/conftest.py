"""Fixtures for the controller tests: a fake API server, the real solver service watching it
over the real kubernetes client, and the controllers under test.

The solver is the real gRPC service (``service.server.Service``) with its Kubernetes inventory
(``KubeSource``) listing and watching the same fake API server the controllers write to, so the
test exercises the production loop: claims written by the scheduler become "allocated" in the
service's inventory, reservations are dropped once the API shows them, and devices come back
when the claim controller deallocates.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from controllers import kube
from controllers import objects as ob
from controllers.manager import Manager, Options
from controllers.metrics import ControllerMetrics
from tests.controllers import builders as b
from tests.controllers.fake_apiserver import FakeApiServer

if not os.environ.get("DRA_TEST_LOG"):
    logging.getLogger("controllers").setLevel(logging.WARNING)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.stop()


def kube_for(fake: FakeApiServer, identity: str = "test") -> kube.Kube:
    return kube.Kube(kube.api_client(host=fake.host, user_agent=f"dra-solver-controllers/{identity}"))


@dataclass
class Solver:
    service: Any
    client: Any
    engine: Any

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.service.port}"


def write_kubeconfig(fake: FakeApiServer, path: Path) -> Path:
    """A kubeconfig for the fake API server (plain HTTP, no credentials)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {fake.host}\n"
        "users:\n- name: test\n  user: {}\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: test\n"
        "current-context: fake\n"
    )
    return path


def start_solver(fake: FakeApiServer, kubeconfig: Path) -> Solver:
    """The solver service exactly as ``dra-solver serve --kubeconfig FILE --port 0`` builds it."""
    from service.client import Client
    from service.commands import serve

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["--kubeconfig", str(kubeconfig), "--port", "0", "--metrics-port", "-1", "--log-level", "warning"])
    service = serve.build(args)
    service.start()
    source = service.engine.source
    deadline = time.monotonic() + 15
    while not source.snapshot().ready:
        assert time.monotonic() < deadline, "solver inventory did not sync"
        time.sleep(0.01)
    client = Client(f"127.0.0.1:{service.port}", timeout=30)
    return Solver(service, client, service.engine)


def fast_options(**overrides: Any) -> Options:
    base: dict[str, Any] = {
        "backoff_initial": 0.05,
        "backoff_max": 0.5,
        "flush_interval": 2.0,
        "watch_timeout": 30,
        "sync_timeout": 10.0,
        "lease_duration": 2.0,
        "renew_deadline": 1.5,
        "retry_period": 0.2,
        "solver_timeout": 30.0,
    }
    base.update(overrides)
    return Options(**base)


@dataclass
class Env:
    fake: FakeApiServer
    solver: Solver | None
    managers: list[Manager] = field(default_factory=list)

    def manager(self, identity: str = "test", *, start: bool = True, **overrides: Any) -> Manager:
        options = fast_options(identity=identity, **overrides)
        client = self.solver.client if self.solver is not None and "scheduler" in options.enable else None
        m = Manager(kube_for(self.fake, identity), options, solver_client=client, metrics=ControllerMetrics())
        self.managers.append(m)
        if start:
            m.start()
        return m

    # cluster contents

    def cluster(self, nodes: int = 3, gpus: int = 4, **node_kw: Any) -> None:
        self.fake.create(b.device_class())
        for i in range(nodes):
            name = f"node-{chr(ord('a') + i)}"
            self.fake.create(b.node(name, **node_kw))
            self.fake.create(b.gpu_slice(name, count=gpus))

    def wait_solver_sees(self, predicate: Callable[[Any], bool], timeout: float = 10.0) -> None:
        assert self.solver is not None
        self.fake.wait_for(lambda: predicate(self.solver.engine.source.snapshot()), timeout=timeout)  # type: ignore[union-attr]

    # reading state

    def pod(self, name: str, ns: str = b.NS) -> dict[str, Any] | None:
        return self.fake.get("pods", name, ns)

    def claims_of(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for entry in ob.status(pod).get("resourceClaimStatuses") or []:
            claim = self.fake.get("resourceclaims", entry["resourceClaimName"], ob.namespace(pod))
            if claim is not None:
                out.append(claim)
        for pc in ob.pod_claims(pod):
            if pc.get("resourceClaimName"):
                claim = self.fake.get("resourceclaims", pc["resourceClaimName"], ob.namespace(pod))
                if claim is not None:
                    out.append(claim)
        return out

    def bound(self, *names: str) -> bool:
        pods = [self.pod(n) for n in names]
        return all(p is not None and ob.pod_node(p) for p in pods)

    def allocated_devices(self) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        for claim in self.fake.list("resourceclaims"):
            out.extend(ob.device_id(r) for r in ob.allocated_devices(claim))
        return out

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every manager's queues are idle for a moment."""
        deadline = time.monotonic() + timeout
        quiet = 0
        active = [m for m in self.managers if m.leading.is_set()]  # a standby queues but never works
        while time.monotonic() < deadline:
            if all(m.idle() for m in active):
                quiet += 1
                if quiet >= 5:
                    return
            else:
                quiet = 0
            time.sleep(0.02)
        busy = {name: c.queue.pending() for m in active for name, c in m.controllers.items() if not c.queue.idle()}
        raise AssertionError(f"controllers did not settle: {busy}")


@pytest.fixture
def env(fake: FakeApiServer, tmp_path: Path) -> Iterator[Env]:
    solver = start_solver(fake, write_kubeconfig(fake, tmp_path / "kubeconfig"))
    e = Env(fake, solver)
    yield e
    for m in e.managers:
        m.stop()
    # Stop the API server first: the solver's watches then end at once instead of running
    # into their timeout when the service stops.
    fake.stop()
    solver.client.close()
    solver.service.stop(0)


@pytest.fixture
def env_no_solver(fake: FakeApiServer) -> Iterator[Env]:
    e = Env(fake, None)
    yield e
    for m in e.managers:
        m.stop()


class DoubleAllocationChecker:
    """An on_write hook: after every stored claim change, no exclusive device may be in two
    allocated claims. Violations are recorded (asserting inside the server would only break
    the request)."""

    def __init__(self, fake: FakeApiServer) -> None:
        self.fake = fake
        self.violations: list[str] = []
        self.writes = 0

    def __call__(self, plural: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if plural != "resourceclaims":
            return
        self.writes += 1
        holders: dict[tuple[str, str, str], str] = {}
        for (ns, name), claim in self.fake.objects["resourceclaims"].items():
            for r in ob.allocated_devices(claim):
                if r.get("adminAccess") or r.get("shareID"):
                    continue
                d = ob.device_id(r)
                if d in holders:
                    self.violations.append(f"{'/'.join(d)} held by {holders[d]} and {ns}/{name}")
                holders[d] = f"{ns}/{name}"
