"""benchmarks/cluster_scale.py measures every target of issue 16 in one run (at --quick sizes
here; the end-to-end row needs two control planes and is left to scheduler_compare's tests)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cluster_scale.py"


def test_every_target_but_end_to_end_is_measured_at_quick_sizes() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", "gpu,mig,unplaceable,replay,startup", "-o", "json"],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["target"] for r in rows] == ["gpu", "mig", "unplaceable", "replay", "startup", "startup"]
    for r in rows:
        assert r["now"] > 0 and r["before"] > 0 and r["ratio"] > 0, r
        assert r["met"] is None, "quick sizes are not the targets' sizes"
    assert {r["unit"] for r in rows} == {"pods/s", "s", "ms/claim"}
    assert "measuring replay ..." in done.stderr


def test_the_table_names_each_target_and_its_goal() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", "replay"], capture_output=True, text=True, timeout=300,
                          check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split()[:7] == ["TARGET", "BEFORE", "NOW", "UNIT", "RATIO", "GOAL", "MET"]
    assert row.startswith("replay") and "<= 5" in row and "20 nodes x 8 GPUs, 30 claims" in row


def test_an_unknown_target_is_refused() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--only", "gpu,speed"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--only: Unsupported value: speed: supported values: gpu, mig, unplaceable, replay, startup, e2e" in done.stderr


def test_a_measurement_that_fails_ends_the_run_with_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("cluster_scale", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "cluster_scale", script)  # its dataclasses look their module up
    spec.loader.exec_module(script)

    def broken(_sizes: object, _quick: bool) -> list[object]:
        raise RuntimeError("compare --replay exited 2:\n  error: something")

    monkeypatch.setitem(script.MEASURES, "replay", broken)
    monkeypatch.setattr(sys, "argv", ["cluster_scale.py", "--quick", "--only", "replay"])
    assert script.main() == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == "error: replay: compare --replay exited 2: error: something"
