"""benchmarks/steady_stream.py runs as its docstring says: one row per block, every pod placed
although the pods outnumber the GPUs (reservations expire and their devices are reused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_steady_stream_benchmark_runs_past_the_cluster_s_size() -> None:
    # 10 nodes x 8 GPUs = 80 GPUs, 200 pods: placed only if expired reservations free theirs.
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "steady_stream.py"), "--nodes", "10", "--pods", "200", "--ttl", "0.02",
         "--block", "80", "-o", "json"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [b["through"] for b in report["blocks"]] == [80, 160, 200]
    assert [b["pods"] for b in report["blocks"]] == [80, 80, 40]
    assert all(b["pods_per_second"] > 0 and b["p50_ms"] <= b["p99_ms"] <= b["max_ms"] for b in report["blocks"])
    assert "200/200 pods" in done.stderr
    # serve's Python threads had a CPU of their own, as under `dra-solver bench` (read back from
    # its busiest thread, the one answering).
    usable = sorted(os.sched_getaffinity(0))
    pinned = [usable[-1]] if len(usable) >= 2 else usable
    assert report["pin"] == (f"python@{usable[-1]}" if len(usable) >= 2 else "none")
    assert all(b["serving_thread_cpus"] == pinned for b in report["blocks"])


def test_bad_flags_are_refused() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "steady_stream.py"), "--ttl", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--ttl: must be positive" in done.stderr
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "steady_stream.py"), "--pin", "cpu0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "argument --pin: invalid choice: 'cpu0'" in done.stderr
