"""The README's local cluster, exactly as documented: its commands run one by one.

The README's "A local cluster" block is run command by command, each shown output checked as
tests/docs checks examples: ``up --nodes 2`` prints ``export KUBECONFIG=PATH`` last, the example
workload is applied, its pods are bound by dra-solver and their claims allocated and reserved,
and ``down`` stops everything. Then nothing may be left: no process ``up`` started, no state
directory. Two substitutions keep a developer's own cluster and cache out of it: the state
directory is a fresh one (``DRA_SOLVER_LOCAL_CLUSTER_DIR``, in the commands too), and the
kubectl directory is wherever the suite's binaries are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_solver.service.localcluster.cluster import _group_alive
from dra_solver.service.localcluster.controlplane import binaries
from tests.docs import mdblocks

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
UP = "./scripts/local-cluster.sh up --nodes 2"
DOC_STATE = "~/.cache/dra-solver/local-cluster"
DOC_BIN = "~/.cache/dra-solver/k8s-v1.37.2/bin"
NAMESPACE = "local-demo"
PODS = {"inference", "train-0", "train-1", "render", "notebook"}


def readme_block() -> mdblocks.Block:
    (block,) = [b for b in mdblocks.blocks(README) if b.commands and b.commands[0].text == UP]
    return block


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # Short: the kubelet plugins' unix sockets live under it.
    parent = Path(tempfile.mkdtemp(prefix="lc-", dir="/tmp"))
    yield parent / "local-cluster"
    if (parent / "local-cluster" / "state.json").exists():  # failed before 'down': stop what runs
        env = {**os.environ, "DRA_SOLVER_LOCAL_CLUSTER_DIR": str(parent / "local-cluster")}
        subprocess.run([str(ROOT / "scripts" / "local-cluster.sh"), "down"], env=env,
                       cwd=ROOT, check=False, timeout=120, capture_output=True)
    shutil.rmtree(parent, ignore_errors=True)


class Shell:
    """Runs commands like a reader's shell: ``export`` lines change the environment."""

    def __init__(self, env: dict[str, str], substitutions: dict[str, str]) -> None:
        self.env = env
        self.substitutions = substitutions

    def run(self, command: mdblocks.Command, timeout: float = 600) -> str:
        text = command.text
        for old, new in self.substitutions.items():
            text = text.replace(old, new)
        if text.startswith("export "):
            done = subprocess.run(["bash", "-c", f"{text} && env -0"], env=self.env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=30, check=True)
            self.env = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
            return ""
        done = subprocess.run(["bash", "-o", "pipefail", "-c", text], env=self.env, cwd=ROOT,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout, check=False)
        assert done.returncode == 0, f"$ {text}\nexit {done.returncode}\n{done.stdout[-4000:]}"
        missing = mdblocks.shown_matches(command.shown, done.stdout)
        assert missing is None, f"$ {text}\nshown line not in the output: {missing!r}\n{done.stdout[-4000:]}"
        return done.stdout

    def kubectl_json(self, *args: str) -> Any:
        done = subprocess.run(["kubectl", *args, "-o", "json"], env=self.env, capture_output=True,
                              text=True, timeout=60, check=True)
        return json.loads(done.stdout)


def test_readme_local_cluster_steps(state_dir: Path) -> None:
    block = readme_block()
    env = {**os.environ, "DRA_SOLVER_LOCAL_CLUSTER_DIR": str(state_dir)}
    shell = Shell(env, {DOC_STATE: str(state_dir), DOC_BIN: str(binaries().directory)})
    commands = list(block.commands)
    assert commands[-1].text == "./scripts/local-cluster.sh down"

    out = shell.run(commands[0])
    last = out.strip().splitlines()[-1]
    assert last == f"export KUBECONFIG={state_dir / 'control-plane' / 'admin.kubeconfig'}", out
    state = json.loads((state_dir / "state.json").read_text())
    pids: dict[str, int] = state["pids"]
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "solver", "controllers",
            "kubelet-plugin-node-1", "kubelet-plugin-node-2"} <= set(pids)
    # A second 'up' refuses, touching nothing.
    again = subprocess.run([str(ROOT / "scripts" / "local-cluster.sh"), "up"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120, check=False)
    assert (again.returncode, again.stdout) == (1, ""), again.stderr
    assert "a local cluster is already up" in again.stderr
    for command in commands[1:-1]:
        shell.run(command)
    assert shell.env["KUBECONFIG"] == last.split("=", 1)[1]

    # What the shown output only hints at: every pod bound by dra-solver, every claim
    # allocated on a simulated device and reserved for its pod.
    pods = shell.kubectl_json("-n", NAMESPACE, "get", "pods")["items"]
    assert {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") in {"node-1", "node-2"}} == PODS
    claims = shell.kubectl_json("-n", NAMESPACE, "get", "resourceclaims")["items"]
    assert len(claims) == len(PODS)
    for claim in claims:
        status = claim.get("status", {})
        assert status.get("reservedFor"), claim["metadata"]["name"]
        results = status["allocation"]["devices"]["results"]
        assert results and all(r["driver"] == "gpu.sim.dra-solver.dev" for r in results)
    events = shell.kubectl_json("-n", NAMESPACE, "get", "events")["items"]
    scheduled = {e["involvedObject"]["name"] for e in events if e["reason"] == "Scheduled"
                 and "dra-solver" in (e.get("reportingComponent") or e.get("source", {}).get("component", ""))}
    assert scheduled == PODS, events

    shell.run(commands[-1], timeout=120)
    assert not state_dir.exists()
    assert not [name for name, pid in pids.items() if _group_alive(pid)]


def test_down_without_up_is_harmless(state_dir: Path) -> None:
    env = {**os.environ, "DRA_SOLVER_LOCAL_CLUSTER_DIR": str(state_dir)}
    done = subprocess.run([str(ROOT / "scripts" / "local-cluster.sh"), "down"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert "nothing was running" in done.stderr
    assert not state_dir.exists()


def test_invalid_node_count_is_a_usage_error(state_dir: Path) -> None:
    env = {**os.environ, "DRA_SOLVER_LOCAL_CLUSTER_DIR": str(state_dir)}
    done = subprocess.run([str(ROOT / "scripts" / "local-cluster.sh"), "up", "--nodes", "0"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip() == "local-cluster: --nodes: must be at least 1"
    assert not state_dir.exists()
