"""A hostile caller against a real ``dra-solver serve`` process (issue 15): the YAML alias bomb
is refused at once, and thousands of calls with distinct feature gates or allocator strings
leave the process's memory (/proc/PID/status) and /metrics bounded.

``DRA_SOLVER_BOUND_CALLS`` sets the number of calls (10,000 by default, as the issue's
reproducer); calls go out in concurrent batches so the run stays short on two cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_solver.model.features import GATE_NAMES
from dra_solver.service.client import Client
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.gen.drasolver.v1 import allocation_pb2_grpc as pb_grpc
from tests import builders as b
from tests.service.conftest import DEMO

CALLS = int(os.environ.get("DRA_SOLVER_BOUND_CALLS", "10000"))
BATCH = 48
"""Calls in flight at once: under serve's --max-concurrent (64)."""
MIB = 1024 * 1024

ALIAS_BOMB = (
    'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    + "".join(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))
).encode()
"""488 bytes of YAML that expand to 9**9 strings (the issue's reproducer)."""


@dataclass
class Served:
    proc: subprocess.Popen[str]
    target: str
    metrics: str

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def metrics_text(self) -> str:
        body: bytes = urllib.request.urlopen(self.metrics, timeout=30).read()
        return body.decode()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(DEMO / "cluster.yaml"), "--port", "0", "--metrics-port", "0",
         "--grace", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # grpc=127.0.0.1:PORT metrics=127.0.0.1:PORT
    fields = dict(part.split("=", 1) for part in line.split())
    assert "grpc" in fields, line
    with Client(fields["grpc"], timeout=10) as client:
        client.wait_ready(timeout=60)  # the line comes before the inventory is loaded
    yield Served(proc, fields["grpc"], f"http://{fields['metrics']}/metrics")
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


@pytest.fixture(scope="module")
def stub(served: Served) -> Iterator[Any]:
    channel = grpc.insecure_channel(served.target)
    grpc.channel_ready_future(channel).result(timeout=60)
    yield pb_grpc.AllocationServiceStub(channel)  # type: ignore[no-untyped-call]
    channel.close()


def _claim_bytes(name: str = "x", cls: str = "gpu.example.com") -> bytes:
    return json.dumps(b.SOLVER_TEST.named(name).request("gpu", cls=cls).obj()).encode()


def _codes(stub: Any, requests: list[pb.AllocateRequest]) -> list[grpc.StatusCode]:
    """Send in concurrent batches; the status code of each."""
    codes: list[grpc.StatusCode] = []
    for start in range(0, len(requests), BATCH):
        futures = [stub.Allocate.future(r, timeout=60) for r in requests[start:start + BATCH]]
        for f in futures:
            err = f.exception()
            codes.append(grpc.StatusCode.OK if err is None else err.code())
    return codes


def test_the_alias_bomb_is_refused_at_once(served: Served, stub: Any) -> None:
    assert stub.Allocate(pb.AllocateRequest(claims=[_claim_bytes()], node="node-a"), timeout=60).allocated  # warm
    baseline = served.rss()
    for _ in range(20):
        with pytest.raises(grpc.RpcError) as info:
            # The bound: answered within 100 ms (else DEADLINE_EXCEEDED).
            stub.Allocate(pb.AllocateRequest(claims=[ALIAS_BOMB], node="node-a"), timeout=0.1)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert served.rss() - baseline < 100 * MIB


@pytest.mark.slow
def test_distinct_gates_and_allocators_leave_memory_and_metrics_bounded(served: Served, stub: Any) -> None:
    names = sorted(GATE_NAMES)
    warm = [pb.AllocateRequest(claims=[_claim_bytes(cls="no-such-class")], node="node-a",
                               options=pb.SolveOptions(feature_gates=",".join(f"{n}={b}" for n in names), allocator=a))
            for b in ("true", "false") for a in ("", "bogus")]
    _codes(stub, warm * 50)
    baseline, metrics_before = served.rss(), len(served.metrics_text())

    requests = []
    for i in range(CALLS):
        if i % 2:
            # A distinct allocator string each call: refused, and never a metric label.
            requests.append(pb.AllocateRequest(claims=[_claim_bytes()], node="node-a", options=pb.SolveOptions(allocator=f"alloc-{i}")))
        else:
            # Distinct gate settings (every combination, then spelled differently): each call
            # gets as far as the CEL environment and the solver, which then finds no such class.
            j = i // 2
            combo = ",".join(f"{n}={'true' if (j >> k) & 1 else 'false'}" for k, n in enumerate(names))
            spelled = combo + "," * (j >> len(names))
            requests.append(pb.AllocateRequest(claims=[_claim_bytes(cls="no-such-class")], node="node-a",
                                               options=pb.SolveOptions(feature_gates=spelled)))
    codes = _codes(stub, requests)
    assert set(codes[1::2]) == {grpc.StatusCode.INVALID_ARGUMENT}
    assert set(codes[0::2]) == {grpc.StatusCode.FAILED_PRECONDITION}

    grown = served.rss() - baseline
    text = served.metrics_text()
    assert grown < 100 * MIB, f"RSS grew by {grown / MIB:.0f} MiB over {CALLS} calls"
    assert "alloc-" not in text
    # Counters grow digits, nothing else: no new series.
    assert len(text) - metrics_before < 4096, (metrics_before, len(text))


def test_sigterm_stops_within_grace(served: Served, stub: Any) -> None:
    # Last in this module: the process is stopped here.
    start = time.monotonic()
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(30) == 0
    assert time.monotonic() - start < 1 + 10
