"""``dra-solver serve``, ``controllers`` and ``kubelet-plugin`` without a usable Kubernetes API:
one clear line on stderr and exit status 2, never a traceback.

The commands run as real processes; the client they share (``service.kubeapi.api_client``)
loads the configuration and asks the server for discovery before anything starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dra_solver.service.localcluster.controlplane import ControlPlane, free_port
from tests.kubeletplugin.helpers import DRIVER, NODE, short_tmpdir

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("serve", "controllers", "kubelet-plugin")


@pytest.fixture
def work() -> Iterator[Path]:
    root = short_tmpdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def command(name: str, work: Path, *api: str) -> list[str]:
    base = [sys.executable, "-m", "dra_solver.cli", name]
    if name == "serve":
        return [*base, *api, "--port", "0", "--metrics-port", "-1"]
    if name == "controllers":
        return [*base, *api, "--solver", "127.0.0.1:1", "--metrics-port", "-1"]
    return [*base, *api, "--driver", DRIVER, "--node", NODE,
            "--plugin-dir", str(work / "plugin"), "--registry-dir", str(work / "registry"),
            "--cdi-dir", str(work / "cdi"), "--checkpoint-dir", str(work / "checkpoint")]


def run(argv: list[str], **env: str) -> tuple[int, list[str]]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    environ.update(env)
    proc = subprocess.run(argv, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, lines


def kubeconfig(path: Path, server: str, user: dict[str, str], ca: str | None = None) -> Path:
    cluster: dict[str, object] = {"server": server}
    if ca:
        cluster["certificate-authority"] = ca
    else:
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


def assert_one_error(code: int, lines: list[str], *expected: str) -> None:
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert "error: " in lines[0]
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("name", COMMANDS)
def test_missing_kubeconfig(name: str, work: Path) -> None:
    code, lines = run(command(name, work, "--kubeconfig", str(work / "nonexistent")))
    assert_one_error(code, lines, f"kubeconfig {work / 'nonexistent'}: no such file")


@pytest.mark.parametrize("name", COMMANDS)
def test_unreadable_kubeconfig(name: str, work: Path) -> None:
    # A directory cannot be read as a file, even by root (a mode-000 file can).
    code, lines = run(command(name, work, "--kubeconfig", str(work)))
    assert_one_error(code, lines, f"kubeconfig {work}: cannot read: Is a directory")
    garbage = work / "garbage"
    garbage.write_text("{{{ not yaml")
    code, lines = run(command(name, work, "--kubeconfig", str(garbage)))
    assert_one_error(code, lines, f"kubeconfig {garbage}: ")


@pytest.mark.parametrize("name", ["controllers", "kubelet-plugin"])  # serve needs an inventory flag
def test_default_kubeconfig_missing(name: str, work: Path) -> None:
    code, lines = run(command(name, work), KUBECONFIG=str(work / "nowhere"))
    assert_one_error(code, lines, f"kubeconfig {work / 'nowhere'}: no such file")


@pytest.mark.parametrize("name", COMMANDS)
def test_unreachable_server(name: str, work: Path) -> None:
    config = kubeconfig(work / "kubeconfig", f"https://127.0.0.1:{free_port()}", {"token": "t"})
    code, lines = run(command(name, work, "--kubeconfig", str(config)))
    assert_one_error(code, lines, "cannot reach the Kubernetes API server at https://127.0.0.1:", "Connection refused")


@pytest.mark.parametrize("name", COMMANDS)
def test_in_cluster_outside_a_cluster(name: str, work: Path) -> None:
    code, lines = run(command(name, work, "--in-cluster"))
    assert_one_error(code, lines, "--in-cluster: not running in a Kubernetes pod")


@pytest.mark.parametrize("name", COMMANDS)
def test_credentials_the_real_server_rejects(name: str, work: Path, control_plane: ControlPlane) -> None:
    config = kubeconfig(work / "kubeconfig", control_plane.url, {"token": "not-a-token"}, ca=str(control_plane.pki / "ca.crt"))
    code, lines = run(command(name, work, "--kubeconfig", str(config)))
    assert_one_error(code, lines, f"the Kubernetes API server at {control_plane.url} rejected the credentials", "401 Unauthorized")
