"""``dra-solver allocate --allocator upstream`` and ``compare`` with the upstream column, as real
subprocesses against the real Go wrapper: every exit status, the not-built message, and the
third column in the table, the JSON and the HTML report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from dra_solver.service import upstream

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "compare"
NOT_BUILT = {"DRA_SOLVER_K8S_BIN": "/nonexistent/dra-solver-bin"}

GPU_CLASS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
"""

SCENARIO = GPU_CLASS + """
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: gpus}
spec:
  driver: gpu.example.com
  nodeName: worker-1
  pool: {name: gpus, generation: 1, resourceSliceCount: 1}
  devices: [{name: gpu-0}, {name: gpu-1}, {name: gpu-2}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: two, namespace: default, uid: uid-two}
spec:
  devices:
    requests: [{name: gpus, exactly: {deviceClassName: CLASS, count: COUNT}}]
"""


def _scenario(count: int = 2, device_class: str = "gpu") -> str:
    return SCENARIO.replace("COUNT", str(count)).replace("CLASS", device_class)


def _cli(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dra_solver.cli", *args],
        input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def _devices(stdout: str) -> list[str]:
    doc = yaml.safe_load(stdout)
    return [r["device"] for item in doc["items"] for r in item["status"]["allocation"]["devices"]["results"]]


def test_allocate_upstream_gives_upstreams_first_fit(upstream_allocator: upstream.UpstreamAllocator) -> None:
    done = _cli("allocate", "--node", "worker-1", "--allocator", "upstream", "-", stdin=_scenario())
    assert done.returncode == 0, done.stderr
    assert _devices(done.stdout) == ["gpu-0", "gpu-1"]
    assert "allocated by upstream (" in done.stderr and "tier)" in done.stderr
    port = _cli("allocate", "--node", "worker-1", "--allocator", "backtracking", "-", stdin=_scenario())
    assert _devices(port.stdout) == _devices(done.stdout)


def test_allocate_upstream_exit_statuses(upstream_allocator: upstream.UpstreamAllocator) -> None:
    unsat = _cli("allocate", "--node", "worker-1", "--allocator", "upstream", "-", stdin=_scenario(count=4))
    assert unsat.returncode == 1 and unsat.stderr.startswith("cannot allocate all claims"), unsat.stderr
    error = _cli("allocate", "--node", "worker-1", "--allocator", "upstream", "-", stdin=_scenario(device_class="nope"))
    assert error.returncode == 2, error.stderr
    assert "nope" in error.stderr and "Traceback" not in error.stderr
    slow = _cli("allocate", "--node", "worker-1", "--allocator", "upstream", "--timeout", "0.001",
                str(EXAMPLES / "backtracking-explodes.yaml"))
    assert slow.returncode == 3, slow.stderr
    assert slow.stderr.startswith("deadline reached:")


def test_allocate_upstream_not_built_says_how_to_build() -> None:
    done = _cli("allocate", "--node", "worker-1", "--allocator", "upstream", "-", stdin=_scenario(), env=NOT_BUILT)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "scripts/build-upstream.sh upstream-allocator" in lines[0]


def test_compare_has_an_upstream_column(upstream_allocator: upstream.UpstreamAllocator, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    done = _cli("compare", "--quiet", "-o", "json", "--report", str(report),
                str(EXAMPLES / "agree.yaml"), str(EXAMPLES / "higher-score.yaml"))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    rows = {r["scenario"]: r for r in doc["rows"]}
    for row in rows.values():
        assert row["upstream"]["verdict"] == row["backtracking"]["verdict"]
        assert row["upstream"]["devices"] == row["backtracking"]["devices"]
        assert row["backtrackingMatchesUpstream"] is True
        assert row["whyBacktrackingDiffers"] == ""
        assert row["upstream"]["status"] in ("stable", "incubating", "experimental")
    assert rows["agree"]["why"] == ""
    assert rows["higher-score"]["why"].startswith("higher FirstAvailable score")
    assert doc["summary"]["backtrackingMatchesUpstream"] == len(rows)
    page = report.read_text()
    assert "with upstream&#x27;s Go allocator" in page or "with upstream's Go allocator" in page
    assert "<title>dra-solver: CP-SAT vs backtracking vs upstream&#x27;s allocator</title>" in page
    table = _cli("compare", "--quiet", str(EXAMPLES / "agree.yaml"))
    assert "UPSTREAM" in table.stdout.splitlines()[0] and "BT=UP" in table.stdout


def test_compare_without_upstream(tmp_path: Path) -> None:
    auto = _cli("compare", "-o", "json", str(EXAMPLES / "agree.yaml"), env=NOT_BUILT)
    assert auto.returncode == 0, auto.stderr
    assert "note: no upstream column" in auto.stderr and "scripts/build-upstream.sh upstream-allocator" in auto.stderr
    assert all("upstream" not in row for row in json.loads(auto.stdout)["rows"])
    # The note changes what the table shows, so --quiet (no progress) still prints it.
    quiet = _cli("compare", "--quiet", str(EXAMPLES / "agree.yaml"), env=NOT_BUILT)
    assert quiet.returncode == 0 and quiet.stderr.startswith("note: no upstream column:")
    assert len(quiet.stderr.strip().splitlines()) == 1
    required = _cli("compare", "--upstream", "on", str(EXAMPLES / "agree.yaml"), env=NOT_BUILT)
    assert required.returncode == 2
    assert required.stderr.strip().count("\n") == 0 and "scripts/build-upstream.sh upstream-allocator" in required.stderr
    off = _cli("compare", "--upstream", "off", "--quiet", str(EXAMPLES / "agree.yaml"))
    assert off.returncode == 0 and "UPSTREAM" not in off.stdout


TAINTED_WHOLE_GPU = GPU_CLASS + """
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: devices}
spec:
  driver: gpu.example.com
  nodeName: worker-1
  pool: {name: gpus, generation: 1, resourceSliceCount: 2}
  devices:
  - name: gpu-0
    taints: [{key: example.com/unhealthy, value: "true", effect: NoSchedule}]
    consumesCounters: [{counterSet: gpu-0-memory, counters: {memory: {value: 8Gi}}}]
  - name: gpu-0-half-0
    consumesCounters: [{counterSet: gpu-0-memory, counters: {memory: {value: 4Gi}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: counters}
spec:
  driver: gpu.example.com
  nodeName: worker-1
  pool: {name: gpus, generation: 1, resourceSliceCount: 2}
  sharedCounters: [{name: gpu-0-memory, counters: {memory: {value: 8Gi}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one, namespace: default, uid: uid-one}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu}}]
"""


def test_compare_finds_the_port_equal_to_upstream(upstream_allocator: upstream.UpstreamAllocator) -> None:
    """Upstream v1.37.2 gives back a rejected device's counters (README: fixed by v0.37.2) and
    so does the port: compare reports no difference to explain."""
    done = _cli("compare", "--quiet", "-o", "json", "-", stdin=TAINTED_WHOLE_GPU)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    assert (row["upstream"]["verdict"], row["backtracking"]["verdict"], row["cpsat"]["verdict"]) == (
        "allocated", "allocated", "allocated")
    assert row["backtrackingMatchesUpstream"] is True
    assert row["whyBacktrackingDiffers"] == ""
    assert row["why"] in ("", "placement policy pack vs upstream's first fit")


def test_replay_has_an_upstream_row(upstream_allocator: upstream.UpstreamAllocator, tmp_path: Path) -> None:
    replays = ROOT / "examples" / "replay"
    workload = tmp_path / "workload.yaml"
    items = yaml.safe_load((replays / "gpu8-workload.yaml").read_text())
    items["items"] = items["items"][:10]
    workload.write_text(json.dumps(items))
    args = ("compare", "--quiet", "--replay", str(replays / "gpu8-cluster.yaml"), "--workload", str(workload),
            "-o", "json")
    done = _cli(*args)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["replay"]
    # Upstream's own allocator, node by node in name order like the port's row: the same
    # claims on the same nodes, placed over time.
    assert rows["upstream"]["claims"] == 10 and rows["upstream"]["errors"] == []
    assert rows["upstream"]["placedCurve"] == rows["backtracking"]["placedCurve"]
    assert rows["upstream"]["placedBySize"] == rows["backtracking"]["placedBySize"]
    assert rows["upstream"]["nodePolicy"] == rows["backtracking"]["nodePolicy"]
    off = _cli(*args, "--upstream", "off")
    assert off.returncode == 0 and "upstream" not in json.loads(off.stdout)["replay"]
    missing = _cli(*args, env=NOT_BUILT)
    assert missing.returncode == 0 and "upstream" not in json.loads(missing.stdout)["replay"]
    assert missing.stderr.startswith("note: no upstream row:")
