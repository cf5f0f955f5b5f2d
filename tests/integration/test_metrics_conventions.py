"""Every component's /metrics passes ``promtool check metrics`` and the naming rules
(tests/promlint.py); /metrics, /healthz and /readyz are separate paths and anything else is
404. The controllers' endpoint is checked in tests/controllers/test_controllers.py (it needs a
real API server)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from dra_solver.service.client import Client
from tests import builders as b
from tests import promlint
from tests.kubeletplugin.helpers import (
    Kubelet,
    PluginDirs,
    PluginProcess,
    short_tmpdir,
    write_claims,
)

ROOT = Path(__file__).resolve().parents[2]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def check_paths(base: str) -> str:
    """The three paths answer as documented; returns the metrics page."""
    status, text = get(f"{base}/metrics")
    assert status == 200 and "# TYPE" in text
    assert get(f"{base}/healthz") == (200, "ok\n")
    assert get(f"{base}/readyz") == (200, "ok\n")
    for other in ("/", "/metricsx", "/healthz/extra", "/favicon.ico"):
        status, body = get(f"{base}{other}")
        assert status == 404, (other, status)
        assert "# TYPE" not in body
    return text


def test_solver_metrics_follow_the_conventions() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_solver", "serve", "--inventory", "examples/demo/cluster.yaml",
         "--port", "0", "--metrics-port", "0", "--log-level", "warning"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        grpc_addr, metrics_addr = (part.split("=", 1)[1] for part in line.split())
        with Client(grpc_addr, timeout=30) as client:
            client.wait_ready(timeout=60)  # the line comes before the inventory is loaded
            client.allocate([_demo_claim()], "node-a")
            client.inventory()
            with pytest.raises(grpc.RpcError):
                client.unreserve("no-such-reservation")
        text = check_paths(f"http://{metrics_addr}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert promlint.problems(text) == []
    # One duration histogram per RPC: solving RPCs in one, the others in the other.
    timed = {}
    for metric in ("dra_solver_allocation_duration_seconds", "dra_solver_request_duration_seconds"):
        rpcs = set(re.findall(rf'^{metric}_count{{[^}}]*rpc="(\w+)"', text, flags=re.MULTILINE))
        timed[metric] = rpcs
    assert timed["dra_solver_allocation_duration_seconds"] == {"Allocate"}
    assert timed["dra_solver_request_duration_seconds"] == {"GetInventory", "Unreserve"}


def _demo_claim() -> dict[str, object]:
    import yaml

    doc: dict[str, object] = yaml.safe_load((ROOT / "examples/demo/claims/notebook.yaml").read_text())
    return doc


def test_kubelet_plugin_metrics_follow_the_conventions() -> None:
    root = short_tmpdir()
    try:
        dirs = PluginDirs(root)
        done = b.SIM_GPU.named("metered").request("gpus", count=None).allocated("gpu-0").obj()
        write_claims(dirs.claims, done)
        plugin = PluginProcess(dirs, extra_args=["--metrics-port", "0"]).start()
        try:
            port = next(int(m.group(1)) for line in plugin.lines if (m := re.search(r"metrics on 127\.0\.0\.1:(\d+)", line)))
            kubelet = Kubelet(dirs.dra_socket, dirs.registration_socket)
            try:
                answer = kubelet.prepare(done, b.SIM_GPU.named("missing").request("gpus", count=None).allocated("gpu-1").obj())
                assert not answer.claims[done["metadata"]["uid"]].error
            finally:
                kubelet.close()
            text = check_paths(f"http://127.0.0.1:{port}")
        finally:
            assert plugin.terminate() == 0, plugin.log()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert promlint.problems(text) == []
    assert 'dra_solver_kubelet_plugin_claims_total{operation="prepare",outcome="success"} 1.0' in text
    assert 'dra_solver_kubelet_plugin_claims_total{operation="prepare",outcome="error"} 1.0' in text
    assert 'dra_solver_kubelet_plugin_operation_duration_seconds_count{operation="prepare",outcome="error"} 1.0' in text
    assert "dra_solver_kubelet_plugin_prepared_claims 1.0" in text
    writes = float(re.search(r'checkpoint_writes_total{outcome="success"} (\S+)', text).group(1))  # type: ignore[union-attr]
    assert writes >= 2, "PrepareStarted and PrepareCompleted are two writes"


def test_the_rules_catch_what_they_are_for() -> None:
    bad = (
        "# HELP dra_solver_solver_status_total x\n# TYPE dra_solver_solver_status_total counter\n"
        "dra_solver_solver_status_total 1.0\n"
        "# HELP dra_solver_optimality_gap x\n# TYPE dra_solver_optimality_gap gauge\ndra_solver_optimality_gap 1.0\n"
        "# HELP x_created x\n# TYPE x_created gauge\nx_created 1.0\n"
    )
    found = "\n".join(promlint.problems(bad))
    assert "'solver' twice in a row" in found
    assert "without the unit suffix _ratio" in found
    assert "x_created: a *_created series" in found


def test_endpoint_readiness_says_why(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from dra_solver.service.httpendpoint import HttpEndpoint

    state = {"reason": "caches not synced: pods"}
    endpoint = HttpEndpoint(CollectorRegistry(), address="127.0.0.1", port=0, readiness=lambda: state["reason"])
    try:
        base = f"http://127.0.0.1:{endpoint.port}"
        assert get(f"{base}/readyz") == (503, "not ready: caches not synced: pods\n")
        assert get(f"{base}/healthz") == (200, "ok\n")
        state["reason"] = None  # type: ignore[assignment]
        deadline = time.monotonic() + 5
        while get(f"{base}/readyz")[0] != 200:
            assert time.monotonic() < deadline
    finally:
        endpoint.stop()
