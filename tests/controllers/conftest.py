"""Fixtures for the controller tests: the real kube-apiserver (tests/realkube.py), the real
solver service watching it, and the controllers under test.

The solver is built exactly as ``dra-solver serve --kubeconfig FILE`` builds it, so its
inventory lists and watches the same API server the controllers write to: claims written by the
scheduler become "allocated" in the service's inventory, reservations are dropped once the API
shows them, and devices come back when the claim controller deallocates.

Faults the real server cannot be made to produce on cue (a 500 on one binding, a lease update
that keeps failing) are injected by :class:`FaultyKube`, the client layer with chosen calls
failing; everything on the other side of it is the real server.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest

from dra_solver.controllers import objects as ob
from dra_solver.controllers.manager import Manager, Options
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi.informer import Informer
from tests import builders as b
from tests.realkube import KubeCluster

if not os.environ.get("DRA_TEST_LOG"):
    logging.getLogger("controllers").setLevel(logging.WARNING)

T = TypeVar("T")

RESOURCE = "/apis/resource.k8s.io/v1"
PATHS: dict[str, tuple[str, str, bool]] = {
    "Pod": ("/api/v1", "pods", True),
    "Node": ("/api/v1", "nodes", False),
    "Event": ("/api/v1", "events", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "ResourceClaim": (RESOURCE, "resourceclaims", True),
    "ResourceClaimTemplate": (RESOURCE, "resourceclaimtemplates", True),
    "ResourceSlice": (RESOURCE, "resourceslices", False),
    "DeviceClass": (RESOURCE, "deviceclasses", False),
    "DeviceTaintRule": (RESOURCE, "devicetaintrules", False),
    "PodGroup": ("/apis/scheduling.k8s.io/v1beta1", "podgroups", True),
}
"""Kind -> (API prefix, plural, namespaced): where the admin client reads and writes each kind."""

LONG_FLUSH = 3600.0
"""The scheduler's periodic flush in these tests: so long that a pod woken only by it (a lost
wakeup) fails the test by timing out instead of being rescued."""


def collection(kind: str, ns: str = b.NS) -> str:
    prefix, plural, namespaced = PATHS[kind]
    return f"{prefix}/namespaces/{ns}/{plural}" if namespaced else f"{prefix}/{plural}"


def wait_for(predicate: Callable[[], T], *, timeout: float = 20.0, interval: float = 0.02, what: str = "") -> T:
    """Poll until ``predicate`` returns something truthy; return it (fail after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or getattr(predicate, '__name__', 'condition')}")
        time.sleep(interval)


@dataclass
class Solver:
    service: Any
    client: Any
    engine: Any

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.service.port}"

    def stop(self) -> None:
        self.client.close()
        self.service.stop(0)


def start_solver(kubeconfig: str, *, watch_timeout: int | None = None) -> Solver:
    """The solver service exactly as ``dra-solver serve --kubeconfig FILE --port 0`` builds it
    (``watch_timeout``: end its watches after that many seconds, so they resume often)."""
    from dra_solver.service.client import Client
    from dra_solver.service.commands import serve

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["--kubeconfig", kubeconfig, "--port", "0", "--metrics-port", "-1", "--log-level", "warning"])
    service = serve.build(args)
    if watch_timeout is not None:
        source_ = service.engine.source
        for holder in (source_, *(getattr(source_, "informers", None) or {}).values()):
            if hasattr(holder, "watch_timeout"):
                holder.watch_timeout = watch_timeout
    service.start()
    source = service.engine.source
    wait_for(lambda: source.snapshot().ready, timeout=30, what="the solver's inventory to sync")
    return Solver(service, Client(f"127.0.0.1:{service.port}", timeout=30), service.engine)


def fast_options(**overrides: Any) -> Options:
    base: dict[str, Any] = {
        "backoff_initial": 0.05,
        "backoff_max": 0.5,
        "flush_interval": LONG_FLUSH,
        "watch_timeout": 60,
        "sync_timeout": 20.0,
        "lease_duration": 2.0,
        "renew_deadline": 1.5,
        "retry_period": 0.2,
        "solver_timeout": 30.0,
    }
    base.update(overrides)
    return Options(**base)


class FaultServer:
    """Answers each request with the next queued (status, headers), or ``otherwise`` when none
    is queued: the 5xx and 429 answers (with Retry-After) a healthy kube-apiserver does not give
    on cue. By default GET only (other verbs: 501) over HTTP/1.0, a connection per request, so
    a client cannot outlive ``stop`` on a kept connection; ``keep_alive`` speaks HTTP/1.1 as the
    API server does. Records each request's path (``requests``) and method, path, content type
    and body (``bodies``); a 200 answers ``ok_body``."""

    def __init__(self, *, verbs: tuple[str, ...] = ("GET",), keep_alive: bool = False,
                 otherwise: tuple[int, dict[str, str]] = (404, {}), ok_body: bytes = b"{}") -> None:
        self.answers: list[tuple[int, dict[str, str]]] = []
        self.requests: list[str] = []
        self.bodies: list[tuple[str, str, str | None, bytes]] = []
        answers, requests, bodies = self.answers, self.requests, self.bodies

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def _answer(self) -> None:
                body_in = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                requests.append(self.path)
                bodies.append((self.command, self.path, self.headers.get("Content-Type"), body_in))
                status, headers = answers.pop(0) if answers else otherwise
                body = ok_body if status == 200 else (
                    b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","reason":"InternalError"}')
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        for verb in verbs:
            setattr(Handler, f"do_{verb}", Handler._answer)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FaultyKube(kube.Kube):
    """The real client layer, with the next ``times`` calls of a method failing (or doing
    something first): the faults a healthy API server does not produce on cue."""

    def __init__(self, api_client: Any, **kw: Any) -> None:
        super().__init__(api_client, **kw)
        self._faults: dict[str, list[Callable[[tuple[Any, ...]], None]]] = {}
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def inject(self, method: str, action: Callable[[tuple[Any, ...]], None], *, times: int = 1) -> None:
        """Run ``action(args)`` before the next ``times`` calls of ``method``; it may raise."""
        with self._lock:
            self._faults.setdefault(method, []).extend([action] * times)

    def fail(self, method: str, error: Exception, *, times: int = 1) -> None:
        def raise_it(_args: tuple[Any, ...]) -> None:
            raise error
        self.inject(method, raise_it, times=times)

    def pending_faults(self, method: str) -> int:
        with self._lock:
            return len(self._faults.get(method, []))

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name.startswith("_") or not callable(attr) or name in ("inject", "fail", "pending_faults"):
            return attr
        faults: dict[str, list[Callable[[tuple[Any, ...]], None]]] = super().__getattribute__("_faults")
        lock: threading.Lock = super().__getattribute__("_lock")
        calls: dict[str, int] = super().__getattribute__("calls")

        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                calls[name] = calls.get(name, 0) + 1
                pending = faults.get(name)
                action = pending.pop(0) if pending else None
            if action is not None:
                action(args)
            return attr(*args, **kwargs)

        return call


class DoubleAllocationChecker:
    """Watches claims on the real server: after every change, no exclusive device may be in two
    allocated claims. Violations are recorded for the test to assert on."""

    def __init__(self, kube_api: kube.Kube, *, watch_timeout: int = 60) -> None:
        self.informer = Informer(kube_api.claims(), watch_timeout=watch_timeout)
        self.violations: list[str] = []
        self.events = 0
        self.informer.add_handler(self._check)

    def start(self) -> DoubleAllocationChecker:
        self.informer.start()
        wait_for(self.informer.has_synced, what="the claim checker to sync")
        return self

    def stop(self) -> None:
        self.informer.stop()

    def _check(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        self.events += 1
        holders: dict[tuple[str, str, str], str] = {}
        for claim in self.informer.store.objects():
            for r in ob.allocated_devices(claim):
                if r.get("adminAccess") or r.get("shareID"):
                    continue
                d = ob.device_id(r)
                if d in holders:
                    self.violations.append(f"{'/'.join(d)} held by {holders[d]} and {ob.key(claim)}")
                holders[d] = ob.key(claim)


@dataclass
class Env:
    kc: KubeCluster
    solver: Solver | None
    managers: list[Manager] = field(default_factory=list)
    checkers: list[DoubleAllocationChecker] = field(default_factory=list)

    # --- components ------------------------------------------------------------------------

    def client(self, identity: str = "test", *, faulty: bool = False, **kw: Any) -> kube.Kube:
        api = kube.api_client(kubeconfig=self.kc.kubeconfig, user_agent=f"dra-solver-controllers/{identity}")
        return FaultyKube(api, **kw) if faulty else kube.Kube(api, **kw)

    def manager(self, identity: str = "test", *, start: bool = True, kube_api: kube.Kube | None = None, **overrides: Any) -> Manager:
        options = fast_options(identity=identity, **overrides)
        client = self.solver.client if self.solver is not None and "scheduler" in options.enable else None
        m = Manager(kube_api or self.client(identity), options, solver_client=client, metrics=ControllerMetrics())
        self.managers.append(m)
        if start:
            m.start()
        return m

    def checker(self, *, watch_timeout: int = 60) -> DoubleAllocationChecker:
        c = DoubleAllocationChecker(self.client("checker"), watch_timeout=watch_timeout).start()
        self.checkers.append(c)
        return c

    # --- cluster contents (admin requests to the real server) -------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace", b.NS)
        out: dict[str, Any] = self.kc.create(collection(obj["kind"], ns), obj)
        return out

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace", b.NS)
        out: dict[str, Any] = self.kc.request("PUT", f"{collection(obj['kind'], ns)}/{obj['metadata']['name']}", obj)
        return out

    def patch(self, kind: str, name: str, patch: dict[str, Any], *, ns: str = b.NS, subresource: str = "") -> dict[str, Any]:
        path = f"{collection(kind, ns)}/{name}" + (f"/{subresource}" if subresource else "")
        out: dict[str, Any] = self.kc.request("PATCH", path, patch, content_type="application/merge-patch+json")
        return out

    def delete(self, kind: str, name: str, *, ns: str = b.NS, force: bool = False) -> None:
        query = "?gracePeriodSeconds=0" if force else ""
        try:
            self.kc.request("DELETE", f"{collection(kind, ns)}/{name}{query}")
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise

    def get(self, kind: str, name: str, ns: str = b.NS) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = self.kc.get(f"{collection(kind, ns)}/{name}")
            return out
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def objects(self, kind: str, ns: str = b.NS) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kc.get(collection(kind, ns))["items"]
        return items

    def node(self, name: str, *, cpu: str = "8", memory: str = "32Gi", labels: dict[str, str] | None = None) -> None:
        self.kc.node(name, cpu=cpu, memory=memory, labels=labels)
        # The TaintNodesByCondition admission plugin taints every new Node not-ready until a
        # kubelet reports in; no kubelet will, so lift it as the node lifecycle controller would.
        self.patch("Node", name, {"spec": {"taints": None}})

    def cluster(self, nodes: int = 3, gpus: int = 4, *, cpu: str = "8", slices: bool = True) -> list[str]:
        """A DeviceClass, ``nodes`` Nodes and (unless ``slices`` is false) a slice of ``gpus``
        devices on each; returns the node names."""
        self.create(b.device_class())
        names = [f"node-{chr(ord('a') + i)}" for i in range(nodes)]
        for name in names:
            self.node(name, cpu=cpu)
            if slices:
                self.create(b.gpu_slice(name, count=gpus))
        return names

    def wait_solver_sees(self, predicate: Callable[[Any], bool], timeout: float = 20.0) -> None:
        solver = self.solver
        assert solver is not None
        wait_for(lambda: predicate(solver.engine.source.snapshot()), timeout=timeout, what="the solver's inventory")

    # --- reading state --------------------------------------------------------------------------

    def pod(self, name: str, ns: str = b.NS) -> dict[str, Any] | None:
        return self.get("Pod", name, ns)

    def claims_of(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        names = [e["resourceClaimName"] for e in ob.status(pod).get("resourceClaimStatuses") or [] if e.get("resourceClaimName")]
        names += [pc["resourceClaimName"] for pc in ob.pod_claims(pod) if pc.get("resourceClaimName")]
        for name in names:
            claim = self.get("ResourceClaim", name, ob.namespace(pod))
            if claim is not None:
                out.append(claim)
        return out

    def bound(self, *names: str) -> bool:
        return all(ob.pod_node(self.pod(n) or {}) for n in names)

    def bound_pods(self, ns: str = b.NS) -> dict[str, str]:
        return {ob.name(p): ob.pod_node(p) for p in self.objects("Pod", ns) if ob.pod_node(p)}

    def allocated_devices(self, ns: str = b.NS) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        for claim in self.objects("ResourceClaim", ns):
            out.extend(ob.device_id(r) for r in ob.allocated_devices(claim))
        return out

    def events(self, reason: str, ns: str = b.NS) -> list[dict[str, Any]]:
        return [e for e in self.objects("Event", ns) if e.get("reason") == reason]

    def settle(self, timeout: float = 20.0) -> None:
        """Wait until every leading manager's queues are idle for a moment."""
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

    def stop(self) -> None:
        for m in self.managers:
            m.stop()
        for c in self.checkers:
            c.stop()
        if self.solver is not None:
            self.solver.stop()


def _clear_events(kc: KubeCluster) -> None:
    """Events outlive the objects they are about (the wipe keeps the default namespace): drop
    them so that a test counts only its own."""
    kc.request("DELETE", collection("Event"))


@pytest.fixture
def env(kube_cluster: KubeCluster) -> Iterator[Env]:
    _clear_events(kube_cluster)
    e = Env(kube_cluster, start_solver(kube_cluster.kubeconfig))
    yield e
    e.stop()


@pytest.fixture
def env_no_solver(kube_cluster: KubeCluster) -> Iterator[Env]:
    _clear_events(kube_cluster)
    e = Env(kube_cluster, None)
    yield e
    e.stop()
