"""Whole-cluster ``Schedule`` benchmark through the gRPC service.

Generates a cluster (``gpu``: 8 GPUs per node; ``mig``: 8 GPUs per node, each published whole
and as MIG-like partitions sharing counters), writes it as JSON files, starts
``dra-solver serve`` on it in a subprocess, and schedules one-claim pods one after another
(or from several client threads) with ``reserve=True``, as a scheduler would; ``batch`` > 1 sends
that many pods per ``ScheduleBatch`` call instead, and ``stream`` one ``ScheduleStream`` message
per pod (``window`` of them in flight on each stream). Reports pods/s, p50/p99 latency of a call
seen by the client (a batch's pods all wait for the whole call; a streamed pod's runs from its
message's sending to its answer), and the service's RSS (current and peak).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc

from dra_solver.service.client import Client, ScheduleStream
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.procstat import cpu_ticks, process_cpu_seconds
from dra_solver.service.python_cpu import allowed_cpus

DRIVER = "gpu.example.com"
PROFILES = (("1g.10gb", 1, 10, 7), ("2g.20gb", 2, 20, 3), ("3g.40gb", 3, 40, 2), ("4g.40gb", 4, 40, 1))
NODES_PER_FILE = 250


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def _slice(name: str, node: str, count: int, *, devices: list[dict[str, Any]] | None = None, counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": count}}
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def gpu_node(node: str) -> list[dict[str, Any]]:
    devices = [
        {"name": f"gpu-{g}", "attributes": {"model": {"string": "a100"}, "numa": {"int": g // 4}},
         "capacity": {"memory": {"value": "80Gi"}}}
        for g in range(8)
    ]
    return [_node(node), _slice(f"{node}-gpus", node, 1, devices=devices)]


def mig_node(node: str) -> list[dict[str, Any]]:
    counters = [{"name": f"gpu-{g}-counters", "counters": {"compute": {"value": "7"}, "memory": {"value": "80Gi"}}} for g in range(8)]
    slices = [_slice(f"{node}-counters", node, 3, counters=counters)]
    for part in range(2):
        devices = []
        for g in range(part * 4, part * 4 + 4):
            cs = f"gpu-{g}-counters"
            devices.append({"name": f"gpu-{g}", "attributes": {"profile": {"string": "whole"}, "gpu": {"int": g}},
                            "capacity": {"memory": {"value": "80Gi"}},
                            "consumesCounters": [{"counterSet": cs, "counters": {"compute": {"value": "7"}, "memory": {"value": "80Gi"}}}]})
            for profile, compute, mem, n in PROFILES:
                for k in range(n):
                    devices.append({"name": f"gpu-{g}-{profile.replace('.', '-')}-{k}",
                                    "attributes": {"profile": {"string": profile}, "gpu": {"int": g}},
                                    "capacity": {"memory": {"value": f"{mem}Gi"}},
                                    "consumesCounters": [{"counterSet": cs, "counters": {"compute": {"value": str(compute)}, "memory": {"value": f"{mem}Gi"}}}]})
        slices.append(_slice(f"{node}-gpus-{part}", node, 3, devices=devices))
    return [_node(node), *slices]


def write_cluster(directory: Path, *, nodes: int, shape: str) -> Path:
    """The cluster as JSON List files of NODES_PER_FILE nodes each (loaded one at a time)."""
    directory.mkdir(parents=True, exist_ok=True)
    make = mig_node if shape == "mig" else gpu_node
    (directory / "00-classes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [device_class()]}))
    width = len(str(nodes - 1))
    for start in range(0, nodes, NODES_PER_FILE):
        items: list[dict[str, Any]] = []
        for i in range(start, min(nodes, start + NODES_PER_FILE)):
            items.extend(make(f"node-{i:0{width}d}"))
        (directory / f"nodes-{start:06d}.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, separators=(",", ":")))
    return directory


def pod_claim(index: int, *, shape: str, rng: random.Random) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": DRIVER, "count": 1}
    if shape == "mig":
        gib = rng.choices((10, 20, 40, 80), weights=(4, 3, 2, 1))[0]
        request["selectors"] = [{"cel": {"expression": f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{gib}Gi')) >= 0"}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"pod-{index:06d}-gpu", "namespace": "bench", "uid": f"00000000-0000-4000-8000-{index:012d}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


@dataclass
class BenchResult:
    shape: str
    nodes: int
    pods: int
    placed: int
    concurrency: int
    seconds: float
    pods_per_second: float
    p50_ms: float
    p99_ms: float
    startup_seconds: float
    rss_mib: float
    peak_rss_mib: float
    solves: int
    cache_hits: int
    floor_ms: float = 0.0
    """An empty call's round trip (``_empty_call_ms``): one sequential client cannot exceed
    1000 / floor_ms calls per second, whatever the service does."""
    batch: int = 1
    """Pods per call: 1 = one Schedule call per pod, more = ScheduleBatch calls."""
    rpc: str = "Schedule"
    """How pods were sent: ``Schedule`` (a call per pod), ``ScheduleBatch`` (``batch`` pods per
    call) or ``ScheduleStream`` (a message per pod on one stream per client thread)."""
    server_cpu_ms: float = 0.0
    """The service's CPU time per pod over the timed loop (from /proc): steadier than pods/s on
    a machine whose speed varies, and what a pod costs the service whatever the client does."""
    window: int = 1
    """``ScheduleStream`` runs: messages each stream keeps in flight (sent, not answered yet);
    a pod's latency runs from its message's sending to its answer."""
    pin: str = "none"
    """:meth:`Pinning.describe`: ``python@1`` (serve's Python threads on CPU 1), ``serve@1``
    (the whole process) or ``none``."""
    serving_thread_cpus: tuple[int, ...] = ()
    """The CPUs serve's busiest thread (the one answering) could run on, read back from
    ``/proc`` at the end of the run."""
    client_cpus: tuple[int, ...] = ()
    """The CPUs the client was kept on (empty: any)."""


def rss_mib(pid: int) -> tuple[float, float]:
    """Resident and peak resident MiB of process ``pid`` (0 where /proc cannot tell)."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    except OSError:
        return 0.0, 0.0

    def mib(key: str) -> float:
        return float(fields.get(key, "0 kB").split()[0]) / 1024

    return mib("VmRSS"), mib("VmHWM")


PIN_MODES = ("python", "serve", "none")
"""``--pin``: serve's Python threads on a CPU of their own (``serve --python-cpu``), the whole
``serve`` process on one, or nothing pinned."""


@dataclass(frozen=True)
class Pinning:
    """Where a run puts ``serve`` and its own client. ``cpu``: the CPU given to serve's Python
    threads (``python``) or to the whole process (``serve``); ``client``: the others, where the
    client runs, so that serve's CPU is its own, as on a node where the scheduler runs
    elsewhere."""

    mode: str = "none"
    cpu: int | None = None
    client: tuple[int, ...] = ()

    @staticmethod
    def choose(mode: str) -> Pinning:
        """``mode`` on this machine: the last usable CPU for serve; nothing pinned with fewer
        than two CPUs (or where the platform cannot pin)."""
        if mode not in PIN_MODES:
            raise ValueError(f"--pin: not one of {', '.join(PIN_MODES)}: {mode!r}")
        usable = allowed_cpus()
        if mode == "none" or len(usable) < 2:
            return Pinning()
        return Pinning(mode, usable[-1], usable[:-1])

    def serve_flags(self) -> tuple[str, ...]:
        return ("--python-cpu", str(self.cpu)) if self.mode == "python" else ()

    def serve_cpus(self) -> tuple[int, ...]:
        """The CPUs the whole serve process is pinned to (empty: those of the thread starting
        it; with ``python``, serve pins its Python threads itself)."""
        return (self.cpu,) if self.mode == "serve" and self.cpu is not None else ()

    def describe(self) -> str:
        return f"{self.mode}@{self.cpu}" if self.cpu is not None else "none"


def thread_cpus(pid: int) -> list[tuple[int, tuple[int, ...]]]:
    """(CPU ticks used, CPUs it may run on) of each thread of process ``pid`` (Linux /proc;
    empty elsewhere)."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []
    out = []
    for tid in threads:
        ticks = cpu_ticks(Path(f"/proc/{pid}/task/{tid}/stat"))
        try:
            cpus = tuple(sorted(os.sched_getaffinity(tid)))
        except OSError:  # a thread that ended meanwhile
            continue
        if ticks is not None:
            out.append((ticks, cpus))
    return out


def busiest_thread_cpus(pid: int) -> tuple[int, ...]:
    """The CPUs the thread of ``pid`` that used the most CPU may run on: a busy service's
    serving thread."""
    threads = thread_cpus(pid)
    return max(threads)[1] if threads else ()


@contextmanager
def on_cpus(cpus: Sequence[int]) -> Iterator[None]:
    """This thread on ``cpus`` for the block (a child started meanwhile inherits them; other
    threads keep theirs); nothing when ``cpus`` is empty."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def serve_process(inventory: Path, *flags: str, cpus: Sequence[int] = ()) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``dra-solver serve`` on ``inventory`` in a child process (any free port, no metrics
    endpoint, ``flags`` added) for the block: the process and its gRPC target, once it
    listens (its inventory may still be loading). Stopped by SIGTERM (killed after 30 s).
    ``cpus``: the CPUs it may run on (all of its threads; empty: those of the calling thread)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))}
    cmd = [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(inventory), "--port", "0", "--metrics-port", "-1", *flags]
    # stderr to a file, not a pipe nobody reads: a long run's logs would fill the pipe and stall serve.
    with tempfile.TemporaryFile("w+") as errors:
        with on_cpus(cpus):
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().strip()
            if not first.startswith("grpc="):
                proc.wait(timeout=30)
                errors.seek(0)
                raise RuntimeError(f"serve did not start: {first} {errors.read()[-2000:]}".strip())
            yield proc, first.split()[0].split("=", 1)[1]
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User plus system CPU seconds of process ``pid`` so far (0 where /proc cannot tell);
    ``children``: plus its ended child processes' (serve parses a large YAML file in one)."""
    return process_cpu_seconds(pid, children=children) or 0.0


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_one(
    *, nodes: int, shape: str, pods: int, concurrency: int = 1, batch: int = 1, stream: bool = False, workdir: Path | None = None,
    seed: int = 1, window: int = 1, pin: Pinning = Pinning(),
) -> BenchResult:
    """``stream``: each pod one message of a ScheduleStream (one stream per client thread;
    ``batch`` must be 1), with up to ``window`` messages in flight on each stream. ``pin``:
    where serve and the client run."""
    if stream and batch != 1:
        raise ValueError("a stream sends one pod per message: batch must be 1")
    if window < 1 or (window > 1 and not stream):
        raise ValueError("window: a positive number of messages in flight, for streams only")
    with tempfile.TemporaryDirectory(prefix="dra-bench-") as tmp:
        cluster = write_cluster((workdir or Path(tmp)) / f"{shape}-{nodes}", nodes=nodes, shape=shape)
        started = time.perf_counter()
        flags = ("--reservation-ttl", "3600", "--poll-interval", "3600", "--max-concurrent", str(max(64, concurrency * 2)),
                 "--max-reservations-per-caller", str(max(2000, pods)), "--max-reservations", str(max(100_000, pods)))
        with serve_process(cluster, *flags, *pin.serve_flags(), cpus=pin.serve_cpus()) as (proc, target), on_cpus(pin.client):
            rng = random.Random(seed)
            # Made as they are sent, in order (memory does not grow with --pods).
            first = pod_claim(0, shape=shape, rng=rng)
            claims = itertools.chain([first], (pod_claim(i, shape=shape, rng=rng) for i in range(1, pods)))
            with Client(target, timeout=120) as client:
                client.wait_ready(timeout=900)  # serve listens before its inventory is loaded
                client.schedule([first], nodes=[], reserve=False)  # builds the node index
                startup = time.perf_counter() - started
                floor = _empty_call_ms(client)
                _warm_up(client, shape=shape, concurrency=concurrency, batch=batch, stream=stream, window=window)
                latencies: list[float] = []
                stats = {"placed": 0, "solves": 0, "cache_hits": 0}
                lock = threading.Lock()

                def record(dt: float, answers: Sequence[pb.ScheduleResponse]) -> None:
                    with lock:
                        latencies.append(dt)
                        for answer in answers:
                            stats["placed"] += 1 if answer.node else 0
                            stats["solves"] += answer.schedule_stats.solves
                            stats["cache_hits"] += answer.schedule_stats.cache_hits

                cpu0 = cpu_seconds(proc.pid)
                t0 = time.perf_counter()
                failures = _drive(client, claims, pods, record, concurrency=concurrency, batch=batch, stream=stream, window=window)
                seconds = time.perf_counter() - t0
                server_cpu = cpu_seconds(proc.pid) - cpu0
                serving_cpus = busiest_thread_cpus(proc.pid)
                if failures:
                    raise BenchFailed(f"{shape} x {nodes} nodes: {_describe(failures[0])}")
            rss, peak = rss_mib(proc.pid)
    return BenchResult(
        shape=shape, nodes=nodes, pods=pods, placed=stats["placed"], concurrency=concurrency, seconds=seconds,
        pods_per_second=pods / seconds if seconds else 0.0, p50_ms=_percentile(latencies, 0.5) * 1000,
        p99_ms=_percentile(latencies, 0.99) * 1000, startup_seconds=startup, rss_mib=rss, peak_rss_mib=peak,
        solves=stats["solves"], cache_hits=stats["cache_hits"], floor_ms=floor, batch=batch,
        server_cpu_ms=server_cpu / pods * 1000 if pods else 0.0,
        rpc="ScheduleStream" if stream else "ScheduleBatch" if batch > 1 else "Schedule", window=window, pin=pin.describe(),
        serving_thread_cpus=serving_cpus, client_cpus=pin.client,
    )


WARM_UP_PODS = 64
"""Pods sent before the timed loop, through the same calls, then released: the service's code
paths run a few dozen times before they are timed (Python specializes its bytecode as it runs),
as in a service that has been up for a while."""


def warm_up_claim(index: int, *, shape: str, rng: random.Random) -> dict[str, Any]:
    """A warm-up pod's claim: a timed pod's, but for its request's name, so that no answer the
    warm-up leaves in the service's caches serves a timed pod (their node states are solved
    again, as in a cold run)."""
    claim = pod_claim(index, shape=shape, rng=rng)
    claim["metadata"]["name"] = f"warm-up-{index:06d}"
    claim["metadata"]["uid"] = f"00000000-0000-4000-9000-{index:012d}"
    claim["spec"]["devices"]["requests"][0]["name"] = "warm-up"
    return claim


def _warm_up(client: Client, *, shape: str, concurrency: int, batch: int, stream: bool, window: int) -> None:
    """``WARM_UP_PODS`` pods through the timed loop's calls; what they reserved is released."""
    rng = random.Random(0)
    claims = iter([warm_up_claim(i, shape=shape, rng=rng) for i in range(WARM_UP_PODS)])
    held: list[str] = []
    lock = threading.Lock()

    def record(dt: float, answers: Sequence[pb.ScheduleResponse]) -> None:
        with lock:
            held.extend(a.reservation.id for a in answers if a.reservation.id)

    failures = _drive(client, claims, WARM_UP_PODS, record, concurrency=concurrency, batch=batch, stream=stream, window=window)
    for reservation in held:
        client.unreserve(reservation)
    if failures:
        raise BenchFailed(f"warm-up: {_describe(failures[0])}")


def _drive(
    client: Client, claims: Iterator[dict[str, Any]], pods: int, record: Callable[[float, Sequence[pb.ScheduleResponse]], None], *,
    concurrency: int, batch: int, stream: bool, window: int,
) -> list[BaseException]:
    """Schedule ``pods`` of ``claims`` from ``concurrency`` client threads (calls, batches or a
    stream each, as :func:`run_one` says), calling ``record`` with each call's or message's
    latency and answers; returns what failed (the run stops at the first failure)."""
    lock = threading.Lock()
    left = [pods]  # claims not taken yet
    failures: list[BaseException] = []

    def take(most: int) -> list[dict[str, Any]]:
        with lock:
            taken = list(itertools.islice(claims, min(most, left[0])))
            left[0] -= len(taken)
            return taken

    def work() -> None:
        while taken := take(batch):
            t = time.perf_counter()
            answers = _schedule_all(client, taken, batched=batch > 1)
            record(time.perf_counter() - t, answers)

    def work_stream(messages: ScheduleStream) -> None:
        # Up to ``window`` pods' messages in flight; answers come back in order.
        sent: deque[tuple[dict[str, Any], float, int]] = deque()
        while True:
            while len(sent) < window and (taken := take(1)):
                messages.send(_request(client, taken[0]))
                sent.append((taken[0], time.perf_counter(), 1))
            if not sent:
                return
            result = messages.receive()
            claim, t, attempt = sent.popleft()
            if result.status.code == _ABORTED and attempt < _ATTEMPTS:
                # A concurrent stream took its devices first: asked again, its time still running.
                messages.send(_request(client, claim))
                sent.append((claim, t, attempt + 1))
                continue
            if result.status.code:
                raise RuntimeError(f"ScheduleStream message failed: {result.status.message}")
            record(time.perf_counter() - t, [result.response])

    def worker() -> None:
        try:
            if stream:
                with client.schedule_stream(timeout=3600) as messages:
                    work_stream(messages)
            else:
                work()
        except BaseException as err:  # reported after the run, not as a thread's traceback
            with lock:
                failures.append(err)
                left[0] = 0

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return failures


class BenchFailed(Exception):
    """A benchmark run could not schedule its pods (the service refused a call)."""


def _describe(err: BaseException) -> str:
    if isinstance(err, grpc.RpcError):
        return f"{err.code().name}: {err.details()}"
    return f"{type(err).__name__}: {err}"


_ABORTED = grpc.StatusCode.ABORTED.value[0]
_ATTEMPTS = 20
"""Times a pod is asked for while concurrent callers keep taking its devices first."""


def _request(client: Client, claim: dict[str, Any]) -> pb.ScheduleRequest:
    """One pod's Schedule request, as the dra-solver scheduler sends it: reserve, and only the
    chosen node's verdict back."""
    return client.schedule_request([claim], reserve=True, ttl=3600, chosen_verdict_only=True)


def _schedule_all(client: Client, claims: list[dict[str, Any]], *, batched: bool, attempts: int = _ATTEMPTS) -> list[pb.ScheduleResponse]:
    """Schedule and reserve each claim's pod, as the dra-solver scheduler asks (the chosen
    node's verdict only): one call per pod, or one ScheduleBatch call for all of them. A pod
    whose devices a concurrent caller took first (ABORTED) is asked again."""
    pending, out = claims, []
    for _ in range(attempts):
        if not batched:
            try:
                out.append(client.schedule([pending[0]], reserve=True, ttl=3600, chosen_verdict_only=True))
                return out
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.ABORTED:
                    raise
                continue
        requests = [_request(client, c) for c in pending]
        again = []
        for claim, result in zip(pending, client.schedule_batch(requests), strict=True):
            if result.status.code == _ABORTED:
                again.append(claim)
            elif result.status.code:
                raise RuntimeError(f"ScheduleBatch item failed: {result.status.message}")
            else:
                out.append(result.response)
        pending = again
        if not pending:
            return out
    raise RuntimeError(f"{len(pending)} pods still conflicted with concurrent callers after {attempts} attempts")


def _empty_call_ms(client: Client, calls: int = 300) -> float:
    """The round trip of a call that does no work (gRPC health) from this client, median of
    ``calls``: what one sequential caller pays per call before the service does anything."""
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        client.health()
        times.append(time.perf_counter() - t)
    return _percentile(times, 0.5) * 1000


def format_results(results: Sequence[BenchResult]) -> str:
    header = ("shape", "nodes", "pods", "placed", "threads", "rpc", "batch", "pods/s", "p50 ms", "p99 ms", "startup s", "RSS MiB", "peak MiB", "solves",
              "empty call ms", "serve CPU ms/pod", "window", "pin")
    rows = [header] + [
        (r.shape, str(r.nodes), str(r.pods), str(r.placed), str(r.concurrency), r.rpc, str(r.batch), f"{r.pods_per_second:.0f}", f"{r.p50_ms:.1f}",
         f"{r.p99_ms:.1f}", f"{r.startup_seconds:.1f}", f"{r.rss_mib:.0f}", f"{r.peak_rss_mib:.0f}", str(r.solves), f"{r.floor_ms:.2f}",
         f"{r.server_cpu_ms:.2f}", str(r.window) if r.rpc == "ScheduleStream" else "-", r.pin)
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def results_json(results: Sequence[BenchResult]) -> str:
    return json.dumps([asdict(r) for r in results], indent=2)
