"""``dra-solver allocate`` as other tools call it: real subprocesses, every exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationRequest, Inventory
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.check import check_allocation
from dra_solver.model.decode import decode_all, decode_text

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dra_solver.cli", "allocate", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


def _check(output: list[dict[str, object]], node: str) -> None:
    """The printed allocations are valid for the bundled cluster."""
    inventory = Inventory.from_objects(decode_text(CLUSTER.read_text()))
    claims = [c for c in decode_all(output) if isinstance(c, o.ResourceClaim)]
    results = [c.status.allocation for c in claims if c.status and c.status.allocation]
    assert len(results) == len(claims)
    bare = tuple(c.model_copy(update={"status": None}) for c in claims)
    request = AllocationRequest(claims=bare, node=inventory.node(node), inventory=inventory)
    assert check_allocation(request, results, cel=CelEnvironment()) == []


def test_exit_0_prints_the_allocated_claims_in_input_order() -> None:
    done = _run("--node", "worker-1", str(CLUSTER))
    assert done.returncode == 0, done.stderr
    listing = yaml.safe_load(done.stdout)
    assert listing["apiVersion"] == "v1" and listing["kind"] == "List"
    assert [i["metadata"]["name"] for i in listing["items"]] == ["training", "notebook"]
    assert all(i["status"]["allocation"]["devices"]["results"] for i in listing["items"])
    _check(listing["items"], "worker-1")
    assert "allocated by cpsat, policy pack: proven optimal, score " in done.stderr


def test_policy_is_selectable_and_reported() -> None:
    for policy in ("spread", "first-fit", "score"):
        done = _run("--node", "worker-1", "--policy", policy, "-o", "json", str(CLUSTER))
        assert done.returncode == 0, done.stderr
        assert f"policy {policy}: proven optimal" in done.stderr
        _check(json.loads(done.stdout)["items"], "worker-1")
    bad = _run("--node", "worker-1", "--policy", "tightest", str(CLUSTER))
    assert bad.returncode == 2
    assert 'policy: Unsupported value: "tightest"' in bad.stderr and "Traceback" not in bad.stderr


def test_json_output_from_stdin_with_backtracking() -> None:
    done = _run("--node", "worker-1", "--allocator", "backtracking", "-o", "json", "-", stdin=CLUSTER.read_text())
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert len(listing["items"]) == 2
    _check(listing["items"], "worker-1")


def test_exit_1_when_the_claims_do_not_fit_on_the_node() -> None:
    done = _run("--node", "worker-2", str(CLUSTER))
    assert done.returncode == 1
    assert done.stderr.startswith("cannot allocate all claims")
    assert done.stdout == ""


def test_exit_2_for_invalid_input_names_file_object_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        CLUSTER.read_text()
        + "\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c1, namespace: default}\n"
        + "spec:\n  devices:\n    requests:\n    - name: r\n      exactly: {deviceClassName: gpu.example.com, count: 0}\n"
    )
    done = _run("--node", "worker-1", str(bad))
    assert done.returncode == 2
    assert (
        f"{bad}: ResourceClaim default/c1: spec.devices.requests[0].exactly.count: Invalid value: 0: "
        "must be greater than zero"
    ) in done.stderr
    assert "Traceback" not in done.stderr


def test_exit_2_for_malformed_files_and_unknown_kinds(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: ResourceClaim\nmetadata: [\n")
    done = _run("--node", "worker-1", str(broken))
    assert done.returncode == 2 and str(broken) in done.stderr and "Traceback" not in done.stderr
    unknown = tmp_path / "pod.yaml"
    unknown.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    done = _run("--node", "worker-1", str(unknown))
    assert done.returncode == 2 and "kind" in done.stderr
    done = _run("--node", "worker-1", str(tmp_path / "missing.yaml"))
    assert done.returncode == 2 and "no such file" in done.stderr


def test_exit_2_for_allocation_errors_and_disabled_features() -> None:
    text = CLUSTER.read_text().replace("deviceClassName: nic.example.com", "deviceClassName: nope.example.com")
    done = _run("--node", "worker-1", "-", stdin=text)
    assert done.returncode == 2
    assert "could not retrieve device class nope.example.com" in done.stderr
    done = _run("--node", "worker-1", "--feature-gates", "PrioritizedList=false", str(CLUSTER))
    assert done.returncode == 2
    assert "has subrequests, but the DRAPrioritizedList feature is disabled" in done.stderr
    done = _run("--node", "worker-1", "--feature-gates", "Bogus=true", str(CLUSTER))
    assert done.returncode == 2 and "unrecognized feature gate: Bogus" in done.stderr


def test_exit_3_when_the_deadline_passes_without_an_answer() -> None:
    done = _run("--node", "worker-1", "--timeout", "0.000001", str(CLUSTER))
    assert done.returncode == 3, done.stderr
    assert "deadline" in done.stderr and done.stdout == ""
