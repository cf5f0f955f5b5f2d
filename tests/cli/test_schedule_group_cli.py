"""``dra-solver schedule --group NAMESPACE/PODGROUP FILE...`` offline on the docs' example files:
the issue's JSON shape exactly, and every exit status (0 placed, 1 not placeable, 2 invalid
input, 3 deadline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.cli import main

ROOT = Path(__file__).resolve().parents[2]
GANGS = ROOT / "examples" / "gangs"
CLUSTER, PODGROUP = str(GANGS / "cluster.yaml"), str(GANGS / "podgroup.yaml")
PODS = [str(GANGS / "a-small.yaml"), str(GANGS / "b-big.yaml")]
AFTER_A_SMALL = str(GANGS / "one-at-a-time" / "a-small-on-n-c.yaml")
RACK = "topology.example.com/rack"


def schedule(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["schedule", "--group", *args])
    out, err = capsys.readouterr()
    return code, out, err


def devices(claim: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["pool"], d["device"]) for d in claim["status"]["allocation"]["devices"]["results"]]


def test_placed_json_has_the_issue_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = schedule(capsys, "default/train", CLUSTER, PODGROUP, *PODS, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert {"podGroup", "placed", "domain", "pods", "sharedClaims"} <= set(doc)
    assert doc["podGroup"] == "default/train" and doc["placed"] is True
    assert doc["domain"] == {"key": RACK, "value": "r2"}
    # The joint placement: the small pod on the small node, so the big one fits on the big node.
    assert [(p["name"], p["node"]) for p in doc["pods"]] == [("a-small", "n-d"), ("b-big", "n-c")]
    for pod in doc["pods"]:
        assert set(pod) == {"name", "node", "claims"}
        (claim,) = pod["claims"]
        assert claim["kind"] == "ResourceClaim" and claim["metadata"]["name"].startswith(f"{pod['name']}-gpu-")
        assert {pool for pool, _ in devices(claim)} == {pod["node"]}
    assert len(devices(doc["pods"][1]["claims"][0])) == 8
    (shared,) = doc["sharedClaims"]
    assert shared["kind"] == "ResourceClaim" and shared["metadata"]["name"].startswith("train-fabric-")
    assert devices(shared) == [("r2-fabric", "link-0")]
    assert doc["minCount"] == 2 and doc["podsPlaced"] == 2 and doc["stats"]["status"] == "OPTIMAL"
    assert "explanation" not in doc


def test_placed_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = schedule(capsys, "default/train", CLUSTER, PODGROUP, *PODS)
    assert code == 0
    assert out.startswith(f"PodGroup default/train: placed 2 of 2 pods (minCount 2) in {RACK}=r2\n")
    assert "  a-small -> n-d\n" in out and "  b-big -> n-c\n" in out


def test_one_at_a_time_state_is_not_placeable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = schedule(capsys, "default/train", CLUSTER, PODGROUP, AFTER_A_SMALL, PODS[1])
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith("0/2 domains (topology.example.com/rack) can hold PodGroup default/train: closest rack r2 fits 0 of 1 pods")
    assert "4 usable devices for a count of 8" in lines[0]
    code, out, err = schedule(capsys, "default/train", CLUSTER, PODGROUP, AFTER_A_SMALL, PODS[1], "-o", "json")
    doc = json.loads(out)
    assert code == 1 and doc["placed"] is False and doc["pods"] == [] and doc["sharedClaims"] == [] and doc["domain"] is None
    assert doc["explanation"]["closest"] == {"key": RACK, "value": "r2"} and doc["explanation"]["podsPlaceable"] == 0
    assert err.splitlines()[0] == doc["explanation"]["summary"]


def _basic(tmp_path: Path) -> str:
    docs = list(yaml.safe_load_all(Path(PODGROUP).read_text()))
    docs[0]["spec"]["schedulingPolicy"] = {"basic": {}}
    path = tmp_path / "basic.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["default/nope", CLUSTER, PODGROUP, *PODS], 'error: podgroups.scheduling.k8s.io "nope" not found in namespace default'),
        (["default/train", CLUSTER, PODGROUP], "error: PodGroup default/train: no pods to place"),
        (["train", CLUSTER, PODGROUP, *PODS], "error: --group: Invalid value"),
        (["default/train", CLUSTER, "BASIC", *PODS], "error: PodGroup default/train: spec.schedulingPolicy: the policy is not gang"),
        (["default/train", "--reserve", CLUSTER, PODGROUP, *PODS], "error: --reserve: Forbidden: not with --group"),
        # Flags for the service: the group is placed here, so they would be ignored.
        (["default/train", "--tls-ca", "/nonexistent", "--ttl", "5", CLUSTER, PODGROUP, *PODS],
         "error: --ttl: Forbidden: not with --group (the group is placed here from the files"),
        (["default/train", "--server", "solver:50051", CLUSTER, PODGROUP, *PODS], "error: --server: Forbidden: not with --group"),
        (["default/train", CLUSTER, *PODS, str(GANGS / "podgroup.yaml")], None),
    ],
    ids=["missing-podgroup", "no-members", "bad-group", "basic-policy", "reserve", "client-flags", "server", "control"],
)
def test_invalid_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str | None) -> None:
    args = [_basic(tmp_path) if a == "BASIC" else a for a in args]
    code, _, err = schedule(capsys, *args)
    if message is None:
        assert code == 0
        return
    assert code == 2
    assert err.startswith(message) and "Traceback" not in err
    assert all(line.startswith("error: ") for line in err.splitlines())


def test_missing_template_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(Path(PODGROUP).read_text()) if d["metadata"]["name"] != "gpu-8"]
    path = tmp_path / "podgroup.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code, _, err = schedule(capsys, "default/train", CLUSTER, str(path), *PODS)
    assert code == 2 and "ResourceClaimTemplate default/gpu-8 not found" in err


def test_deadline_exits_3_as_a_real_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dra_solver.cli", "schedule", "--group", "default/train", "--timeout", "0.001", CLUSTER, PODGROUP, *PODS],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("deadline reached: ")
