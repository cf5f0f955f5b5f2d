"""The command line: ``serve`` (first line, SIGTERM, refusals), the ``schedule``/``explain``
clients, and the end-to-end ``demo``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dra_solver.service.bench import serve_process, thread_cpus
from dra_solver.service.client import Client
from tests import builders as b
from tests.service.conftest import DEMO, ROOT, workload
from tests.service.conftest import run_cli as _cli


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(DEMO / "cluster.yaml"), "--port", "0", "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().strip()
    fields = dict(part.split("=", 1) for part in first.split())
    assert set(fields) == {"grpc", "metrics"}, first
    with Client(fields["grpc"], timeout=10) as client:
        client.wait_ready(timeout=60)  # the line comes before the inventory is loaded
    yield fields["grpc"], fields["metrics"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, "SIGTERM drains and exits cleanly"


def test_serve_prints_the_bound_ports_first(served: tuple[str, str]) -> None:
    grpc_addr, metrics_addr = served
    assert grpc_addr.startswith("127.0.0.1:") and int(grpc_addr.split(":")[1]) > 0
    assert metrics_addr.startswith("127.0.0.1:") and int(metrics_addr.split(":")[1]) > 0
    with Client(grpc_addr, timeout=10) as client:
        assert client.health() == "SERVING"
        assert client.inventory().source.startswith("file:")


def test_schedule_and_explain_commands(served: tuple[str, str], tmp_path: Path) -> None:
    grpc_addr, _ = served
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(b.SOLVER_TEST.named("cli-one").request("gpu").obj()))
    r = _cli("schedule", "--server", grpc_addr, str(one))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("node: ")
    assert "policy pack, " in r.stdout.splitlines()[0]
    r = _cli("schedule", "--server", grpc_addr, "--policy", "spread", str(one))
    assert "policy spread, " in r.stdout.splitlines()[0], r.stdout
    r = _cli("schedule", "--server", grpc_addr, "-o", "json", str(one))
    answer = json.loads(r.stdout)
    assert answer["node"]
    # Allocations are shown as the objects they are, never as base64.
    (claim,) = answer["claims"]
    assert claim["allocation"]["devices"]["results"][0]["driver"] == "gpu.example.com", claim
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(workload()["big-training"]))
    r = _cli("schedule", "--server", grpc_addr, str(big))
    assert r.returncode == 1 and "0/3 nodes are available" in r.stdout
    r = _cli("explain", "--server", grpc_addr, "--node", "node-a", str(big))
    assert r.returncode == 1, r.stderr  # does not fit: the reasons are the answer
    assert r.stdout.startswith("node node-a: the claims do not fit: ")
    assert "reasons" in r.stdout and "numa" in r.stdout
    r = _cli("explain", "--server", grpc_addr, "--node", "node-z", str(big))
    assert r.returncode == 2 and "NOT_FOUND" in r.stderr


def test_schedule_on_an_unknown_node_is_an_input_error_not_does_not_fit(served: tuple[str, str], tmp_path: Path) -> None:
    """Exit 1 means only "does not fit": a --node the service does not know is exit 2, even
    beside a node that fits (whose reservation, with --reserve, is released again)."""
    grpc_addr, _ = served
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(b.SOLVER_TEST.named("cli-unknown").request("gpu").obj()))
    with Client(grpc_addr, timeout=10) as client:
        held = client.inventory().reservations
    for extra in ([], ["--node", "node-a", "--reserve"]):
        r = _cli("schedule", "--server", grpc_addr, "--node", "node-zz", *extra, str(one))
        assert (r.returncode, r.stdout) == (2, ""), r.stdout + r.stderr
        assert r.stderr.splitlines() == ['error: --node: Not found: "node-zz": the service\'s inventory has no such node']
    with Client(grpc_addr, timeout=10) as client:
        assert client.inventory().reservations == held, "the reservation made beside the typo is released"
    # A known node where the claims do not fit is still exit 1.
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(workload()["big-training"]))
    r = _cli("schedule", "--server", grpc_addr, "--node", "node-a", str(big))
    assert r.returncode == 1, r.stdout + r.stderr


def test_client_commands_report_an_unreachable_service(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(b.SOLVER_TEST.named("x").request("gpu").obj()))
    r = _cli("schedule", "--server", "127.0.0.1:1", "--timeout", "2", str(one))
    assert r.returncode == 4 and "UNAVAILABLE" in r.stderr


def test_serve_refuses_plaintext_beyond_loopback() -> None:
    r = _cli("serve", "--inventory", str(DEMO / "cluster.yaml"), "--address", "0.0.0.0", "--port", "0")
    assert r.returncode == 2 and "--insecure" in r.stderr


def test_serve_reports_a_bad_inventory(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {driver: 3}\n")
    r = _cli("serve", "--inventory", str(bad), "--port", "0", "--metrics-port", "-1")
    assert r.returncode == 2 and str(bad) in r.stderr and "spec.driver" in r.stderr


def test_the_benchmarks_serve_process_says_why_serve_did_not_start() -> None:
    with pytest.raises(RuntimeError) as raised, serve_process(DEMO / "cluster.yaml", "--address", "0.0.0.0"):
        pytest.fail("serve listened in plaintext beyond loopback")
    assert "serve did not start" in str(raised.value) and "--insecure" in str(raised.value)
    with serve_process(DEMO / "cluster.yaml") as (proc, target):
        assert target.startswith("127.0.0.1:") and proc.poll() is None
    assert proc.returncode is not None, "stopped when the block ends"


def test_demo_runs_end_to_end() -> None:
    start = time.monotonic()
    r = _cli("demo", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for section in ("1. Allocate", "2. Schedule", "3. A claim that fits nowhere", "4. CP-SAT vs",
                    "5. Placement policies", "6. Metrics"):
        assert section in out
    assert "0/3 nodes are available" in out
    assert "first-fit placed  8/24 claims (8 took a whole GPU)" in out
    assert "pack      placed 24/24 claims (0 took a whole GPU)" in out
    assert "dra_solver_grpc_requests_total" in out
    assert "service stopped on SIGTERM (exit status 0)" in out
    assert time.monotonic() - start < 60


def test_bench_runs_through_the_service() -> None:
    r = _cli("bench", "--nodes", "20", "--shape", "gpu,mig", "--pods", "12", "--batch", "1,5", "-o", "json", timeout=180)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(row["shape"], row["nodes"], row["batch"], row["placed"]) for row in rows] == [
        ("gpu", 20, 1, 12), ("gpu", 20, 5, 12), ("mig", 20, 1, 12), ("mig", 20, 5, 12)
    ]
    assert all(row["pods_per_second"] > 0 and row["rss_mib"] > 0 for row in rows)
    # The service's own CPU per pod, read from its process (ticks of 10 ms: summed over the runs).
    assert sum(row["server_cpu_ms"] for row in rows) > 0 and all(0 <= row["server_cpu_ms"] < 1000 for row in rows)
    assert "12 pods, 5 per ScheduleBatch call" in r.stderr


def test_bench_gives_serve_s_python_threads_a_cpu_of_their_own_unless_told_otherwise() -> None:
    # Read back from the running serve: the thread that answered may run on that CPU only.
    usable = sorted(os.sched_getaffinity(0))
    args = ("bench", "--nodes", "10", "--shape", "gpu", "--pods", "12", "--batch", "stream", "-o", "json")
    r = _cli(*args, timeout=180)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["placed"] == 12
    if len(usable) < 2:
        assert row["pin"] == "none" and "nothing pinned: this command may use fewer than two CPUs" in r.stderr
        return
    last, others = usable[-1], usable[:-1]
    assert (row["pin"], row["serving_thread_cpus"], row["client_cpus"]) == (f"python@{last}", [last], others)
    assert f"serve's Python threads on CPU {last}, the client on CPU {','.join(map(str, others))}" in r.stderr
    whole = _cli(*args, "--pin", "serve", timeout=180)
    assert whole.returncode == 0, whole.stderr
    (row,) = json.loads(whole.stdout)
    assert (row["pin"], row["serving_thread_cpus"], row["client_cpus"]) == (f"serve@{last}", [last], others)
    free = _cli("bench", "--nodes", "10", "--shape", "gpu", "--pods", "12", "--pin", "none", timeout=180)
    assert free.returncode == 0, free.stderr
    header, row_text = free.stdout.splitlines()[-2:]
    assert header.split()[-1] == "pin" and row_text.split()[-1] == "none"
    assert "pinned" not in free.stderr and "on CPU" not in free.stderr


def test_serve_keeps_its_python_threads_on_one_cpu_and_leaves_grpc_s_own_threads_free() -> None:
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        pytest.skip("one CPU: nothing to choose between")
    cpu = usable[0]
    with serve_process(DEMO / "cluster.yaml", "--python-cpu", str(cpu)) as (proc, target):
        with Client(target, timeout=30) as client:
            client.wait_ready(timeout=60)
            for _ in range(20):  # the serving thread starts with the first call
                client.schedule([b.SOLVER_TEST.named("pinned").request("gpu").obj()], nodes=[], reserve=False)
        threads = thread_cpus(proc.pid)
    busiest = max(threads)
    assert busiest[1] == (cpu,), threads
    # gRPC's C threads (its network I/O) were started before the pinning and keep every CPU.
    assert any(cpus == tuple(usable) for _, cpus in threads), threads
    assert sum(1 for _, cpus in threads if cpus == (cpu,)) >= 3, threads  # main, gRPC's poller, a serving thread


def test_bench_streams_a_message_per_pod_and_counts_pods_that_fit_nowhere() -> None:
    r = _cli("bench", "--nodes", "10", "--shape", "gpu", "--pods", "12", "--batch", "stream", "--concurrency", "2", "-o", "json", timeout=180)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert (row["rpc"], row["batch"], row["concurrency"], row["placed"]) == ("ScheduleStream", 1, 2, 12)
    # The warm-up's pods ask with another request name: the timed pods' node states are solved
    # again, not answered from what the warm-up left in the caches.
    assert row["solves"] >= 1
    assert "12 pods, one ScheduleStream message each" in r.stderr
    # Three messages in flight on each stream: the same pods placed, each timed from its sending.
    ahead = _cli("bench", "--nodes", "10", "--shape", "gpu", "--pods", "12", "--batch", "stream", "--window", "3", "-o", "json", timeout=180)
    assert ahead.returncode == 0, ahead.stderr
    (row,) = json.loads(ahead.stdout)
    assert (row["rpc"], row["window"], row["placed"]) == ("ScheduleStream", 3, 12) and row["p50_ms"] > 0
    assert "12 pods, one ScheduleStream message each, 3 in flight" in ahead.stderr
    # 2 nodes x 8 GPUs hold 16 pods: the rest find no node, and the run still ends cleanly. All 16
    # are placed: the warm-up (more pods than fit) gave back everything it held.
    full = _cli("bench", "--nodes", "2", "--shape", "gpu", "--pods", "30", "-o", "json", timeout=180)
    assert full.returncode == 0, full.stderr
    assert json.loads(full.stdout)[0]["placed"] == 16
