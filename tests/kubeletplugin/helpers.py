"""Shared test helpers: writing claims, a kubelet stand-in, the plugin as a process, invariants.

The kubelet stand-in uses stubs generated from the same protos the plugin serves, over the real
unix sockets, exactly as the kubelet would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from dra_solver.kubeletplugin import protos
from dra_solver.kubeletplugin.checkpoint import FILE_NAME
from tests import builders

ROOT = Path(__file__).resolve().parents[2]
DRIVER = builders.SIM_DRIVER
NODE = builders.NODE_1


def short_tmpdir() -> Path:
    """A short directory: unix socket paths must stay under 108 bytes."""
    return Path(tempfile.mkdtemp(prefix="kp", dir="/tmp"))


# --- claims ---------------------------------------------------------------------------------


def write_claims(directory: Path, *claims: dict[str, Any], file: str = "claims.yaml") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / file).write_text(yaml.safe_dump_all(list(claims)), encoding="utf-8")


def uid_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


# --- the kubelet stand-in -------------------------------------------------------------------


class Kubelet:
    """What the kubelet does over the sockets: register, prepare, unprepare, watch health."""

    def __init__(self, dra_socket: Path, registration_socket: Path) -> None:
        self.dra = grpc.insecure_channel(f"unix://{dra_socket}")
        self.reg = grpc.insecure_channel(f"unix://{registration_socket}")
        self.v1 = protos.dra_v1_grpc.DRAPluginStub(self.dra)
        self.v1beta1 = protos.dra_v1beta1_grpc.DRAPluginStub(self.dra)
        self.registration = protos.registration_grpc.RegistrationStub(self.reg)
        self.health_v1 = protos.health_v1_grpc.DRAResourceHealthStub(self.dra)
        self.health_v1alpha1 = protos.health_v1alpha1_grpc.DRAResourceHealthStub(self.dra)

    def close(self) -> None:
        self.dra.close()
        self.reg.close()

    @staticmethod
    def _claims(pb: Any, claims: Sequence[dict[str, Any]]) -> list[Any]:
        return [
            pb.Claim(
                namespace=c["metadata"]["namespace"],
                name=c["metadata"]["name"],
                uid=c["metadata"]["uid"],
            )
            for c in claims
        ]

    def prepare(self, *claims: dict[str, Any], beta: bool = False, timeout: float = 20) -> Any:
        pb, stub = (protos.dra_v1beta1, self.v1beta1) if beta else (protos.dra_v1, self.v1)
        return stub.NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=self._claims(pb, claims)), timeout=timeout
        )

    def unprepare(self, *claims: dict[str, Any], beta: bool = False, timeout: float = 20) -> Any:
        pb, stub = (protos.dra_v1beta1, self.v1beta1) if beta else (protos.dra_v1, self.v1)
        return stub.NodeUnprepareResources(
            pb.NodeUnprepareResourcesRequest(claims=self._claims(pb, claims)), timeout=timeout
        )


# --- the plugin as a real process -------------------------------------------------------------


@dataclass
class PluginDirs:
    root: Path
    config: Path | None = None

    @property
    def plugin(self) -> Path:
        return self.root / "plugins" / DRIVER

    @property
    def registry(self) -> Path:
        return self.root / "registry"

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def slices(self) -> Path:
        return self.root / "slices"

    @property
    def claims(self) -> Path:
        return self.root / "claims"

    @property
    def dra_socket(self) -> Path:
        return self.plugin / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry / f"{DRIVER}-reg.sock"

    def args(self) -> list[str]:
        out = [
            "--driver",
            DRIVER,
            "--node",
            NODE,
            "--plugin-dir",
            str(self.plugin),
            "--registry-dir",
            str(self.registry),
            "--cdi-dir",
            str(self.cdi),
            "--checkpoint-dir",
            str(self.checkpoint),
            "--publish",
            str(self.slices),
            "--claim-source",
            str(self.claims),
        ]
        if self.config is not None:
            out += ["--config", str(self.config)]
        return out


@dataclass
class PluginProcess:
    """``python -m dra_solver.kubeletplugin`` with captured logs; waits for the ``ready`` line."""

    dirs: PluginDirs
    env: dict[str, str] = field(default_factory=dict)
    umask: int = -1  # the child's umask; -1 inherits ours
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _reader: threading.Thread | None = None

    def start(self, *, timeout: float = 30) -> PluginProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubeletplugin", *self.dirs.args(), *self.extra_args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            umask=self.umask,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("plugin did not become ready:\n" + self.log())
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.rstrip().endswith("] ready") or '"msg": "ready"' in line:
                self._ready.set()

    def log(self) -> str:
        return "\n".join(self.lines)

    def wait(self, timeout: float = 20) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def kubelet(self) -> Kubelet:
        return Kubelet(self.dirs.dra_socket, self.dirs.registration_socket)


# --- the crash-safety invariant ---------------------------------------------------------------


def invariant_violations(dirs: PluginDirs) -> list[str]:
    """Everything that would make a node inconsistent after a crash and restart.

    - no claim is recorded as half-prepared or half-unprepared;
    - every CDI spec file of ours belongs to a PrepareCompleted claim, and vice versa;
    - every simulated device marker belongs to a PrepareCompleted claim's devices, and vice versa.
    """
    problems: list[str] = []
    path = dirs.checkpoint / FILE_NAME
    claims: dict[str, Any] = {}
    if path.exists():
        claims = json.loads(path.read_text())["claims"]
    completed = {uid: c for uid, c in claims.items() if c["state"] == "PrepareCompleted"}
    for uid, c in sorted(claims.items()):
        if c["state"] != "PrepareCompleted":
            problems.append(f"claim {uid} is left in {c['state']}")
    prefix = f"{DRIVER}-device_"
    specs = {
        p.name[len(prefix) : -len(".json")]
        for p in (dirs.cdi.iterdir() if dirs.cdi.is_dir() else [])
        if p.name.startswith(prefix) and p.name.endswith(".json")
    }
    for uid in sorted(specs - set(completed)):
        problems.append(f"orphaned CDI spec for claim {uid}")
    for uid in sorted(set(completed) - specs):
        problems.append(f"prepared claim {uid} has no CDI spec")
    markers_dir = dirs.checkpoint / "simulated-devices"
    markers: dict[str, set[str]] = {}
    if markers_dir.is_dir():
        for d in markers_dir.iterdir():
            names = {p.name for p in d.iterdir() if not p.name.startswith(".")}
            if names:
                markers[d.name] = names
    for uid, names in sorted(markers.items()):
        expected = {
            dev["deviceName"] + (f"--{dev['shareID']}" if dev.get("shareID") else "")
            for dev in completed.get(uid, {}).get("devices", [])
        }
        if names != expected:
            problems.append(
                f"claim {uid}: prepared devices {sorted(names)} != recorded {sorted(expected)}"
            )
    for uid, c in sorted(completed.items()):
        if c["devices"] and uid not in markers:
            problems.append(f"prepared claim {uid} has no prepared devices")
    return problems
