"""benchmarks/grpc_floor.py runs as its docstring says: both servers and a bare stream timed, from their own CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_grpc_floor_benchmark_times_both_servers() -> None:
    # /proc counts CPU in 10 ms ticks: 200 echo calls (about 15 ms of a server's CPU) could
    # read as none at all on a busy machine.
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grpc_floor.py"), "--calls", "1000", "-o", "json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert list(rows) == ["bare grpcio server", "dra-solver serve", "bare grpcio stream", "bare stream, 2 in flight",
                          "bare stream, 2 in flight, 250 us work"]
    for row in rows.values():
        assert row["wall_ms"] > 0 and row["client_cpu_ms"] > 0
        assert 0 < row["server_cpu_ms"] < 50, "read from the server process, not this one"
        assert abs(row["calls_per_second"] * row["wall_ms"] / 1000 - 1) < 0.01
    # The work runs in the server's handler (250 us a message): its CPU per message shows it.
    worked, echoed = rows["bare stream, 2 in flight, 250 us work"], rows["bare stream, 2 in flight"]
    assert worked["server_cpu_ms"] > echoed["server_cpu_ms"] + 0.1
    refused = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grpc_floor.py"), "--calls", "0"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "--calls: must be at least 1" in refused.stderr
    refused = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grpc_floor.py"), "--work-us", "0"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "--work-us: must be in (0, 1000000], got 0" in refused.stderr
