"""``dra-solver demo``: the end-to-end tour on the bundled demo cluster.

Starts ``dra-solver serve`` on ``examples/demo/cluster.yaml`` (a subprocess, as an operator
would run it; ``--in-process`` runs the server in this process instead), then, over real gRPC:

1. allocates a FirstAvailable claim on two nodes (the best subrequest each node can offer);
2. schedules a training claim and four notebooks across the nodes, reserving each answer;
3. asks where a claim that fits nowhere could go, and for the explanation on every node;
4. compares CP-SAT with the upstream-style backtracking allocator on the same questions;
5. streams MIG-sized claims onto a GPU node whose driver lists whole GPUs first, once with
   the ``first-fit`` policy (upstream's choice) and once with ``pack`` (the default);
6. scrapes a few metric values from the Prometheus endpoint;

and shuts the service down with SIGTERM. Finishes in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import grpc
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dra_solver.model import DraSolverError
from dra_solver.service import engine as e
from dra_solver.service.client import Client
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.commands.explain import render as render_explain
from dra_solver.service.files import one_line, read_objects
from dra_solver.service.inventory import FileSource
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from dra_solver.service.server import ServerDeps, Service

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo"
COMPARE = ROOT / "examples" / "compare"
REPLAY = ROOT / "examples" / "replay"
PLACEMENT_NODE = "node-0"
STEP = "demo.dra-solver.io/step"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default=str(DEMO / "cluster.yaml"), help="inventory to serve")
    parser.add_argument("--workload", default=str(DEMO / "workload.yaml"), help="claims to drive through the service")
    parser.add_argument("--in-process", action="store_true", help="run the server in this process")
    parser.add_argument("--backtracking-timeout", type=float, default=3.0, help=f"deadline for each backtracking comparison, at most {checks.MAX_SECONDS:g}")


def _say(text: str = "") -> None:
    print(text, flush=True)


class ServiceExited(Exception):
    """The child ``serve`` ended before it served (an inventory it cannot load, say): its own
    error line, shown as the demo's, exit 2."""


READY_SECONDS = 60.0
"""How long the child ``serve`` may take to load the demo inventory and say SERVING."""


def _drain(stream: IO[str], lines: deque[str]) -> None:
    """Keep the child's last stderr lines (and never let a full pipe stall it)."""
    for line in stream:
        lines.append(line.rstrip("\n"))


def _exited(proc: subprocess.Popen[str], lines: deque[str], reader: threading.Thread) -> ServiceExited:
    code = proc.wait()
    reader.join(timeout=5)
    errors = [line for line in lines if line.startswith("error: ")]
    if errors:
        return ServiceExited(errors[-1].removeprefix("error: "))
    last = next((line for line in reversed(lines) if line.strip()), "")
    return ServiceExited(f"the service exited with status {code}" + (f": {last}" if last else ""))


def _wait_ready(proc: subprocess.Popen[str], address: str, lines: deque[str], reader: threading.Thread) -> None:
    """Until the child serves; as soon as it exits, its own error (:class:`ServiceExited`)."""
    deadline = time.monotonic() + READY_SECONDS
    with Client(address, timeout=5) as probe:
        while proc.poll() is None:
            try:
                probe.wait_ready(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the service did not become ready in {READY_SECONDS:.0f} s") from None
    raise _exited(proc, lines, reader)


@contextmanager
def _subprocess_service(cluster: str) -> Iterator[tuple[str, str]]:
    cmd = [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", cluster, "--port", "0", "--metrics-port", "0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
    assert proc.stdout is not None and proc.stderr is not None
    lines: deque[str] = deque(maxlen=50)
    reader = threading.Thread(target=_drain, args=(proc.stderr, lines), name="serve-stderr", daemon=True)
    reader.start()
    try:
        first = proc.stdout.readline().strip()
        if not first.startswith("grpc="):
            raise _exited(proc, lines, reader)
        fields = dict(part.split("=", 1) for part in first.split())
        _say(f"$ {' '.join(['dra-solver', *cmd[3:]])}")
        _say(f"  {first}   (pid {proc.pid})")
        _wait_ready(proc, fields["grpc"], lines, reader)
        yield fields["grpc"], fields["metrics"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            _say(f"service stopped on SIGTERM (exit status {code})")


@contextmanager
def _inprocess_service(cluster: str) -> Iterator[tuple[str, str]]:
    engine = e.Engine(source=FileSource(cluster), reservations=ReservationStore(), metrics=Metrics())
    service = Service("127.0.0.1:0", ServerDeps(engine=engine), metrics_address="127.0.0.1", metrics_port=0).start()
    try:
        assert service.metrics_server is not None
        _say(f"in-process service: grpc=127.0.0.1:{service.port} metrics=127.0.0.1:{service.metrics_server.port}")
        yield f"127.0.0.1:{service.port}", f"127.0.0.1:{service.metrics_server.port}"
    finally:
        service.stop(5)
        _say("service stopped")


def run(args: argparse.Namespace) -> int:
    checks.check(args, {"--backtracking-timeout": checks.seconds()})
    start = time.perf_counter()
    try:
        workload = [c.to_api() for c in read_objects([args.workload])]
    except DraSolverError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    service = _inprocess_service if args.in_process else _subprocess_service
    try:
        with service(args.cluster) as (grpc_addr, metrics_addr):
            _tour(grpc_addr, metrics_addr, workload, backtracking_timeout=args.backtracking_timeout)
    except (ServiceExited, DraSolverError) as err:  # the inventory cannot be served: bad input
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except grpc.FutureTimeoutError:
        print("demo failed: the service did not become ready in time", file=sys.stderr)
        return 1
    except (grpc.RpcError, RuntimeError, OSError) as err:
        detail = f"{err.code().name}: {err.details()}" if isinstance(err, grpc.RpcError) else str(err)
        print(f"demo failed: {detail}", file=sys.stderr)
        return 1
    _say(f"demo finished in {time.perf_counter() - start:.1f} s")
    return 0


def _by_step(workload: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [c for c in workload if (c.get("metadata", {}).get("annotations") or {}).get(STEP) == step]


def _tour(grpc_addr: str, metrics_addr: str, workload: list[dict[str, Any]], *, backtracking_timeout: float) -> None:
    with Client(grpc_addr, timeout=30) as solver:
        solver.wait_ready(timeout=30)  # this channel's own connection (the service is SERVING already)
        inv = solver.inventory()
        objects = ", ".join(f"{n} {k}" for k, n in sorted(inv.objects.items()))
        _say(f"inventory {inv.source} (generation {inv.generation}): {inv.nodes} nodes; {objects}")

        _say("\n== 1. Allocate: a FirstAvailable claim on two nodes ==")
        for claim in _by_step(workload, "allocate"):
            for node in ("node-a", "node-b"):
                a = solver.allocate([claim], node)
                _report_allocation(f"{_name(claim)} on {node}", a)

        _say("\n== 2. Schedule across the cluster, reserving each answer ==")
        reservations = []
        for claim in _by_step(workload, "schedule"):
            s = solver.schedule([claim], reserve=True, ttl=120, pod=f"demo/{_name(claim)}-pod")
            if not s.node:
                _say(f"{_name(claim)}: {s.reason}")
                continue
            st = s.schedule_stats
            _say(f"{_name(claim)} -> {s.node} (score {s.score}; {st.nodes_evaluated}/{st.nodes_total} nodes evaluated, "
                 f"{st.solves} solves, {st.cache_hits} cache hits, {st.wall_seconds * 1000:.1f} ms)")
            for d in Client.devices(s):
                _say(f"    {d}")
            reservations.append(s.reservation.id)
        _say(f"reservations in flight: {solver.inventory().reservations}")

        _say("\n== 3. A claim that fits nowhere: Schedule, then Explain ==")
        for claim in _by_step(workload, "explain"):
            s = solver.schedule([claim])
            _say(f"{_name(claim)}: {s.reason or 'placed on ' + s.node}")
            for v in s.nodes:
                _say(f"    {v.node}: {v.reason}")
            for node in (v.node for v in s.nodes):
                x = solver.explain([claim], node)
                _say(render_explain(x))

        for rid in reservations:
            solver.unreserve(rid)
        _say(f"\nreleased {len(reservations)} reservations")

        _say("\n== 4. CP-SAT vs upstream-style backtracking (same questions, both allocators) ==")
        _compare(solver, workload, backtracking_timeout=backtracking_timeout)

        _say("\n== 5. Placement policies: a stream of claims on one MIG node, whole GPUs listed first ==")
        _placement(solver)

    _say("\n== 6. Metrics scraped from http://" + metrics_addr + "/metrics ==")
    for line in _metrics_summary(metrics_addr):
        _say("  " + line)


PLACEMENT_CLAIMS = 24


def _placement(solver: Any) -> None:
    """Each claim is allocated over gRPC against an inline inventory that holds the claims
    placed so far, once per policy: the order the driver lists devices in decides what
    first-fit gives a small claim; pack gives it the smallest partition that fits."""

    cluster = list(yaml.safe_load_all((REPLAY / "mig-whole-first.yaml").read_text(encoding="utf-8")))
    base = [
        o for o in cluster
        if o and (o.get("kind") == "DeviceClass" or (o.get("kind") == "Node" and o["metadata"]["name"] == PLACEMENT_NODE)
                  or (o.get("kind") == "ResourceSlice" and o["spec"].get("nodeName") == PLACEMENT_NODE))
    ]
    stream = yaml.safe_load((REPLAY / "mig-workload.yaml").read_text(encoding="utf-8"))["items"][:PLACEMENT_CLAIMS]
    for policy in ("first-fit", "pack"):
        placed: list[dict[str, Any]] = []
        start = time.perf_counter()
        for claim in stream:
            a = solver.allocate([claim], PLACEMENT_NODE, objects=base + placed, policy=policy)
            if a.allocated:
                placed.append({**claim, "status": {"allocation": json.loads(a.claims[0].allocation)}})
        devices = [r["device"] for c in placed for r in c["status"]["allocation"]["devices"]["results"]]
        whole = sum(1 for d in devices if "-" not in d.removeprefix("gpu-"))
        _say(f"{policy:9} placed {len(placed):2}/{len(stream)} claims ({whole} took a whole GPU) "
             f"in {time.perf_counter() - start:.1f} s")
    _say("(dra-solver compare --replay runs the whole stream on 4 nodes: docs/placement.md)")


def _name(claim: dict[str, Any]) -> str:
    return str(claim.get("metadata", {}).get("name", "?"))


def _report_allocation(label: str, a: Any) -> None:
    if not a.allocated:
        _say(f"{label}: not allocatable: {a.reason}")
        return
    gap = f", gap {a.stats.gap:.3f}" if a.stats.HasField("gap") else ""
    _say(f"{label}: score {a.score}, {a.stats.allocator} {a.stats.status}{gap} in {a.stats.wall_seconds * 1000:.1f} ms "
         f"({a.stats.variables} variables)")
    for d in Client.devices(a):
        _say(f"    {d}")


def _timed(call: Callable[[], Any]) -> tuple[Any, float, str]:
    start = time.perf_counter()
    try:
        result = call()
        return result, time.perf_counter() - start, ""
    except grpc.RpcError as err:
        return None, time.perf_counter() - start, f"{err.code().name}: {err.details()}"


def _compare(solver: Any, workload: list[dict[str, Any]], *, backtracking_timeout: float) -> None:
    rows: list[tuple[str, str, str, str]] = []
    questions: list[tuple[str, list[Any], list[Any], str]] = []
    for claim in _by_step(workload, "allocate"):
        questions.append((f"demo {_name(claim)}", [claim], [], "node-a"))
    for name in ("higher-score", "backtracking-explodes"):
        path = COMPARE / f"{name}.yaml"
        if not path.exists():
            continue
        objs = [x.to_api() for x in read_objects([str(path)])]
        claims = [x for x in objs if x.get("kind") == "ResourceClaim" and not (x.get("status") or {}).get("allocation")]
        rest = [x for x in objs if x not in claims]
        nodes = sorted({x["spec"]["nodeName"] for x in rest if x.get("kind") == "ResourceSlice" and x["spec"].get("nodeName")})
        questions.append((name, claims, rest, nodes[0] if nodes else ""))
    for label, claims, objects, node in questions:
        cells = []
        for allocator in ("cpsat", "backtracking"):
            timeout = backtracking_timeout if allocator == "backtracking" else 30.0
            a, seconds, err = _timed(lambda: solver.allocate(claims, node, objects=objects, allocator=allocator, timeout=timeout))  # noqa: B023
            if err:
                cells.append(f"{err.split(':')[0].lower()} after {seconds:.2f}s")
            elif not a.allocated:
                cells.append(f"unsatisfiable in {seconds * 1000:.0f} ms" + (f" ({a.stats.steps} steps)" if a.stats.steps else ""))
            else:
                steps = f", {a.stats.steps} steps" if a.stats.steps else ""
                cells.append(f"score {a.score} in {seconds * 1000:.0f} ms{steps}")
        rows.append((label, node, cells[0], cells[1]))
    header = ("question", "node", "cpsat", "backtracking")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for r in [header, *rows]:
        _say("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _metrics_summary(address: str) -> list[str]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: list[str] = []
    families = {f.name: f for f in text_string_to_metric_families(text)}
    calls = families.get("dra_solver_grpc_requests")
    if calls:
        counts: dict[str, float] = {}
        for s in calls.samples:
            if s.name.endswith("_total"):
                key = f"{s.labels['grpc_method']} {s.labels['grpc_status_code']}"
                counts[key] = counts.get(key, 0) + s.value
        out.append("dra_solver_grpc_requests_total: " + ", ".join(f"{k}={int(v)}" for k, v in sorted(counts.items())))
    latency = families.get("dra_solver_allocation_duration_seconds")
    if latency:
        by_rpc: dict[str, list[float]] = {}
        for s in latency.samples:
            if s.name.endswith("_sum") or s.name.endswith("_count"):
                acc = by_rpc.setdefault(s.labels["rpc"], [0.0, 0.0])
                acc[0 if s.name.endswith("_sum") else 1] += s.value
        out.append("dra_solver_allocation_duration_seconds (mean): " + ", ".join(
            f"{rpc}={total / n * 1000:.1f}ms over {int(n)}" for rpc, (total, n) in sorted(by_rpc.items()) if n))
    status = families.get("dra_solver_solves")
    if status:
        out.append("dra_solver_solves_total: " + ", ".join(
            f"{s.labels['allocator']}/{s.labels['status']}={int(s.value)}" for s in status.samples if s.name.endswith("_total")))
    for name in ("dra_solver_reservations_in_flight", "dra_solver_inventory_generation"):
        fam = families.get(name)
        if fam and fam.samples:
            out.append(f"{name}: {fam.samples[0].value:g}")
    objects = families.get("dra_solver_inventory_objects")
    if objects:
        out.append("dra_solver_inventory_objects: " + ", ".join(f"{s.labels['kind']}={int(s.value)}" for s in objects.samples))
    cache = families.get("dra_solver_cache_requests")
    if cache:
        hits = sum(s.value for s in cache.samples if s.name.endswith("_total") and s.labels.get("result") == "hit")
        total = sum(s.value for s in cache.samples if s.name.endswith("_total"))
        if total:
            out.append(f"schedule cache hit ratio: {hits / total:.2f} ({int(hits)}/{int(total)})")
    return out


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2)
