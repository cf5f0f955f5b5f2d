"""The plugin's checkpoint: which claims are prepared, half-prepared or half-unprepared.

This file is what makes prepare and unprepare crash-safe. Every claim moves through

    (absent) -> PrepareStarted -> PrepareCompleted -> UnprepareStarted -> (absent)

and the new state is on disk *before* the work it announces starts. After a crash, a claim in
``PrepareStarted`` or ``UnprepareStarted`` names exactly the devices and CDI spec that may
exist partially, so start-up can undo them (see ``state.DeviceState.recover``).

Only reading and writing live here:

- a missing file reads as an empty checkpoint (first start on a node);
- writes are atomic and durable (``fsutil.write_atomic``);
- the schema is versioned (``apiVersion``), and a checksum over the content catches a file that
  was truncated or edited by hand, which is refused with a clear message rather than guessed at;
- the file is private (mode 0600 whatever the umask), and a temporary file a crash left behind is
  removed at start-up (``state.DeviceState.recover``).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dra_solver.kubeletplugin import fsutil
from dra_solver.kubeletplugin.discovery import ContainerEdits

API_VERSION = "checkpoint.kubeletplugin.dra-solver.dev/v1"
KIND = "DRAPluginCheckpoint"
FILE_NAME = "checkpoint.json"


class ClaimState(enum.StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    UNPREPARE_STARTED = "UnprepareStarted"


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocated device of a claim as the kubelet gets it back, plus how to recreate it.

    ``cdi_name`` is the device's name inside the claim's CDI spec; ``edits`` are its container
    edits, kept so a repeated prepare after a restart can answer without the inventory.
    """

    request_names: tuple[str, ...]
    pool: str
    device: str
    share_id: str | None
    cdi_name: str
    cdi_device_ids: tuple[str, ...]
    edits: ContainerEdits = field(default_factory=ContainerEdits)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requestNames": list(self.request_names),
            "poolName": self.pool,
            "deviceName": self.device,
            "cdiName": self.cdi_name,
            "cdiDeviceIDs": list(self.cdi_device_ids),
            "containerEdits": self.edits.to_cdi(),
        }
        if self.share_id is not None:
            out["shareID"] = self.share_id
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PreparedDevice:
        return PreparedDevice(
            request_names=tuple(str(r) for r in data.get("requestNames") or ()),
            pool=str(data["poolName"]),
            device=str(data["deviceName"]),
            share_id=None if data.get("shareID") is None else str(data["shareID"]),
            cdi_name=str(data["cdiName"]),
            cdi_device_ids=tuple(str(i) for i in data.get("cdiDeviceIDs") or ()),
            edits=ContainerEdits.from_cdi(data.get("containerEdits") or {}),
        )


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[PreparedDevice, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state.value,
            "devices": [d.to_json() for d in self.devices],
        }

    @staticmethod
    def from_json(uid: str, data: Mapping[str, Any]) -> ClaimEntry:
        return ClaimEntry(
            uid=uid,
            namespace=str(data.get("namespace", "")),
            name=str(data.get("name", "")),
            state=ClaimState(data["state"]),
            devices=tuple(PreparedDevice.from_json(d) for d in data.get("devices") or ()),
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An immutable snapshot; ``with_claim``/``without`` return new ones."""

    claims: Mapping[str, ClaimEntry] = field(default_factory=dict)

    def get(self, uid: str) -> ClaimEntry | None:
        return self.claims.get(uid)

    def with_claim(self, entry: ClaimEntry) -> Checkpoint:
        return replace(self, claims={**self.claims, entry.uid: entry})

    def without(self, uid: str) -> Checkpoint:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})

    def in_state(self, *states: ClaimState) -> list[ClaimEntry]:
        return [self.claims[uid] for uid in sorted(self.claims) if self.claims[uid].state in states]

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "claims": {uid: self.claims[uid].to_json() for uid in sorted(self.claims)},
        }
        body["checksum"] = _checksum(body)
        return body


class CheckpointError(Exception):
    """The checkpoint file exists but cannot be trusted; the plugin must not guess."""


def _checksum(body: Mapping[str, Any]) -> str:
    content = {k: v for k, v in body.items() if k != "checksum"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def decode(text: str, *, source: str) -> Checkpoint:
    """Parse a checkpoint file's text; CheckpointError names the file and the problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{source}: not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{source}: expected a JSON object")
    version = data.get("apiVersion")
    if version != API_VERSION:
        raise CheckpointError(
            f"{source}: apiVersion: Unsupported value: {version!r}: supported values: "
            f'"{API_VERSION}"'
        )
    if data.get("checksum") != _checksum(data):
        raise CheckpointError(f"{source}: checksum: does not match the content (corrupted?)")
    claims = data.get("claims") or {}
    if not isinstance(claims, dict):
        raise CheckpointError(f"{source}: claims: must be an object")
    for uid in sorted(str(k) for k in claims):
        # A UID names files (CDI spec, backend state); one that is not a plain file name was
        # never written by the plugin, whose claim references are checked before use.
        problem = fsutil.component_problem(uid)
        if problem:
            raise CheckpointError(f"{source}: claims[{fsutil.short(uid)}]: invalid UID: {problem}")
    try:
        entries = {str(uid): ClaimEntry.from_json(str(uid), claims[uid]) for uid in sorted(claims)}
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{source}: claims: malformed entry: {err}") from None
    return Checkpoint(claims=entries)


def encode(checkpoint: Checkpoint) -> bytes:
    return (json.dumps(checkpoint.to_json(), indent=2, sort_keys=True) + "\n").encode()


class CheckpointStore:
    """Reads and writes ``<dir>/checkpoint.json``; nothing else."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / FILE_NAME
        self.on_write: Callable[[bool], None] | None = None
        """Told after every write whether it succeeded (the plugin's metrics)."""

    def read(self) -> Checkpoint:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Checkpoint()
        except OSError as err:
            raise CheckpointError(f"{self.path}: cannot read: {err.strerror or err}") from None
        return decode(text, source=str(self.path))

    def write(self, checkpoint: Checkpoint) -> None:
        try:
            fsutil.write_atomic(self.path, encode(checkpoint))
        except BaseException:
            if self.on_write is not None:
                self.on_write(False)
            raise
        if self.on_write is not None:
            self.on_write(True)

    def prepared_claims(self) -> int:
        """Claims whose preparation completed, as the checkpoint on disk says."""
        return len(self.read().in_state(ClaimState.PREPARE_COMPLETED))
