"""``scripts/kube-up`` as docs/local-cluster.md describes it: the control plane alone, started by
one command that prints ``export KUBECONFIG=PATH`` last, and stopped by ``down`` with nothing
left behind (no process, no state directory). Its own state directory keeps a developer's
control plane out of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_solver.service.localcluster.cluster import _group_alive
from dra_solver.service.localcluster.controlplane import binaries

ROOT = Path(__file__).resolve().parents[2]
KUBE_UP = str(ROOT / "scripts" / "kube-up")


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    parent = Path(tempfile.mkdtemp(prefix="ku-", dir="/tmp"))
    state = parent / "kube-up"
    yield {**os.environ, "DRA_SOLVER_KUBE_UP_DIR": str(state)}
    if (state / "state.json").exists():  # failed before 'down': stop what runs
        subprocess.run([KUBE_UP, "down"], env={**os.environ, "DRA_SOLVER_KUBE_UP_DIR": str(state)},
                       check=False, timeout=120, capture_output=True)
    shutil.rmtree(parent, ignore_errors=True)


def kube_up(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBE_UP, *args], env=env, capture_output=True, text=True, timeout=600, check=False)


def test_up_serves_the_api_and_down_leaves_nothing(env: dict[str, str]) -> None:
    state_dir = Path(env["DRA_SOLVER_KUBE_UP_DIR"])
    up = kube_up(env)
    assert up.returncode == 0, up.stderr
    kubeconfig = state_dir / "control-plane" / "admin.kubeconfig"
    assert up.stdout.splitlines()[-1] == f"export KUBECONFIG={kubeconfig}"
    assert "kube-up: ready: kube-apiserver at https://127.0.0.1:" in up.stderr
    pids: dict[str, int] = json.loads((state_dir / "state.json").read_text())["pids"]
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}

    # The processes outlive the script; the kubeconfig it printed reaches a ready API server,
    # whose controller manager creates the default ServiceAccount of a new namespace.
    kubectl = [str(binaries().kubectl), f"--kubeconfig={kubeconfig}"]
    ready = subprocess.run([*kubectl, "get", "--raw=/readyz"], capture_output=True, text=True, timeout=60, check=False)
    assert (ready.returncode, ready.stdout) == (0, "ok"), ready.stderr
    subprocess.run([*kubectl, "create", "namespace", "ku"], capture_output=True, timeout=60, check=True)
    waited = subprocess.run([*kubectl, "-n", "ku", "wait", "--for=create", "serviceaccount/default", "--timeout=60s"],
                            capture_output=True, text=True, timeout=90, check=False)
    assert waited.returncode == 0, waited.stderr

    again = kube_up(env, "up")
    assert (again.returncode, again.stdout) == (1, ""), again.stderr
    assert "a control plane is already up" in again.stderr

    down = kube_up(env, "down")
    assert (down.returncode, down.stdout, down.stderr.strip()) == (0, "", "kube-up: stopped")
    assert not state_dir.exists()
    assert not [name for name, pid in pids.items() if _group_alive(pid)]


def test_build_prints_the_binary_directory(env: dict[str, str]) -> None:
    done = kube_up(env, "build")
    assert (done.returncode, done.stdout) == (0, f"{binaries().directory}\n"), done.stderr
    assert not Path(env["DRA_SOLVER_KUBE_UP_DIR"]).exists()


def test_usage_errors_are_one_line(env: dict[str, str]) -> None:
    done = kube_up(env, "sideways")
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = done.stderr.splitlines()
    assert line.startswith("kube-up: error: argument action: invalid choice: 'sideways'"), line
