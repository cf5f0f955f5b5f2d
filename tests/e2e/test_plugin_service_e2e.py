"""End to end without Kubernetes: kubelet plugin -> ResourceSlices -> solver service -> prepare.

The plugin runs as a real process and publishes its node's ResourceSlices into a directory;
the solver service runs as a real process with that directory as its file inventory; a claim
is allocated through the service over gRPC; the allocated claim is handed to the plugin's
claim source, and the test plays the kubelet over the plugin's unix socket: prepare yields a
CDI spec on disk for exactly the allocated device, unprepare removes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dra_solver.service.client import Client
from tests import builders as b
from tests.kubeletplugin.helpers import (
    DRIVER,
    NODE,
    PluginDirs,
    PluginProcess,
    short_tmpdir,
    uid_of,
    write_claims,
)

ROOT = Path(__file__).resolve().parents[2]
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "sim-gpu"},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
}


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    dirs = PluginDirs(short_tmpdir())
    running = PluginProcess(dirs).start()
    try:
        yield running
    finally:
        running.terminate()


@pytest.fixture
def service(plugin: PluginProcess) -> Iterator[str]:
    # The inventory directory is the plugin's publish directory plus the DeviceClass an
    # operator adds; the plugin only manages its own slice files there.
    deadline = time.monotonic() + 20
    while not list(plugin.dirs.slices.glob("*.yaml")):
        assert time.monotonic() < deadline, "plugin published no slices:\n" + plugin.log()
        time.sleep(0.1)
    (plugin.dirs.slices / "deviceclass.yaml").write_text(yaml.safe_dump(CLASS), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(plugin.dirs.slices),
         "--port", "0", "--metrics-port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("grpc="), first + proc.stdout.read()
        yield first.split()[0].removeprefix("grpc=")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_published_slices_allocate_through_the_service_and_prepare(plugin: PluginProcess, service: str) -> None:
    claim = b.claim("train", uid="uid-train", cls="sim-gpu").request("gpu", count=None).obj()
    with Client(service, timeout=30) as client:
        client.wait_ready(timeout=30)
        response = client.allocate([claim], NODE)
        devices = Client.devices(response)
        assert len(devices) == 1, response
        allocated = Client.with_allocations([claim], response)[0]
    result = allocated["status"]["allocation"]["devices"]["results"][0]
    assert (result["driver"], result["pool"]) == (DRIVER, NODE)

    write_claims(plugin.dirs.claims, allocated)
    kubelet = plugin.kubelet()
    try:
        prepared = kubelet.prepare(allocated).claims[uid_of(allocated)]
        assert prepared.error == ""
        assert len(prepared.devices) == 1
        device = prepared.devices[0]
        assert device.device_name == result["device"] and device.pool_name == NODE
        spec_file = plugin.dirs.cdi / f"{DRIVER}-device_{uid_of(allocated)}.json"
        spec = json.loads(spec_file.read_text())
        assert len(spec["devices"]) == 1
        assert list(device.cdi_device_ids) == [f"{spec['kind']}={spec['devices'][0]['name']}"]

        kubelet.unprepare(allocated)
        assert not spec_file.exists()
    finally:
        kubelet.close()
