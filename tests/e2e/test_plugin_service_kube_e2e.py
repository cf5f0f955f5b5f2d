"""End to end on the real kube-apiserver: kubelet plugin -> ResourceSlices -> solver -> prepare.

The kubelet plugin runs as a real process and publishes its node's ResourceSlices to the API
server; ``dra-solver serve --kubeconfig`` runs as a real process with the API as its inventory;
a claim created in the API is allocated through the service over gRPC and the allocation is
written to the claim's status on the server, as the scheduler does; the test plays the
kubelet over the plugin's unix socket: the plugin reads the claim from the server and prepare
yields a CDI spec for exactly the allocated device. The service sees the allocation through
its watch (its reservation for the claim ends), so the next claim gets another device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_solver.service.client import Client
from tests import builders as b
from tests.kubeletplugin.helpers import (
    DRIVER,
    NODE,
    PluginDirs,
    PluginProcess,
    short_tmpdir,
    uid_of,
)
from tests.kubeletplugin.test_kube_api import KubeDirs
from tests.realkube import KubeCluster

ROOT = Path(__file__).resolve().parents[2]
RESOURCE = "/apis/resource.k8s.io/v1"
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "sim-gpu"},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
}


def until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not reached within {timeout:.0f} s: {what}"
        time.sleep(0.05)


@pytest.fixture
def plugin(kube_cluster: KubeCluster) -> Iterator[PluginProcess]:
    kube_cluster.node(NODE)
    kube_cluster.create(f"{RESOURCE}/deviceclasses", CLASS)
    dirs = KubeDirs(short_tmpdir(), kube_cluster.kubeconfig)
    running = PluginProcess(dirs, env={"KUBERNETES_SERVICE_HOST": ""}).start()
    try:
        yield running
    finally:
        assert running.terminate() == 0, running.log()


@pytest.fixture
def service(kube_cluster: KubeCluster) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_solver.cli", "serve", "--kubeconfig", kube_cluster.kubeconfig,
         "--port", "0", "--metrics-port", "0"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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


def create_claim(cluster: KubeCluster, name: str) -> dict[str, Any]:
    body = b.claim(name, cls="sim-gpu").request("gpu", count=None).obj()
    created: dict[str, Any] = cluster.create(f"{RESOURCE}/namespaces/default/resourceclaims", body)
    return created


def allocate_on_server(cluster: KubeCluster, client: Client, claim: dict[str, Any]) -> dict[str, Any]:
    """Allocate through the service holding a reservation, then write the allocation as the
    scheduler would; the reservation ends once the service's watch shows the allocation."""
    response = client.allocate([claim], NODE, reserve=True, ttl=300)
    assert len(Client.devices(response)) == 1, response
    assert client.inventory().reservations == 1
    allocated = Client.with_allocations([claim], response)[0]
    path = f"{RESOURCE}/namespaces/default/resourceclaims/{claim['metadata']['name']}/status"
    written: dict[str, Any] = cluster.request("PUT", path, allocated)
    until(lambda: client.inventory().reservations == 0, "the service's watch shows the allocation")
    return written


def test_published_slices_allocate_through_the_service_and_prepare(
    kube_cluster: KubeCluster, plugin: PluginProcess, service: str
) -> None:
    dirs: PluginDirs = plugin.dirs
    until(lambda: len(kube_cluster.get(f"{RESOURCE}/resourceslices")["items"]) == 1, "the plugin's slice")
    with Client(service, timeout=30) as client:
        client.wait_ready(timeout=30)
        until(lambda: client.health() == "SERVING", "the service's inventory synced")
        claim = allocate_on_server(kube_cluster, client, create_claim(kube_cluster, "train"))
        result = claim["status"]["allocation"]["devices"]["results"][0]
        assert (result["driver"], result["pool"]) == (DRIVER, NODE)

        kubelet = plugin.kubelet()
        try:
            prepared = kubelet.prepare(claim).claims[uid_of(claim)]
            assert prepared.error == ""
            (device,) = prepared.devices
            assert device.device_name == result["device"] and device.pool_name == NODE
            spec_file = dirs.cdi / f"{DRIVER}-device_{uid_of(claim)}.json"
            spec = json.loads(spec_file.read_text())
            assert len(spec["devices"]) == 1
            assert list(device.cdi_device_ids) == [f"{spec['kind']}={spec['devices'][0]['name']}"]

            # The API, not a reservation, holds the first device now: the next claim gets another.
            second = allocate_on_server(kube_cluster, client, create_claim(kube_cluster, "eval"))
            other = second["status"]["allocation"]["devices"]["results"][0]["device"]
            assert other != result["device"]
            assert kubelet.prepare(second).claims[uid_of(second)].error == ""

            kubelet.unprepare(claim, second)
            assert not spec_file.exists()
        finally:
            kubelet.close()
