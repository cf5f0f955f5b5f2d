"""The checkpoint file: round trip, missing = empty, versioned, corruption refused, atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dra_solver.kubeletplugin import checkpoint as cp
from dra_solver.kubeletplugin.discovery import ContainerEdits, DeviceNode, Mount


def sample() -> cp.Checkpoint:
    devices = (
        cp.PreparedDevice(
            request_names=("gpu",),
            pool="node-1",
            device="gpu-0",
            share_id=None,
            cdi_name="uid-1-gpu-0",
            cdi_device_ids=("d.example.com/device=uid-1-gpu-0",),
            edits=ContainerEdits(
                env=("A=1",),
                device_nodes=(DeviceNode("/dev/x0", host_path="/dev/y0", permissions="rw"),),
                mounts=(Mount("/host", "/ctr"),),
            ),
        ),
        cp.PreparedDevice(
            ("net",), "node-1", "nic-0", "share-1", "uid-1-nic-0-share-1", ("d/device=n",)
        ),
    )
    return (
        cp.Checkpoint()
        .with_claim(cp.ClaimEntry("uid-1", "ns", "one", cp.ClaimState.PREPARE_COMPLETED, devices))
        .with_claim(cp.ClaimEntry("uid-2", "ns", "two", cp.ClaimState.PREPARE_STARTED, devices[:1]))
        .with_claim(cp.ClaimEntry("uid-3", "ns", "three", cp.ClaimState.UNPREPARE_STARTED, ()))
    )


def test_round_trip(tmp_path: Path) -> None:
    store = cp.CheckpointStore(tmp_path)
    store.write(sample())
    assert store.read() == sample()
    data = json.loads(store.path.read_text())
    assert data["apiVersion"] == cp.API_VERSION
    assert data["kind"] == "DRAPluginCheckpoint"
    assert data["checksum"].startswith("sha256:")
    assert data["claims"]["uid-2"]["state"] == "PrepareStarted"
    assert cp.encode(store.read()) == store.path.read_bytes()  # stable encoding


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert cp.CheckpointStore(tmp_path).read() == cp.Checkpoint()


def test_write_is_atomic_and_private(tmp_path: Path) -> None:
    store = cp.CheckpointStore(tmp_path)
    store.write(sample())
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [cp.FILE_NAME]  # no temp left behind


def test_state_helpers() -> None:
    c = sample()
    assert [
        e.uid for e in c.in_state(cp.ClaimState.PREPARE_STARTED, cp.ClaimState.UNPREPARE_STARTED)
    ] == ["uid-2", "uid-3"]
    assert c.without("uid-2").get("uid-2") is None
    assert c.get("uid-1") is not None and c.get("uid-1").ref == "ns/one"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d.update(apiVersion="checkpoint.kubeletplugin.dra-solver.dev/v9"),
            "apiVersion: Unsupported value",
        ),
        (lambda d: d["claims"]["uid-1"].update(state="Prepared"), "checksum: does not match"),
        (lambda d: d.update(checksum="sha256:0"), "checksum: does not match"),
    ],
)
def test_untrustworthy_files_are_refused(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    store = cp.CheckpointStore(tmp_path)
    store.write(sample())
    data = json.loads(store.path.read_text())
    mutate(data)
    store.path.write_text(json.dumps(data))
    with pytest.raises(cp.CheckpointError, match=message):
        store.read()


def test_truncated_and_malformed(tmp_path: Path) -> None:
    store = cp.CheckpointStore(tmp_path)
    store.write(sample())
    store.path.write_bytes(store.path.read_bytes()[:40])
    with pytest.raises(cp.CheckpointError, match="not valid JSON"):
        store.read()
    body = {"apiVersion": cp.API_VERSION, "kind": cp.KIND, "claims": {"u": {"state": "Bogus"}}}
    body["checksum"] = cp._checksum(body)
    store.path.write_text(json.dumps(body))
    with pytest.raises(cp.CheckpointError, match="malformed entry"):
        store.read()
