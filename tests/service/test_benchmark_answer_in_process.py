"""benchmarks/answer_in_process.py runs as its docstring says: every pod placed, one row per
``--between`` value, and bad sizes refused with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "answer_in_process.py"


def test_the_in_process_answer_benchmark_places_every_pod_per_row() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--nodes", "4", "--pods", "24", "--between", "0,50", "-o", "json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["between"] for r in rows] == [0, 50]
    for row in rows:
        assert row["placed"] == 24, "the warm-up gave its GPUs back: 4 nodes x 8 hold the 24"
        assert row["us_per_pod"] > 0
    assert "24 pods on 4 gpu nodes, 50 dicts round-tripped between calls" in done.stderr


def test_the_in_process_answer_benchmark_refuses_bad_sizes() -> None:
    for args, message in ((["--pods", "0"], "--pods: must be in [1, 40000]"), (["--between", "x"], "--between: not a comma-separated"),
                          (["--between", "-1"], "--between: each value must be in [0, 100000]"), (["--nodes", "0"], "--nodes: must be in")):
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
