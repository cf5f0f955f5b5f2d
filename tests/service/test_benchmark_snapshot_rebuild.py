"""benchmarks/snapshot_rebuild.py runs as its docstring says and prints one row per size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_snapshot_rebuild_benchmark_runs() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "snapshot_rebuild.py"), "--nodes", "20,40", "--repeat", "3"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split()[:2] == ["NODES", "CLAIMS"] and header.endswith("PUBLISH MS")
    assert [row.split()[0] for row in rows] == ["20", "40"]
    assert all(row.split()[4].endswith("x") and float(row.split()[5]) > 0 for row in rows)
