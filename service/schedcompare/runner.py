"""Run one scheduler on one workload, on a fresh control plane, and record what it did.

``kube-scheduler``: upstream v1.37.2 with its default plugins (DynamicResources on) schedules
the pods (default scheduler name); kube-controller-manager also runs upstream's
``resourceclaim-controller``, which creates the pods' claims from their templates.
``dra-solver``: ``dra-solver serve --kubeconfig`` and ``dra-solver controllers`` run as real
processes and schedule pods with ``schedulerName: dra-solver``.

Both sides get the same client rate limits (high, as scheduler_perf sets them: the
comparison is of schedulers, not of client-side throttling), and both record their Events
(``Scheduled``, ``FailedScheduling``), as each does by default. No kubelet runs: a pod counts as
bound once ``spec.nodeName`` is set.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_solver.service.localcluster.cluster import dra_solver_command
from dra_solver.service.localcluster.controlplane import (
    KCM_CONTROLLERS,
    Binaries,
    ControlPlane,
    ControlPlaneError,
)
from dra_solver.service.schedcompare import split
from dra_solver.service.schedcompare.kubehttp import Client, HTTPError, Watch
from dra_solver.service.schedcompare.workloads import (
    INIT_NAMESPACE,
    NAMESPACE,
    POD_LABEL,
    SIZE_LABEL,
    Workload,
)

SCHEDULERS = ("kube-scheduler", "dra-solver")
CLIENT_QPS = 1000
RESOURCE = "/apis/resource.k8s.io/v1"


def scheduler_config(kubeconfig: Path) -> str:
    """kube-scheduler's defaults, with scheduler_perf's client rate limits."""
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {kubeconfig}\n  qps: {CLIENT_QPS}\n  burst: {CLIENT_QPS}\n"
        "leaderElection:\n  leaderElect: false\n"
    )


@dataclass
class Hold:
    """Devices a claim held from ``start`` (allocation seen) to ``end`` (allocation cleared or
    claim deleted; None: still held when the run ended)."""

    devices: tuple[str, ...]
    subrequests: tuple[str, ...]
    start: float
    end: float | None = None


@dataclass
class PodOutcome:
    name: str
    size: str
    created: float = 0.0
    bound_at: float | None = None
    node: str = ""
    devices: tuple[str, ...] = ()
    """``driver/pool/device`` of the pod's claim, sorted."""
    subrequests: tuple[str, ...] = ()
    """The ``request`` of each allocation result (``gpu/h100`` for a FirstAvailable choice)."""
    unschedulable: str = ""
    """The last ``PodScheduled=False`` message seen (empty: none)."""
    queued: float = 0.0
    """A backlog run: when the scheduler started (the pod waited for it, not in its queue)."""
    deleted: bool = False
    holds: list[Hold] = field(default_factory=list)
    """Each allocation of the pod's claim as the claim watch saw it, in order (one, unless a
    scheduler took an allocation back and allocated again)."""

    @property
    def latency(self) -> float | None:
        return None if self.bound_at is None else max(0.0, self.bound_at - max(self.created, self.queued))

    @property
    def placed_at(self) -> float | None:
        """When the pod's devices were taken: its claim's allocation, else its bind."""
        return self.holds[-1].start if self.holds else self.bound_at

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "node": self.node, "devices": list(self.devices),
                "subrequests": list(self.subrequests), "unschedulable": self.unschedulable,
                "latencySeconds": self.latency}


@dataclass
class SideResult:
    scheduler: str
    workload: str
    pods: dict[str, PodOutcome]
    capacity: int | None
    first_created: float = 0.0
    last_bound: float = 0.0
    timed_out: bool = False
    double_allocated: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    allocated_claims: int = 0
    setup_seconds: float = 0.0
    last_created: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds per process (API server, etcd, the scheduler's) from the first creation to
    the end of the run (:mod:`.split`)."""
    cpu_window: float = 0.0
    """Seconds the CPU figures cover: from the first creation (a backlog run: the scheduler's
    start) until every pod settled."""
    split: dict[str, Any] = field(default_factory=dict)
    """dra-solver: its scheduler's time per bound pod by part (:func:`.split.scheduler_split`)."""
    events: dict[str, int] = field(default_factory=dict)
    """Events about the workload's pods by reason once the run settled: what each side's
    components recorded (events are best effort: a recorder that falls behind drops some,
    and a faster scheduler must not look faster for it)."""
    scheduler_started: float = 0.0
    """A backlog run: when the scheduler was started, after every pod and claim existed
    (0: the scheduler ran while the pods were created)."""

    @property
    def backlog(self) -> bool:
        return self.scheduler_started > 0.0

    @property
    def window_start(self) -> float:
        """Where pods/s counts from: the first creation, or in a backlog run the scheduler's start
        (its start-up and informer sync count against it)."""
        return self.scheduler_started if self.backlog else self.first_created

    @property
    def first_bound(self) -> float | None:
        return min((p.bound_at for p in self.pods.values() if p.bound_at is not None), default=None)

    @property
    def started_after(self) -> float | None:
        """A backlog run: seconds from the first creation to the scheduler's start."""
        return self.scheduler_started - self.first_created if self.backlog else None

    @property
    def first_bind_after(self) -> float | None:
        """A backlog run: seconds from the scheduler's start to its first bind (start-up and
        informer sync); None when it bound nothing."""
        first = self.first_bound
        return first - self.scheduler_started if self.backlog and first is not None else None

    @property
    def bound(self) -> int:
        return sum(1 for p in self.pods.values() if p.bound_at is not None)

    @property
    def seconds(self) -> float:
        return max(0.0, self.last_bound - self.window_start) if self.bound else 0.0

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0

    def latency_quantile(self, q: float) -> float | None:
        values = sorted(p.latency for p in self.pods.values() if p.latency is not None)
        if not values:
            return None
        if len(values) == 1:
            return values[0]
        return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]

    def placed_by_size(self) -> dict[str, tuple[int, int]]:
        """size -> (bound, pods); FirstAvailable sizes are split by the subrequest used."""
        out: dict[str, list[int]] = {}
        for pod in self.pods.values():
            total = out.setdefault(pod.size, [0, 0])
            total[1] += 1
            if pod.bound_at is not None:
                total[0] += 1
                chosen = sorted({s.split("/", 1)[1] for s in pod.subrequests if "/" in s})
                if chosen:
                    out.setdefault(f"{pod.size}={'+'.join(chosen)}", [0, 0])[0] += 1
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}

    def to_json(self) -> dict[str, Any]:
        p50, p99 = self.latency_quantile(0.5), self.latency_quantile(0.99)
        return {
            "scheduler": self.scheduler, "pods": len(self.pods), "bound": self.bound,
            "schedulable": self.capacity, "seconds": round(self.seconds, 3),
            "podsPerSecond": round(self.pods_per_second, 2),
            "bindLatencySeconds": {"p50": None if p50 is None else round(p50, 3),
                                   "p99": None if p99 is None else round(p99, 3)},
            # "size=subrequest" entries split a size's placements by the FirstAvailable choice.
            "placedBySize": {k: {"placed": v[0], "pods": v[1]} if v[1] else {"placed": v[0]}
                             for k, v in self.placed_by_size().items()},
            "allocatedClaims": self.allocated_claims, "doubleAllocated": self.double_allocated,
            "problems": self.problems, "timedOut": self.timed_out, "setupSeconds": round(self.setup_seconds, 1),
            # How long creating the pods took: when it is close to "seconds", the API server, not
            # the scheduler, set the pace.
            "creationSeconds": round(max(0.0, self.last_created - self.first_created), 3),
            "cpuSeconds": dict(sorted(self.cpu.items())), "cpuWindowSeconds": self.cpu_window,
            "split": self.split, "backlog": self.backlog, "events": dict(sorted(self.events.items())),
            # A backlog run: the scheduler's start after the first creation, and its first bind
            # after its start (start-up and informer sync).
            "schedulerStartedSeconds": None if (started := self.started_after) is None else round(started, 3),
            "firstBindSeconds": None if (first := self.first_bind_after) is None else round(first, 3),
        }


# --- the cluster --------------------------------------------------------------------------


def _parallel(fn: Callable[[Any], object], items: Iterable[Any], workers: int = 4) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(fn, items):
            pass


def create_cluster(client: Client, cp: ControlPlane, workload: Workload) -> None:
    """Namespaces, Nodes (with status), DeviceClasses, ResourceSlices, templates, claims in use."""
    for ns in (NAMESPACE, INIT_NAMESPACE):
        client.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def node(obj: dict[str, Any]) -> None:
        client.request("POST", "/api/v1/nodes", {k: v for k, v in obj.items() if k != "status"})
        name = obj["metadata"]["name"]
        client.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": obj["status"]},
                       content_type="application/merge-patch+json")
        # Admission taints a new Node not-ready; the node lifecycle controller (not run here)
        # lifts the taint once the node reports Ready, as it just did.
        client.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}},
                       content_type="application/merge-patch+json")

    _parallel(node, workload.nodes)

    def cluster_scoped(obj: dict[str, Any]) -> None:
        plural = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices"}[obj["kind"]]
        client.request("POST", f"{RESOURCE}/{plural}", obj)

    _parallel(cluster_scoped, workload.cluster)

    def namespaced(obj: dict[str, Any]) -> None:
        ns = obj["metadata"]["namespace"]
        plural = {"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims"}[obj["kind"]]
        client.request("POST", f"{RESOURCE}/namespaces/{ns}/{plural}", {k: v for k, v in obj.items() if k != "status"})
        if "status" in obj:
            client.request("PATCH", f"{RESOURCE}/namespaces/{ns}/{plural}/{obj['metadata']['name']}/status",
                           {"status": obj["status"]}, content_type="application/merge-patch+json")

    _parallel(namespaced, workload.namespaced)
    cp.wait_for_service_account(NAMESPACE, "default", timeout=120)


# --- the schedulers -----------------------------------------------------------------------


class _Companion:
    """One dra-solver process, its output in a log file."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log
        self.metrics = ""
        """host:port of its /metrics, once known."""
        with log.open("ab") as out:
            self.popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, env=env)

    def wait_line(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                for line in self.log.read_text(errors="replace").splitlines():
                    if line.startswith(prefix):
                        return line
            if self.popen.poll() is not None:
                raise ControlPlaneError(f"{self.name} exited (code {self.popen.returncode}); see {self.log}")
            time.sleep(0.1)
        raise ControlPlaneError(f"{self.name} printed no '{prefix}' line within {timeout:.0f} s; see {self.log}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def _companion_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def start_controllers(cp: ControlPlane, grpc_addr: str, *, name: str = "dra-solver controllers", log: str = "controllers.log",
                      enable: Iterable[str] = (), policy: str = "", timeout: float = 120.0) -> _Companion:
    """``dra-solver controllers`` (``enable``: only those; default all), its /metrics address known."""
    args = [*dra_solver_command(), "controllers", f"--kubeconfig={cp.kubeconfig}", f"--solver={grpc_addr}",
            "--metrics-port=0"]  # Events on: kube-scheduler records its own
    if enable:
        args.append(f"--enable={','.join(enable)}")
    if policy:
        args.append(f"--policy={policy}")
    ctl = _Companion(name, args, cp.dir / log, _companion_env())
    try:
        port = ctl.wait_line("metrics=", timeout).split()[0].rsplit(":", 1)[1]
    except BaseException:
        ctl.stop()
        raise
    ctl.metrics = f"127.0.0.1:{port}"
    return ctl


def start_dra_solver(cp: ControlPlane, *, policy: str = "", enable: Iterable[str] = (),
                     timeout: float = 120.0) -> tuple[list[_Companion], str]:
    """``dra-solver serve`` and ``dra-solver controllers`` (``enable``: only those); the
    processes and serve's gRPC address."""
    started: list[_Companion] = []
    try:
        solver = _Companion("dra-solver serve", [*dra_solver_command(), "serve", f"--kubeconfig={cp.kubeconfig}",
                                                 "--port=0", "--metrics-port=0"], cp.dir / "solver.log", _companion_env())
        started.append(solver)
        grpc_addr = solver.wait_line("grpc=", timeout).split()[0].split("=", 1)[1]
        started.append(start_controllers(cp, grpc_addr, enable=enable, policy=policy, timeout=timeout))
    except BaseException:
        for proc in reversed(started):
            proc.stop()
        raise
    return started, grpc_addr


def _short_name(process: str) -> str:
    """``dra-solver serve`` -> ``dra-solver-serve`` (a key of the CPU table)."""
    return process.replace(" ", "-")


def _scheduler_name(scheduler: str) -> str:
    return "dra-solver" if scheduler == "dra-solver" else "default-scheduler"


def _canary(client: Client, scheduler: str, timeout: float) -> None:
    """A pod without claims, bound once the scheduler is live; deleted before the run."""
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "canary", "namespace": NAMESPACE},
                           "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}],
                                    "schedulerName": _scheduler_name(scheduler)}}
    client.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    deadline = time.monotonic() + timeout
    while not client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/canary")["spec"].get("nodeName"):
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{scheduler} bound no pod within {timeout:.0f} s")
        time.sleep(0.2)
    client.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/canary?gracePeriodSeconds=0")


# --- driving the pods ----------------------------------------------------------------------


class _Tracker:
    """What the watch saw, per pod (thread-safe)."""

    def __init__(self, pods: dict[str, PodOutcome]) -> None:
        self.pods = pods
        self.lock = threading.Lock()
        self.last_change = time.monotonic()
        self.bound_order: list[str] = []
        self.claimed: set[str] = set()
        """Pods whose every claim exists (named in their status, as the claim controller does)."""

    def on_event(self, kind: str, pod: dict[str, Any], now: float) -> None:
        name = pod.get("metadata", {}).get("name", "")
        with self.lock:
            out = self.pods.get(name)
            if out is None or kind == "DELETED":
                return
            wanted = len(pod.get("spec", {}).get("resourceClaims") or [])
            if len(pod.get("status", {}).get("resourceClaimStatuses") or []) >= wanted:
                self.claimed.add(name)
            node = pod.get("spec", {}).get("nodeName") or ""
            if node and out.bound_at is None:
                out.bound_at = now
                out.node = node
                self.bound_order.append(name)
                self.last_change = now
            for cond in pod.get("status", {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    if not out.unschedulable:
                        self.last_change = now
                    out.unschedulable = str(cond.get("message") or cond.get("reason") or "unschedulable")

    def settled(self) -> bool:
        with self.lock:
            return all(p.bound_at is not None or p.unschedulable for p in self.pods.values())

    def claimed_count(self) -> int:
        with self.lock:
            return len(self.claimed)


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def _device_key(result: dict[str, Any]) -> str:
    return f"{result['driver']}/{result['pool']}/{result['device']}"


class _ClaimTracker:
    """When each pod's claim (found by its owner reference) was allocated, to which devices,
    and when it let them go: the timeline the report reads to tell what each side's cluster
    looked like when it placed a pod. Shares the pod tracker's lock."""

    def __init__(self, tracker: _Tracker) -> None:
        self.pods = tracker.pods
        self.lock = tracker.lock

    def on_event(self, kind: str, claim: dict[str, Any], now: float) -> None:
        owner = next((r.get("name", "") for r in (claim.get("metadata") or {}).get("ownerReferences") or []
                      if r.get("kind") == "Pod"), "")
        results = [] if kind == "DELETED" else _results(claim)
        with self.lock:
            out = self.pods.get(owner)
            if out is None:
                return
            current = out.holds[-1] if out.holds and out.holds[-1].end is None else None
            devices = tuple(sorted(_device_key(r) for r in results))
            if current is not None and devices != current.devices:
                current.end = now
                current = None
            if results and current is None:
                out.holds.append(Hold(devices, tuple(sorted(r["request"] for r in results)), now))


def drive(client: Client, workload: Workload, scheduler: str, *, timeout: float, settle: float = 3.0,
          progress: Callable[[str], None] | None = None,
          start_scheduler: Callable[[], None] | None = None,
          exited: Callable[[], str] | None = None) -> SideResult:
    """Create the workload's pods and watch them until each is bound or unschedulable.
    ``start_scheduler``: a backlog run: every pod is created and every claim made from its
    templates before this is called; pods/s and bind latency count from that moment on.
    ``exited``: "" while the scheduler runs, else why not (the run stops with a
    ``ControlPlaneError`` rather than waiting out its time limit)."""
    pods = {s.name: PodOutcome(s.name, s.size) for s in workload.pods}
    result = SideResult(scheduler, workload.name, pods, workload.capacity)
    tracker = _Tracker(pods)
    pods_path, claims_path = f"/api/v1/namespaces/{NAMESPACE}/pods", f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    watches = [Watch(client, path, client.request("GET", f"{path}?limit=1")["metadata"]["resourceVersion"], handler)
               for path, handler in ((pods_path, tracker.on_event), (claims_path, _ClaimTracker(tracker).on_event))]
    for watch in watches:
        watch.start()
    name = _scheduler_name(scheduler)
    objects = {s.name: workload.pod_object(s, name) for s in workload.pods}
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"

    def create(pod_name: str) -> None:
        pods[pod_name].created = time.monotonic()  # before the request: bind can race its answer
        client.request("POST", path, objects[pod_name])

    start = time.monotonic()
    deadline = start + timeout
    result.first_created = start
    next_report = start + 10
    try:
        if start_scheduler is not None:
            _backlog(list(objects), create, tracker, deadline, scheduler, progress, start)
            start_scheduler()
            result.scheduler_started = time.monotonic()
            with tracker.lock:
                for pod in pods.values():
                    pod.queued = result.scheduler_started
            if progress:
                progress(f"{scheduler}: scheduler started {result.scheduler_started - start:.0f} s after the first "
                         f"creation, {len(tracker.bound_order)} bound before")
        if workload.churn is None:
            creator = threading.Thread(target=_parallel, args=(create, [] if start_scheduler else list(objects)),
                                       daemon=True)
            creator.start()
            while time.monotonic() < deadline:
                time.sleep(0.25)
                now = time.monotonic()
                if not creator.is_alive() and tracker.settled() and now - tracker.last_change >= settle:
                    break
                gone = exited() if exited is not None else ""
                if gone:
                    raise ControlPlaneError(f"{scheduler}: {gone}")
                if progress and now >= next_report:
                    next_report = now + 10
                    progress(f"{scheduler}: {len(tracker.bound_order)}/{len(pods)} bound after {now - start:.0f} s")
            else:
                result.timed_out = True
            creator.join(60)
        else:
            _churn(client, workload, tracker, create, deadline, result, progress, start)
    finally:
        time.sleep(0.5)  # the last releases of a churn run reach the claim watch
        for watch in watches:
            watch.stop()
    result.problems.extend(w.error for w in watches if w.error)
    result.events = _events_by_reason(client, pods)
    bound = [p.bound_at for p in pods.values() if p.bound_at is not None]
    result.last_bound = max(bound) if bound else start
    result.last_created = max((p.created for p in pods.values()), default=start)
    return result


def _events_by_reason(client: Client, pods: Iterable[str], *, quiet: float = 1.0, timeout: float = 15.0) -> dict[str, int]:
    """Events about the workload's ``pods`` by reason, once their count held still for
    ``quiet`` seconds (recorders send in the background, behind the binds) or after
    ``timeout``."""
    path = f"/api/v1/namespaces/{NAMESPACE}/events"
    names = set(pods)
    deadline = time.monotonic() + timeout
    last: dict[str, int] | None = None
    while True:
        items = client.request("GET", path).get("items") or []
        about = (e for e in items if (e.get("involvedObject") or {}).get("name") in names)
        counts = dict(sorted(collections.Counter(str(e.get("reason") or "") for e in about).items()))
        if counts == last or time.monotonic() >= deadline:
            return counts
        last = counts
        time.sleep(quiet)


def _backlog(names: list[str], create: Callable[[str], None], tracker: _Tracker, deadline: float, scheduler: str,
             progress: Callable[[str], None] | None, start: float) -> None:
    """Create every pod, then wait until each has its claims (no scheduler runs yet)."""
    _parallel(create, names)
    if progress:
        progress(f"{scheduler}: {len(names)} pods created in {time.monotonic() - start:.0f} s; waiting for their claims")
    next_report = time.monotonic() + 10
    while (claimed := tracker.claimed_count()) < len(names):
        now = time.monotonic()
        if now > deadline:
            raise ControlPlaneError(f"{scheduler}: {claimed} of {len(names)} pods had their claims before the run's "
                                    "time limit (backlog run: the claim controller made the rest too slowly)")
        if progress and now >= next_report:
            next_report = now + 10
            progress(f"{scheduler}: {claimed}/{len(names)} pods have their claims")
        time.sleep(0.25)


def _churn(client: Client, workload: Workload, tracker: _Tracker, create: Callable[[str], None], deadline: float,
           result: SideResult, progress: Callable[[str], None] | None, start: float) -> None:
    assert workload.churn is not None
    lifetime, window = workload.churn.lifetime, workload.churn.window
    order = [s.name for s in workload.pods]
    pods = tracker.pods
    created = 0
    deleted: set[str] = set()
    next_report = start + 10
    deleter = ThreadPoolExecutor(2)
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            with tracker.lock:
                expired = [n for n in tracker.bound_order if n not in deleted and now - (pods[n].bound_at or now) >= lifetime]
                waiting = sum(1 for n in order[:created] if pods[n].bound_at is None)
                done = created == len(order) and len(tracker.bound_order) == len(order)
            if done:
                break
            for n in expired:
                deleted.add(n)
                pods[n].deleted = True
                deleter.submit(client.request, "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{n}?gracePeriodSeconds=0")
            while created < len(order) and waiting < window:
                create(order[created])
                created += 1
                waiting += 1
            if progress and now >= next_report:
                next_report = now + 10
                progress(f"{result.scheduler}: {len(tracker.bound_order)}/{len(order)} bound, "
                         f"{len(deleted)} deleted after {now - start:.0f} s")
            time.sleep(0.05)
        else:
            result.timed_out = True
    finally:
        deleter.shutdown(wait=True)


# --- what the server holds at the end ----------------------------------------------------------


def collect(client: Client, result: SideResult) -> None:
    """Devices per pod, claims allocated, and every device allocated twice."""
    claims = client.list_all(f"{RESOURCE}/resourceclaims")
    by_key = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in claims}
    holders: dict[str, list[str]] = {}
    for key, claim in sorted(by_key.items()):
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        result.allocated_claims += 1
        for r in (allocation.get("devices") or {}).get("results") or []:
            if r.get("adminAccess") or r.get("shareID"):
                continue  # admin access and shared (consumable) capacity may repeat a device
            holders.setdefault(_device_key(r), []).append(key)
    result.double_allocated = [f"{dev} in {', '.join(keys)}" for dev, keys in sorted(holders.items()) if len(keys) > 1]
    # Over the run too: pods deleted as others arrive (steady state) left no claim to read at
    # the end, but the claim watch saw each allocation and its release.
    result.double_allocated.extend(overlapping_holds(result.pods.values()))
    for pod in client.list_all(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={POD_LABEL}%3Dtrue"):
        out = result.pods.get(pod["metadata"]["name"])
        if out is None:
            continue
        node = pod["spec"].get("nodeName") or ""
        if node and out.bound_at is None:
            out.bound_at = time.monotonic()  # missed by the watch: counts, with a late bind time
            result.problems.append(f"pod {out.name}: bound to {node} but its bind event was not seen")
        out.node = node or out.node
        statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
        claim = by_key.get(f"{NAMESPACE}/{statuses[0].get('resourceClaimName')}") if statuses else None
        results = _results(claim or {})
        out.devices = tuple(sorted(_device_key(r) for r in results))
        out.subrequests = tuple(sorted(r["request"] for r in results))
        if results and not out.holds:
            result.problems.append(f"pod {out.name}: its claim's allocation was not seen by the claim watch")
        if node and not results:
            result.problems.append(f"pod {out.name}: bound to {node} without an allocated claim")
        if claim is not None and (claim["metadata"].get("labels") or {}).get(SIZE_LABEL) != out.size:
            result.problems.append(f"pod {out.name}: claim {claim['metadata']['name']} lacks its template's labels")
    for out in result.pods.values():
        if out.deleted and out.holds and not out.devices:  # gone with its pod: what the watch saw
            out.devices, out.subrequests = out.holds[-1].devices, out.holds[-1].subrequests


def overlapping_holds(pods: Iterable[PodOutcome]) -> list[str]:
    """Devices two pods' claims held at the same time (by the claim watch's clock)."""
    by_device: dict[str, list[tuple[float, float, str]]] = {}
    for pod in pods:
        for hold in pod.holds:
            for dev in hold.devices:
                by_device.setdefault(dev, []).append((hold.start, math.inf if hold.end is None else hold.end, pod.name))
    out = []
    for dev, spans in sorted(by_device.items()):
        spans.sort()
        held_until, holder = -math.inf, ""
        for start, end, name in spans:
            if start < held_until:
                out.append(f"{dev} held by {holder} and {name} at the same time")
            if end > held_until:
                held_until, holder = end, name
    return out


# --- one side, start to end ---------------------------------------------------------------------


@dataclass
class LiveSide:
    """A control plane with the workload's cluster and one scheduler, live (in a backlog run:
    ready to start, by :meth:`start_scheduler`)."""

    cp: ControlPlane
    client: Client
    companions: list[_Companion]
    """dra-solver's processes (none on kube-scheduler's side: the control plane runs it)."""
    scheduler_name: str
    """What the pods' ``spec.schedulerName`` says."""
    setup_seconds: float
    deferred: Callable[[], _Companion | None] | None = None
    """A backlog run: starts the scheduler (dra-solver's process, None for kube-scheduler's)."""

    def scheduler_exited(self) -> str:
        """"" while the scheduler's processes run (or before a backlog run starts them); else
        which one exited, and how."""
        for companion in self.companions:
            if companion.popen.poll() is not None:
                return f"{companion.name} exited (code {companion.popen.returncode}); see {companion.log}"
        return self.cp.exited("kube-scheduler")

    def start_scheduler(self) -> None:
        """Start the scheduler a backlog run held back (nothing when it already runs)."""
        if self.deferred is not None:
            started = self.deferred()
            self.deferred = None
            if started is not None:
                self.companions.append(started)


# dra-solver's side of a backlog run: claims and taints first, the scheduler in its own process.
BACKLOG_FIRST = ("claim", "eviction")
BACKLOG_LATER = ("scheduler",)


@contextlib.contextmanager
def live_side(workload: Workload, scheduler: str, bins: Binaries, *, upstream_controllers: Iterable[str] = ("resourceclaim-controller",),
              policy: str = "", keep_logs: Path | None = None, progress: Callable[[str], None] | None = None,
              backlog: bool = False) -> Iterator[LiveSide]:
    """Fresh control plane, the workload's cluster, ``scheduler`` alone and live (a canary pod
    bound); everything stopped on the way out. On kube-scheduler's side kube-controller-manager
    also runs ``upstream_controllers``. ``keep_logs``: the control plane's logs copied there
    first. ``backlog``: the scheduler is not started (no canary): the claim controllers run,
    and :meth:`LiveSide.start_scheduler` starts it. An API error becomes a
    ``ControlPlaneError`` naming the scheduler."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler: Unsupported value: {scheduler!r}: supported values: {', '.join(SCHEDULERS)}")
    upstream = scheduler == "kube-scheduler"
    t0 = time.monotonic()
    cp = ControlPlane(
        bins,
        controllers=(*KCM_CONTROLLERS, *upstream_controllers) if upstream else KCM_CONTROLLERS,
        controller_manager_args=(f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={CLIENT_QPS}"),
    )
    companions: list[_Companion] = []
    client: Client | None = None
    side: LiveSide | None = None
    try:
        cp.start()
        client = Client(cp.url, cp.ssl_context())
        if progress:
            progress(f"{scheduler}: creating {len(workload.nodes)} nodes and their devices")
        create_cluster(client, cp, workload)
        deferred: Callable[[], _Companion | None] | None = None
        if upstream:
            def kube_scheduler() -> None:
                cp.start_scheduler(config=scheduler_config(cp.scheduler_kubeconfig))
            if backlog:
                deferred = kube_scheduler
            else:
                kube_scheduler()
        else:
            companions, grpc_addr = start_dra_solver(cp, policy=policy, enable=BACKLOG_FIRST if backlog else ())
            if backlog:
                def deferred() -> _Companion:
                    return start_controllers(cp, grpc_addr, name="dra-solver scheduler", log="scheduler.log",
                                             enable=BACKLOG_LATER, policy=policy)
        if not backlog:
            _canary(client, scheduler, timeout=180)
        side = LiveSide(cp, client, companions, _scheduler_name(scheduler), time.monotonic() - t0, deferred)
        yield side
    except HTTPError as err:
        raise ControlPlaneError(f"{scheduler}: {err}") from err
    finally:
        for proc in reversed(side.companions if side is not None else companions):
            proc.stop()
        if client is not None:
            client.close()
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for log in cp.dir.glob("*.log"):
                with contextlib.suppress(OSError):
                    shutil.copy(log, keep_logs / f"{workload.name}-{scheduler}-{log.name}")
        cp.stop()


def run_side(workload: Workload, scheduler: str, bins: Binaries, *, timeout: float = 600.0, policy: str = "",
             keep_logs: Path | None = None, progress: Callable[[str], None] | None = None,
             backlog: bool = False) -> SideResult:
    """Fresh control plane, the workload's cluster, ``scheduler`` alone, the pods; the outcome.
    ``backlog``: every pod and its claims exist before the scheduler starts (see :func:`drive`)."""
    if backlog and workload.churn is not None:
        raise ValueError(f"backlog: Forbidden: workload {workload.name} deletes pods as others arrive; "
                         "a backlog run needs every pod created first")
    with live_side(workload, scheduler, bins, policy=policy, keep_logs=keep_logs, progress=progress,
                   backlog=backlog) as side:
        if progress:
            progress(f"{scheduler}: ready after {side.setup_seconds:.0f} s; creating {len(workload.pods)} pods"
                     + (" before the scheduler starts" if backlog else ""))
        meters: list[split.CpuMeter] = []

        def start() -> None:
            """The scheduler (when held back), then the CPU meter over every process."""
            side.start_scheduler()
            meter = split.CpuMeter({**side.cp.pids(), **{_short_name(c.name): c.popen.pid for c in side.companions}})
            meter.start()
            meters.append(meter)

        if not backlog:
            start()
        result = drive(side.client, workload, scheduler, timeout=timeout, progress=progress,
                       start_scheduler=start if backlog else None, exited=side.scheduler_exited)
        if meters:
            meters[0].stop()
            result.cpu, result.cpu_window = meters[0].seconds, meters[0].wall
        result.setup_seconds = side.setup_seconds
        scrapes = []
        for companion in side.companions:
            if companion.metrics:
                try:
                    scrapes.append(split.scrape(companion.metrics))
                except OSError as err:
                    result.problems.append(f"{companion.name}: metrics not read: {err}")
        if scrapes:
            try:
                result.split = split.scheduler_split(scrapes, result.bound)
            except ValueError as err:
                result.problems.append(f"dra-solver: metrics not read: {err}")
        collect(side.client, result)
        return result
