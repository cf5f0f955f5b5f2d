"""``dra-solver compare`` end to end: tables, JSON, the HTML report, and the replay contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def dra_solver(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dra_solver.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_generated_examples_are_current(tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import generate
    finally:
        sys.path.remove(str(EXAMPLES))
    for path, docs in generate.outputs().items():
        fresh = tmp_path / path.name
        generate.dump(fresh, docs)
        assert fresh.read_text() == path.read_text(), f"{path} is stale: run python examples/generate.py"


def test_compare_table_agree() -> None:
    result = dra_solver("compare", "--quiet", str(EXAMPLES / "compare" / "agree.yaml"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:4] == ["SCENARIO", "NODE", "CPSAT", "BACKTRACKING"]
    assert "agree" in lines[1] and "allocated" in lines[1] and "yes" in lines[1]


def test_compare_json_higher_score() -> None:
    result = dra_solver("compare", "--quiet", "-o", "json", str(EXAMPLES / "compare" / "higher-score.yaml"))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    (row,) = doc["rows"]
    assert row["agree"] is True
    assert row["cpsat"]["verdict"] == row["backtracking"]["verdict"] == "allocated"
    assert row["cpsat"]["score"] > row["backtracking"]["score"]
    assert row["devicesDiffer"] is True


def test_compare_unsatisfiable_search_effort() -> None:
    result = dra_solver(
        "compare", "--quiet", "-o", "json", str(EXAMPLES / "compare" / "backtracking-explodes.yaml")
    )
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["rows"]
    assert row["cpsat"]["verdict"] == "unsatisfiable"
    assert row["backtracking"]["verdict"] in ("unsatisfiable", "timeout")
    assert row["backtracking"]["steps"] > 1000


def test_compare_html_report(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    result = dra_solver(
        "compare", "--quiet", "--report", str(report),
        str(EXAMPLES / "compare" / "agree.yaml"), str(EXAMPLES / "compare" / "higher-score.yaml"),
    )
    assert result.returncode == 0, result.stderr
    page = report.read_text()
    assert page.startswith("<!doctype html>")
    assert "Per-node comparison" in page and "higher-score" in page and "agree" in page
    assert page.count("<svg") >= 2  # time vs size, score difference
    # Self-contained: nothing is loaded from elsewhere (namespace URIs in SVG are not loads).
    for external in ("src=\"http", "href=\"http", "<script src", "<link "):
        assert external not in page


def test_compare_unknown_policy_exit_2() -> None:
    result = dra_solver("compare", "--quiet", "--policy", "tightest", str(EXAMPLES / "compare" / "agree.yaml"))
    assert result.returncode == 2
    assert 'policy: Unsupported value: "tightest"' in result.stderr and "Traceback" not in result.stderr
    assert not result.stdout


def test_compare_bad_input_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ResourceClaim\nspec: [1, 2\n")
    result = dra_solver("compare", str(bad))
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_replay_contract_json(tmp_path: Path) -> None:
    workload = tmp_path / "workload.yaml"
    items = json.loads(json.dumps(__import__("yaml").safe_load((EXAMPLES / "replay" / "gpu8-workload.yaml").read_text())))
    items["items"] = items["items"][:12]
    workload.write_text(json.dumps(items))
    report = tmp_path / "replay.html"
    result = dra_solver(
        "compare", "--replay", str(EXAMPLES / "replay" / "gpu8-cluster.yaml"), "--workload", str(workload),
        "-o", "json", "--report", str(report),
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc["replay"]) >= {"backtracking", "cpsat-first-fit", "cpsat-pack", "cpsat-spread"}
    assert doc["replay"]["cpsat-pack"]["policy"] == "pack"
    for entry in doc["replay"].values():
        assert entry["claims"] == 12
        assert sum(size["claims"] for size in entry["placedBySize"].values()) == 12
        assert sum(size["placed"] for size in entry["placedBySize"].values()) == entry["placed"]
        assert 0 <= entry["placed"] <= 12
        assert entry["firstFailure"] is None or isinstance(entry["firstFailure"], int)
        assert entry["secondsPerClaim"] >= 0
    assert isinstance(doc["bestFit"]["placed"], int)
    # The row is what it is, smallest-first backtracking; bestFit stays for scripts.
    assert doc["smallestFirstBacktracking"]["placed"] == doc["bestFit"]["placed"]
    assert doc["smallestFirstBacktracking"]["claims"] == 12
    assert "replay backtracking: 12/12 claims" in result.stderr  # progress
    page = report.read_text()
    assert "Claims placed over the replay" in page and "Placed by size" in page
    assert "smallest-first backtracking" in page and "bestFit" not in page
