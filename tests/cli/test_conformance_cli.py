"""Every upstream conformance case through ``dra-solver allocate --validate=ignore``.

Upstream's test objects never went through an API server (some repeat slice names, some have
request names validation rejects), which is what ``--validate=ignore`` is for. Each case is
written out as the files a user would give: the Node, classes, slices and claims, plus one
allocated claim per device upstream's harness marks in use. The CLI's outcome (exit status)
must be upstream's, the error must say what upstream's says, and the backtracking allocator
(the port of upstream's search) must print upstream's devices. In process (``main()``) to keep
it fast; tests/cli/test_allocate_cli.py runs the real subprocess.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver import cli
from dra_solver.model import objects as o
from dra_solver.model.decode import decode_all
from dra_solver.model.features import GATE_NAMES
from tests import builders as b
from tests.conformance.cases import Case, case_paths, compare_results, error_matches, load_case

CONFORMANCE = case_paths("conformance")
EXIT = {"allocated": 0, "unsatisfiable": 1, "error": 2}


def _in_use_claims(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Upstream's already-allocated devices as allocated claims (what a cluster would show)."""
    results: list[dict[str, Any]] = []
    for d in raw.get("allocatedDevices") or []:
        results.append({"request": "in-use", "driver": d["driver"], "pool": d["pool"], "device": d["device"]})
    for d in raw.get("allocatedSharedDevices") or []:
        results.append({"request": "in-use", "driver": d["driver"], "pool": d["pool"], "device": d["device"],
                        "shareID": d["shareID"]})
    for i, d in enumerate(raw.get("allocatedCapacity") or []):
        # Consumed capacity always belongs to a shared allocation.
        results.append({"request": "in-use", "driver": d["driver"], "pool": d["pool"], "device": d["device"],
                        "shareID": f"capacity-{i}", "consumedCapacity": d["capacity"]})
    in_use = b.claim("in-use", ns="in-use", cls="in-use").request("in-use", count=None)
    return [in_use.named(f"in-use-{i}").allocated(result).obj() for i, result in enumerate(results)]


def _files(case: Case, tmp_path: Path) -> list[str]:
    raw = case.raw
    cluster = [raw["node"], *(raw.get("classes") or []), *(raw.get("slices") or []),
               *(raw.get("taintRules") or []), *_in_use_claims(raw)]
    claims = raw.get("claims") or []
    paths = [tmp_path / "cluster.json", tmp_path / "claims.yaml"]
    paths[0].write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster}))
    # An input must hold objects: a case without claims gives only the cluster.
    if claims:
        paths[1].write_text(yaml.safe_dump_all(claims))
    return [str(p) for p in paths if p.exists()]


def _gates(case: Case) -> str:
    features = case.raw.get("features") or {}
    return ",".join(f"{name}={'true' if features.get(name) else 'false'}" for name in GATE_NAMES)


@pytest.mark.parametrize("path", CONFORMANCE, ids=[p.stem for p in CONFORMANCE])
def test_upstream_case_through_the_cli(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = load_case(path)
    node = case.raw["node"]["metadata"]["name"]
    args = ["allocate", "--validate=ignore", "--allocator", "backtracking", "--timeout", "30",
            "--feature-gates", _gates(case), "--node", node, "-o", "json", *_files(case, tmp_path)]
    code = cli.main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == EXIT[case.outcome], f"upstream: {case.outcome} {case.error!r}; we: exit {code}: {err}"
    if case.outcome == "error":
        assert error_matches(case, err), f"want {case.error!r}, got {err!r}"
        assert len(err.strip().splitlines()) == 1, err
    if case.outcome == "allocated":
        claims = [c for c in decode_all(json.loads(out)["items"], validate="ignore") if isinstance(c, o.ResourceClaim)]
        results = [c.status.allocation for c in claims if c.status and c.status.allocation]
        assert len(results) == len(claims)
        assert not compare_results(case, results)


def test_all_223_cases_are_here() -> None:
    assert len(CONFORMANCE) == 223
