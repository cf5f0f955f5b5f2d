"""ruff, mypy --strict and the import-layer contracts run as part of the suite.

They run as subprocesses of the same interpreter so that CI and a developer see the same
verdicts as running the tools by hand.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_clean() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = _run(sys.executable, "-m", "mypy", "--strict", "-p", "dra_solver")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports (import-linter) is not installed; install dra-solver[test]")
    result = _run(exe)
    assert result.returncode == 0, result.stdout + result.stderr
