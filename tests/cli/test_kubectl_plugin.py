"""``kubectl dra-solver ...``: the installed kubectl-dra_solver entry point, found and run by the
real kubectl (plugins are executables named kubectl-<name> on PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import yaml

from dra_solver import __version__
from tests.cli.test_explain_live import make_cluster
from tests.deploy.realkubectl import kubectl
from tests.realkube import KubeCluster


def _installed_plugin() -> Path:
    (entry,) = [e for e in metadata.entry_points(group="console_scripts") if e.name == "kubectl-dra_solver"]
    assert entry.value == "dra_solver.cli:kubectl_main"
    found = shutil.which("kubectl-dra_solver", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert found, "kubectl-dra_solver is not installed beside this Python: pip install -e . again"
    return Path(found)


def _kubectl(*args: str, kubeconfig: str = os.devnull) -> subprocess.CompletedProcess[str]:
    plugin_dir = _installed_plugin().parent
    env = {**os.environ, "PATH": os.pathsep.join([str(plugin_dir), "/usr/bin", "/bin"]), "KUBECONFIG": kubeconfig}
    return subprocess.run([kubectl(), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def test_kubectl_finds_and_runs_the_plugin() -> None:
    done = _kubectl("dra-solver", "version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"dra-solver {__version__}"
    listed = _kubectl("plugin", "list", "--name-only")
    assert "kubectl-dra_solver" in listed.stdout, listed.stdout + listed.stderr


def test_the_plugin_names_itself_as_kubectl_does() -> None:
    done = _kubectl("dra-solver", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: kubectl dra-solver ")


def test_the_plugin_runs_the_subcommands(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = _kubectl("dra-solver", "allocate", "--node", "node-a", "-o", "json",
                    str(root / "examples/demo/cluster.yaml"), str(root / "examples/demo/claims/notebook.yaml"))
    assert done.returncode == 0, done.stderr
    assert '"kind": "List"' in done.stdout


def test_the_plugin_explains_and_compares_a_live_pod(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    # As a user would: KUBECONFIG names the cluster, its context the namespace; no flags.
    ns = make_cluster(kube_cluster, gpus_per_pod=2)
    config = yaml.safe_load(Path(kube_cluster.kubeconfig).read_text())
    config["contexts"][0]["context"]["namespace"] = ns
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    done = _kubectl("dra-solver", "explain", "pod/train-0", kubeconfig=str(kubeconfig))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"pod {ns}/train-0: 1 claim to allocate: {ns}/train-0-gpus\n")
    assert "the claims fit on 1 of 4 nodes: worker-2" in done.stdout
    done = _kubectl("dra-solver", "compare", "--upstream", "on", "--quiet", "pod/train-0", kubeconfig=str(kubeconfig))
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("pod/train-0 ")]
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        ("worker-1", "unsatisfiable", "unsatisfiable", "unsatisfiable", "yes"),
        ("worker-2", "allocated", "allocated", "allocated", "yes"),
    ]
    assert "  upstream     allocated, score 0: the same devices as cpsat" in done.stdout
    done = _kubectl("dra-solver", "explain", "pod/missing", kubeconfig=str(kubeconfig))
    assert done.returncode == 2 and "not found" in done.stderr and done.stdout == ""
