"""Where the node's devices come from: the backend interface and the bundled simulated backend.

A backend (a :class:`Profile`) does four things: enumerate the node's devices in the API's
vocabulary (attributes, capacity, counters), apply and undo the node-side work of preparing one
allocated device, and report device health. Everything else in the plugin (checkpoint, CDI,
publishing, health taints) is backend-agnostic, which is what lets a real GPU or NIC backend
replace the simulation without touching the crash-safety machinery.

The simulated backend is configured from a YAML file (``examples/kubeletplugin/devices.yaml``
documents every field; :mod:`simconfig <dra_solver.kubeletplugin.simconfig>` reads it):

- GPUs with ``model``, ``uuid``, ``index``, ``driverVersion``, ``numaNode``, ``nvlinkDomain`` and
  the standard ``resource.kubernetes.io/pcieRoot`` attributes and a ``memory`` capacity;
  optionally partitionable into MIG-like profiles: every GPU gets a counter set
  (``gpu-N-counters``: ``compute`` and ``memory`` slices) that its whole-GPU device and each
  partition device consume, so the allocator can never hand out overlapping pieces;
- NICs with a consumable ``bandwidth`` capacity (``allowMultipleAllocations`` and a
  ``requestPolicy``), sharing PCIe roots with the GPUs for ``matchAttribute`` topology tests;
- health read from a small YAML file (polled, and re-read at once on SIGUSR1), so failures can be
  simulated on a live node;
- "preparing" a device writes a marker file under the backend's state directory, a stand-in for
  real node-side work (creating a MIG instance, configuring a VF). The crash-injection tests
  read those markers to prove a crash never leaves half-prepared devices behind.

Device lists are built deterministically: the same config and node give the same devices, UUIDs
and order every time.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dra_solver.kubeletplugin import fsutil, simconfig

# --- device description (API vocabulary) -----------------------------------------------------

Json = dict[str, Any]

PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
"""The standard attribute upstream drivers use to express PCIe locality across drivers."""

HEALTHY = simconfig.HEALTHY
UNHEALTHY = simconfig.UNHEALTHY
UNKNOWN = simconfig.UNKNOWN
HEALTH_VALUES = simconfig.HEALTH_VALUES


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A CDI device node: ``path`` inside the container, optionally from another host path."""

    path: str
    host_path: str | None = None
    permissions: str | None = None

    def to_cdi(self) -> Json:
        out: Json = {"path": self.path}
        if self.host_path:
            out["hostPath"] = self.host_path
        if self.permissions:
            out["permissions"] = self.permissions
        return out


@dataclass(frozen=True, slots=True)
class Mount:
    """A CDI bind mount."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ("ro", "nosuid", "nodev", "bind")

    def to_cdi(self) -> Json:
        return {
            "hostPath": self.host_path,
            "containerPath": self.container_path,
            "options": list(self.options),
        }


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """What the runtime does to a container that gets the device (CDI ``containerEdits``)."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
        )

    def to_cdi(self) -> Json:
        out: Json = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [d.to_cdi() for d in self.device_nodes]
        if self.mounts:
            out["mounts"] = [m.to_cdi() for m in self.mounts]
        return out

    @staticmethod
    def from_cdi(data: Mapping[str, Any]) -> ContainerEdits:
        return ContainerEdits(
            env=tuple(str(e) for e in data.get("env") or ()),
            device_nodes=tuple(
                DeviceNode(
                    path=str(d["path"]),
                    host_path=d.get("hostPath"),
                    permissions=d.get("permissions"),
                )
                for d in data.get("deviceNodes") or ()
            ),
            mounts=tuple(
                Mount(
                    host_path=str(m["hostPath"]),
                    container_path=str(m["containerPath"]),
                    options=tuple(m.get("options") or ()),
                )
                for m in data.get("mounts") or ()
            ),
        )


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One device as the plugin publishes and prepares it.

    ``attributes``, ``capacity`` and ``consumes_counters`` are already in API (JSON) form, so
    publishing is a copy. ``parent`` names the device whose health a partition shares.
    """

    name: str
    kind: str
    attributes: Mapping[str, Json]
    capacity: Mapping[str, Json] = field(default_factory=dict)
    consumes_counters: tuple[Json, ...] = ()
    allow_multiple_allocations: bool = False
    edits: ContainerEdits = field(default_factory=ContainerEdits)
    parent: str | None = None

    def to_api(self) -> Json:
        """The ``spec.devices[]`` entry of a ResourceSlice (without taints)."""
        out: Json = {"name": self.name}
        if self.attributes:
            out["attributes"] = {k: dict(v) for k, v in sorted(self.attributes.items())}
        if self.capacity:
            out["capacity"] = {k: dict(v) for k, v in sorted(self.capacity.items())}
        if self.consumes_counters:
            out["consumesCounters"] = [dict(c) for c in self.consumes_counters]
        if self.allow_multiple_allocations:
            out["allowMultipleAllocations"] = True
        return out


@dataclass(frozen=True, slots=True)
class CounterSetInfo:
    """A shared counter set (``spec.sharedCounters[]``): counter name -> quantity."""

    name: str
    counters: Mapping[str, str]

    def to_api(self) -> Json:
        return {
            "name": self.name,
            "counters": {k: {"value": v} for k, v in sorted(self.counters.items())},
        }


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """Everything a backend offers on one node, in publishing order."""

    devices: tuple[DeviceInfo, ...]
    counter_sets: tuple[CounterSetInfo, ...] = ()

    def by_name(self) -> dict[str, DeviceInfo]:
        return {d.name: d for d in self.devices}


@dataclass(frozen=True, slots=True)
class HealthReport:
    """One device's health as the backend sees it. ``severity`` picks the taint effect."""

    device: str
    health: str = HEALTHY
    severity: str = ""
    message: str = ""


class DeviceBackendError(Exception):
    """The backend could not prepare or unprepare a device; the claim gets this as its error."""


class Profile(Protocol):
    """What the plugin needs from a device backend."""

    def enumerate_devices(self) -> NodeDevices:
        """All devices of this node; deterministic order."""
        ...

    def prepare_device(self, claim_uid: str, device: str, *, share_id: str | None) -> None:
        """Do the node-side work for one allocated device. Must be idempotent."""
        ...

    def unprepare_device(self, claim_uid: str, device: str, *, share_id: str | None) -> None:
        """Undo :meth:`prepare_device`; succeeds when there is nothing to undo."""
        ...

    def check_health(self) -> dict[str, HealthReport]:
        """Current health of every device, by device name."""
        ...


# --- the simulated backend -------------------------------------------------------------------


def _attr_str(value: str) -> Json:
    return {"string": value}


def _attr_int(value: int) -> Json:
    return {"int": value}


def _env_name(device: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", device.upper())


def _sim_uuid(prefix: str, node: str, key: str) -> str:
    # Stable across restarts and identical config, distinct across nodes.
    return f"{prefix}-{uuid.uuid5(uuid.NAMESPACE_URL, f'dra-solver-sim/{node}/{key}')}"


def build_devices(config: simconfig.SimConfig, *, node: str) -> NodeDevices:
    """The simulated node's devices (pure: the same config and node give the same answer)."""
    g = config.gpus
    devices: list[DeviceInfo] = []
    counter_sets: list[CounterSetInfo] = []
    roots = g.pcie_roots or max(1, (g.count + 1) // 2)
    profiles = g.profiles()
    slices = g.partitions

    def root_of(index: int, total: int) -> int:
        return index * roots // max(total, 1)

    def numa_of(root: int) -> int:
        return root * g.numa_nodes // roots

    for i in range(g.count):
        name = f"gpu-{i}"
        root = root_of(i, g.count)
        gpu_uuid = _sim_uuid("GPU", node, name)
        common = {
            "model": _attr_str(g.model),
            "driverVersion": {"version": g.driver_version},
            "numaNode": _attr_int(numa_of(root)),
            "nvlinkDomain": _attr_int(i * g.nvlink_domains // g.count),
            PCIE_ROOT_ATTRIBUTE: _attr_str(f"pci{root:04x}:00"),
        }
        nodes = tuple(
            DeviceNode(path=t.format(index=i, name=name, uuid=gpu_uuid)) for t in g.device_nodes
        )
        mounts = tuple(
            Mount(
                host_path=m.host_path.format(index=i, name=name, uuid=gpu_uuid),
                container_path=m.container_path.format(index=i, name=name, uuid=gpu_uuid),
            )
            for m in g.mounts
        )
        env_key = f"DRA_SIM_{_env_name(name)}"
        edits = ContainerEdits(
            env=(f"{env_key}_UUID={gpu_uuid}", f"{env_key}_MODEL={g.model}"),
            device_nodes=nodes,
            mounts=mounts,
        )
        consumes: tuple[Json, ...] = ()
        if profiles:
            counter_set = f"{name}-counters"
            counter_sets.append(
                CounterSetInfo(
                    counter_set,
                    {"compute": str(slices.compute_slices), "memory": str(slices.memory_slices)},
                )
            )
            consumes = (
                {
                    "counterSet": counter_set,
                    "counters": {
                        "compute": {"value": str(slices.compute_slices)},
                        "memory": {"value": str(slices.memory_slices)},
                    },
                },
            )
        devices.append(
            DeviceInfo(
                name=name,
                kind="gpu",
                attributes={
                    "type": _attr_str("gpu"),
                    "index": _attr_int(i),
                    "uuid": _attr_str(gpu_uuid),
                    **common,
                },
                capacity={"memory": {"value": str(g.memory)}},
                consumes_counters=consumes,
                edits=edits,
            )
        )
        for profile in profiles:
            label = profile.name.replace(".", "")
            for m in range(profile.count):
                pname = f"{name}-mig-{label}-{m}"
                part_uuid = _sim_uuid("MIG", node, pname)
                pkey = f"DRA_SIM_{_env_name(pname)}"
                devices.append(
                    DeviceInfo(
                        name=pname,
                        kind="mig",
                        attributes={
                            "type": _attr_str("mig"),
                            "profile": _attr_str(profile.name),
                            "index": _attr_int(m),
                            "parentIndex": _attr_int(i),
                            "parentUUID": _attr_str(gpu_uuid),
                            "uuid": _attr_str(part_uuid),
                            **common,
                        },
                        capacity={"memory": {"value": str(profile.memory)}},
                        consumes_counters=(
                            {
                                "counterSet": f"{name}-counters",
                                "counters": {
                                    "compute": {"value": str(profile.compute)},
                                    "memory": {"value": str(profile.memory_slices)},
                                },
                            },
                        ),
                        edits=ContainerEdits(
                            env=(
                                f"{pkey}_UUID={part_uuid}",
                                f"{pkey}_PARENT_UUID={gpu_uuid}",
                                f"{pkey}_PROFILE={profile.name}",
                            ),
                            device_nodes=nodes,
                            mounts=mounts,
                        ),
                        parent=name,
                    )
                )
    n = config.nics
    for j in range(n.count):
        name = f"nic-{j}"
        root = root_of(j, n.count)
        nic_uuid = _sim_uuid("NIC", node, name)
        devices.append(
            DeviceInfo(
                name=name,
                kind="nic",
                attributes={
                    "type": _attr_str("nic"),
                    "index": _attr_int(j),
                    "model": _attr_str(n.model),
                    "uuid": _attr_str(nic_uuid),
                    "interfaceName": _attr_str(f"simnet{j}"),
                    "rdma": {"bool": True},
                    "numaNode": _attr_int(numa_of(root)),
                    PCIE_ROOT_ATTRIBUTE: _attr_str(f"pci{root:04x}:00"),
                },
                capacity={
                    "bandwidth": {
                        "value": str(n.bandwidth),
                        "requestPolicy": {
                            "default": str(n.default_bandwidth),
                            "validRange": {
                                "min": str(n.min_bandwidth),
                                "step": str(n.bandwidth_step),
                            },
                        },
                    }
                },
                allow_multiple_allocations=True,
                edits=ContainerEdits(
                    env=(
                        f"DRA_SIM_{_env_name(name)}_UUID={nic_uuid}",
                        f"DRA_SIM_{_env_name(name)}_INTERFACE=simnet{j}",
                    )
                ),
            )
        )
    return NodeDevices(devices=tuple(devices), counter_sets=tuple(counter_sets))


def parse_health_file(
    text: str, *, source: str, devices: Mapping[str, DeviceInfo]
) -> dict[str, HealthReport]:
    """Reports for the devices a health file names (see examples/kubeletplugin/health.yaml)."""
    entries = simconfig.parse_health_file(text, source=source, devices=devices)
    return {
        name: HealthReport(device=name, health=e.health, severity=e.severity, message=e.message)
        for name, e in sorted(entries.items())
    }


class SimulatedProfile:
    """The bundled backend: devices from a :class:`SimConfig <simconfig.SimConfig>`, side effects as
    marker files."""

    def __init__(
        self, config: simconfig.SimConfig, *, node: str, state_dir: Path, health_file: Path | None
    ) -> None:
        self.config = config
        self.node = node
        self.state_dir = state_dir
        self.health_file = health_file
        self._devices = build_devices(config, node=node)
        self._by_name = self._devices.by_name()
        self._last_health: dict[str, HealthReport] = {}
        self._health_stamp: tuple[int, int] | None = None

    # -- Profile ---------------------------------------------------------------------------

    def enumerate_devices(self) -> NodeDevices:
        return self._devices

    def prepare_device(self, claim_uid: str, device: str, *, share_id: str | None) -> None:
        if device not in self._by_name:
            raise DeviceBackendError(f"device {device}: no such device on node {self.node}")
        if device in self.config.fail_prepare:
            raise DeviceBackendError(f"device {device}: simulated failure while preparing")
        marker = self.marker_path(claim_uid, device, share_id=share_id)
        fsutil.ensure_dir(marker.parent, mode=0o700, enforce=True)
        body = json.dumps({"claimUID": claim_uid, "device": device, "shareID": share_id})
        fsutil.write_atomic(marker, body.encode())

    def unprepare_device(self, claim_uid: str, device: str, *, share_id: str | None) -> None:
        marker = self.marker_path(claim_uid, device, share_id=share_id)
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        # Fails while other devices of the claim are still prepared; that is fine.
        with contextlib.suppress(OSError):
            marker.parent.rmdir()

    def check_health(self) -> dict[str, HealthReport]:
        """Re-reads the health file when it changed; a broken file keeps the last good state."""
        reports = {name: HealthReport(device=name) for name in self._by_name}
        path = self.health_file
        stamp: tuple[int, int] | None = None
        if path is not None:
            try:
                st = path.stat()
                stamp = (st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                stamp = None
        if stamp != self._health_stamp:
            self._health_stamp = stamp
            self._last_health = {}
            if path is not None and stamp is not None:
                # Errors propagate to the monitor, which logs them and keeps the old state.
                self._last_health = parse_health_file(
                    path.read_text(encoding="utf-8"), source=str(path), devices=self._by_name
                )
        reports.update(self._last_health)
        # A partition lives on its GPU: an unhealthy GPU makes its partitions unhealthy too.
        for name, info in self._by_name.items():
            parent = reports.get(info.parent) if info.parent else None
            if parent is not None and parent.health != HEALTHY and reports[name].health == HEALTHY:
                reports[name] = HealthReport(
                    device=name,
                    health=parent.health,
                    severity=parent.severity,
                    message=f"parent {info.parent}: {parent.message}".rstrip(": "),
                )
        return reports

    def forget_health_cache(self) -> None:
        """Make the next :meth:`check_health` re-read the file (SIGUSR1)."""
        self._health_stamp = (-1, -1)

    # -- helpers ---------------------------------------------------------------------------

    def marker_path(self, claim_uid: str, device: str, *, share_id: str | None) -> Path:
        """``<state dir>/<claim uid>/<device>[--<share id>]``, confined to the state directory
        (raises fsutil.UnsafePathError, an OSError, for a UID or name that would leave it)."""
        leaf = device if not share_id else f"{device}--{share_id}"
        return fsutil.confined(self.state_dir, claim_uid, leaf)

    def prepared_markers(self) -> dict[str, set[str]]:
        """Claim UID -> marker names present (used by tests and the invariant checker)."""
        out: dict[str, set[str]] = {}
        if not self.state_dir.is_dir():
            return out
        for claim_dir in sorted(self.state_dir.iterdir()):
            if claim_dir.is_dir():
                out[claim_dir.name] = {
                    p.name for p in claim_dir.iterdir() if not p.name.startswith(".")
                }
        return out
