"""Where the node's devices come from: the backend interface and the bundled simulated backend.

A backend (a :class:`Profile`) does four things: enumerate the node's devices in the API's
vocabulary (attributes, capacity, counters), apply and undo the node-side work of preparing one
allocated device, and report device health. Everything else in the plugin (checkpoint, CDI,
publishing, health taints) is backend-agnostic, which is what lets a real GPU or NIC backend
replace the simulation without touching the crash-safety machinery.

The simulated backend is configured from a YAML file (``examples/kubeletplugin/devices.yaml``
documents every field):

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from dra_solver.kubeletplugin import fsutil
from dra_solver.model import FieldPath, Format, InvalidInput, QuantityError, parse_quantity_field

# --- device description (API vocabulary) -----------------------------------------------------

Json = dict[str, Any]

PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
"""The standard attribute upstream drivers use to express PCIe locality across drivers."""

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"
HEALTH_VALUES = (HEALTHY, UNHEALTHY, UNKNOWN)


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


# --- quantities in the config ----------------------------------------------------------------

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


@dataclass(frozen=True, slots=True)
class IntQuantity:
    """A whole-number Kubernetes quantity, printed canonically (as the API server stores it).

    The config only ever needs whole bytes or bits per second, and printing exactly as the
    API server would means a published slice compares equal to what the server returns.
    """

    value: int
    binary: bool

    def __str__(self) -> str:
        if self.value == 0:
            return "0"
        base, suffixes = (1024, _BINARY) if self.binary else (1000, _DECIMAL)
        for suffix, power in sorted(suffixes.items(), key=lambda kv: -kv[1]):
            unit = base**power
            if self.value % unit == 0:
                return f"{self.value // unit}{suffix}"
        return str(self.value)

    def scaled(self, numerator: int, denominator: int) -> IntQuantity:
        return IntQuantity(self.value * numerator // denominator, self.binary)


def parse_int_quantity(text: object) -> IntQuantity | None:
    """``80Gi`` / ``400G`` / ``1024`` -> IntQuantity; None if it is not a whole quantity."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return IntQuantity(text, False) if text >= 0 else None
    if not isinstance(text, str):
        return None
    # The one quantity parser (the API server's grammar and blanks); "whole" is upstream's
    # AsInt64: an integer held exactly, so 1.5Gi or 1000m are refused as the config asks.
    try:
        parsed = parse_quantity_field(text)
    except QuantityError:
        return None
    value = parsed.as_int64()
    if value is None or value < 0:
        return None
    return IntQuantity(value, parsed.format is Format.BINARY_SI)


# --- simulated backend configuration ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionProfile:
    """A MIG-like profile: how many compute and memory slices one partition takes."""

    name: str
    compute: int
    memory_slices: int
    memory: IntQuantity
    count: int


@dataclass(frozen=True, slots=True)
class GpuConfig:
    count: int = 8
    model: str = "SimGPU-80GB"
    memory: IntQuantity = IntQuantity(80 * 1024**3, True)
    driver_version: str = "1.0.0"
    numa_nodes: int = 2
    nvlink_domains: int = 1
    pcie_roots: int = 0  # 0: one root per two GPUs
    device_nodes: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    compute_slices: int = 7
    memory_slices: int = 8
    partitions: tuple[PartitionProfile, ...] = ()


@dataclass(frozen=True, slots=True)
class NicConfig:
    count: int = 0
    model: str = "SimNIC-400G"
    bandwidth: IntQuantity = IntQuantity(400 * 1000**3, False)
    default_bandwidth: IntQuantity = IntQuantity(10 * 1000**3, False)
    min_bandwidth: IntQuantity = IntQuantity(1000**3, False)
    bandwidth_step: IntQuantity = IntQuantity(1000**3, False)


@dataclass(frozen=True, slots=True)
class HealthConfig:
    file: Path | None = None
    poll_seconds: float = 2.0
    no_execute_severities: tuple[str, ...] = ("critical",)
    check_timeout_seconds: int = 0


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulated backend's whole configuration; defaults are "8 GPUs, nothing else"."""

    gpus: GpuConfig = GpuConfig()
    nics: NicConfig = NicConfig()
    health: HealthConfig = HealthConfig()
    cdi_class: str = "device"
    resync_seconds: float = 30.0
    fail_prepare: tuple[str, ...] = ()


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CDI_CLASS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _Reader:
    """Typed access to the YAML config with API-server style errors (file, field, reason)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: FieldPath, detail: str) -> InvalidInput:
        return InvalidInput("", path, detail, source=self.source)

    def section(self, data: Mapping[str, Any], key: str, path: FieldPath) -> Mapping[str, Any]:
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail((*path, key), "must be a mapping")
        return value

    def known(self, data: Mapping[str, Any], keys: Sequence[str], path: FieldPath) -> None:
        for key in sorted(str(k) for k in data):
            if key not in keys:
                allowed = ", ".join(f'"{k}"' for k in keys)
                raise self.fail((*path, key), f"unknown field; supported fields: {allowed}")

    def integer(
        self, data: Mapping[str, Any], key: str, default: int, path: FieldPath, *, minimum: int = 0
    ) -> int:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(
                (*path, key), f"Invalid value: {value!r}: must be an integer >= {minimum}"
            )
        return value

    def number(self, data: Mapping[str, Any], key: str, default: float, path: FieldPath) -> float:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise self.fail((*path, key), f"Invalid value: {value!r}: must be a positive number")
        return float(value)

    def string(
        self, data: Mapping[str, Any], key: str, default: str, path: FieldPath, *, max_len: int = 64
    ) -> str:
        value = data.get(key, default)
        if not isinstance(value, str) or not value or len(value) > max_len:
            raise self.fail(
                (*path, key),
                f"Invalid value: {value!r}: must be a non-empty string of at most {max_len} characters",
            )
        return value

    def quantity(
        self, data: Mapping[str, Any], key: str, default: IntQuantity, path: FieldPath
    ) -> IntQuantity:
        if key not in data:
            return default
        parsed = parse_int_quantity(data[key])
        if parsed is None:
            raise self.fail(
                (*path, key),
                f"Invalid value: {data[key]!r}: must be a whole quantity like 80Gi, 400G or 1024",
            )
        return parsed

    def strings(self, data: Mapping[str, Any], key: str, path: FieldPath) -> tuple[str, ...]:
        value = data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail((*path, key), "must be a list of non-empty strings")
        return tuple(value)


def load_config(path: Path | None) -> SimConfig:
    """Read the simulated backend's config; ``None`` gives the default 8-GPU node.

    Raises InvalidInput naming the file and field for anything wrong, never a traceback.
    """
    if path is None:
        return SimConfig()
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InvalidInput("", (), f"cannot read: {err.strerror or err}", source=source) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidInput("", (), f"cannot parse YAML: {err}", source=source) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InvalidInput("", (), "the config must be a mapping", source=source)
    return parse_config(data, source=source, base_dir=path.parent)


def parse_config(
    data: Mapping[str, Any], *, source: str = "", base_dir: Path | None = None
) -> SimConfig:
    r = _Reader(source)
    r.known(data, ("gpus", "nics", "health", "cdiClass", "resyncSeconds", "simulate"), ())
    # Shorthand: ``gpus: 8`` means ``gpus: {count: 8}`` (likewise for nics).
    data = {
        k: {"count": v}
        if k in ("gpus", "nics") and isinstance(v, int) and not isinstance(v, bool)
        else v
        for k, v in data.items()
    }
    gpus = _parse_gpus(r, r.section(data, "gpus", ()), ("gpus",))
    nics = _parse_nics(r, r.section(data, "nics", ()), ("nics",))
    hsec = r.section(data, "health", ())
    r.known(
        hsec, ("file", "pollSeconds", "noExecuteSeverities", "checkTimeoutSeconds"), ("health",)
    )
    health_file: Path | None = None
    if "file" in hsec:
        raw = r.string(hsec, "file", "", ("health",), max_len=4096)
        health_file = Path(raw)
        if not health_file.is_absolute() and base_dir is not None:
            health_file = base_dir / health_file
    health = HealthConfig(
        file=health_file,
        poll_seconds=r.number(hsec, "pollSeconds", 2.0, ("health",)),
        no_execute_severities=tuple(
            s.lower()
            for s in (r.strings(hsec, "noExecuteSeverities", ("health",)) or ("critical",))
        ),
        check_timeout_seconds=r.integer(hsec, "checkTimeoutSeconds", 0, ("health",)),
    )
    cdi_class = r.string(data, "cdiClass", "device", ())
    if not _CDI_CLASS.match(cdi_class):
        raise r.fail(("cdiClass",), f"Invalid value: {cdi_class!r}: must be a CDI class name")
    simulate = r.section(data, "simulate", ())
    r.known(simulate, ("failPrepare",), ("simulate",))
    return SimConfig(
        gpus=gpus,
        nics=nics,
        health=health,
        cdi_class=cdi_class,
        resync_seconds=r.number(data, "resyncSeconds", 30.0, ()),
        fail_prepare=r.strings(simulate, "failPrepare", ("simulate",)),
    )


def _parse_gpus(r: _Reader, sec: Mapping[str, Any], path: FieldPath) -> GpuConfig:
    r.known(
        sec,
        (
            "count",
            "model",
            "memory",
            "driverVersion",
            "numaNodes",
            "nvlinkDomains",
            "pcieRoots",
            "deviceNodes",
            "mounts",
            "partitions",
        ),
        path,
    )
    d = GpuConfig()
    memory = r.quantity(sec, "memory", d.memory, path)
    mounts: list[tuple[str, str]] = []
    raw_mounts = sec.get("mounts") or []
    if not isinstance(raw_mounts, list):
        raise r.fail((*path, "mounts"), "must be a list of {hostPath, containerPath}")
    for i, m in enumerate(raw_mounts):
        mpath = (*path, "mounts", i)
        if not isinstance(m, Mapping):
            raise r.fail(mpath, "must be a mapping with hostPath and containerPath")
        r.known(m, ("hostPath", "containerPath"), mpath)
        mounts.append(
            (
                r.string(m, "hostPath", "", mpath, max_len=4096),
                r.string(m, "containerPath", "", mpath, max_len=4096),
            )
        )
    version = r.string(sec, "driverVersion", d.driver_version, path)
    if not re.match(r"^[0-9]+\.[0-9]+\.[0-9]+$", version):
        raise r.fail(
            (*path, "driverVersion"), f"Invalid value: {version!r}: must be MAJOR.MINOR.PATCH"
        )
    psec = r.section(sec, "partitions", path)
    ppath = (*path, "partitions")
    r.known(psec, ("computeSlices", "memorySlices", "profiles"), ppath)
    compute_slices = r.integer(psec, "computeSlices", d.compute_slices, ppath, minimum=1)
    memory_slices = r.integer(psec, "memorySlices", d.memory_slices, ppath, minimum=1)
    profiles: list[PartitionProfile] = []
    raw_profiles = psec.get("profiles") or []
    if not isinstance(raw_profiles, list):
        raise r.fail((*ppath, "profiles"), "must be a list")
    seen: set[str] = set()
    for i, p in enumerate(raw_profiles):
        pp = (*ppath, "profiles", i)
        if not isinstance(p, Mapping):
            raise r.fail(pp, "must be a mapping")
        r.known(p, ("name", "compute", "memorySlices", "memory", "count"), pp)
        name = r.string(p, "name", "", pp, max_len=20)
        if not re.match(r"^[a-z0-9]+(\.[a-z0-9]+)*$", name):
            raise r.fail((*pp, "name"), f"Invalid value: {name!r}: must look like 1g.10gb")
        if name in seen:
            raise r.fail((*pp, "name"), f"Duplicate value: {name!r}")
        seen.add(name)
        compute = r.integer(p, "compute", 1, pp, minimum=1)
        mem_slices = r.integer(p, "memorySlices", 1, pp, minimum=1)
        if compute > compute_slices or mem_slices > memory_slices:
            raise r.fail(pp, "Invalid value: the profile is larger than the GPU's slices")
        fits = min(compute_slices // compute, memory_slices // mem_slices)
        count = r.integer(p, "count", fits, pp, minimum=1)
        if count > fits:
            raise r.fail((*pp, "count"), f"Invalid value: {count}: at most {fits} fit on one GPU")
        profiles.append(
            PartitionProfile(
                name=name,
                compute=compute,
                memory_slices=mem_slices,
                memory=r.quantity(p, "memory", memory.scaled(mem_slices, memory_slices), pp),
                count=count,
            )
        )
    config = GpuConfig(
        count=r.integer(sec, "count", d.count, path),
        model=r.string(sec, "model", d.model, path),
        memory=memory,
        driver_version=version,
        numa_nodes=r.integer(sec, "numaNodes", d.numa_nodes, path, minimum=1),
        nvlink_domains=r.integer(sec, "nvlinkDomains", d.nvlink_domains, path, minimum=1),
        pcie_roots=r.integer(sec, "pcieRoots", 0, path),
        device_nodes=r.strings(sec, "deviceNodes", path),
        mounts=tuple(mounts),
        compute_slices=compute_slices,
        memory_slices=memory_slices,
        partitions=tuple(profiles),
    )
    # Partition devices are named gpu-N-<profile>-M; keep them within a DNS label.
    longest = max((len(p.name) + 14 for p in profiles), default=0)
    if longest > 63:
        raise r.fail(ppath, "Invalid value: partition device names would exceed 63 characters")
    return config


def _parse_nics(r: _Reader, sec: Mapping[str, Any], path: FieldPath) -> NicConfig:
    r.known(
        sec,
        ("count", "model", "bandwidth", "defaultBandwidth", "minBandwidth", "bandwidthStep"),
        path,
    )
    d = NicConfig()
    config = NicConfig(
        count=r.integer(sec, "count", d.count, path),
        model=r.string(sec, "model", d.model, path),
        bandwidth=r.quantity(sec, "bandwidth", d.bandwidth, path),
        default_bandwidth=r.quantity(sec, "defaultBandwidth", d.default_bandwidth, path),
        min_bandwidth=r.quantity(sec, "minBandwidth", d.min_bandwidth, path),
        bandwidth_step=r.quantity(sec, "bandwidthStep", d.bandwidth_step, path),
    )
    if config.bandwidth_step.value == 0:
        raise r.fail((*path, "bandwidthStep"), "Invalid value: must be greater than zero")
    if not (config.min_bandwidth.value <= config.default_bandwidth.value <= config.bandwidth.value):
        raise r.fail(path, "Invalid value: need minBandwidth <= defaultBandwidth <= bandwidth")
    return config


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


def build_devices(config: SimConfig, *, node: str) -> NodeDevices:
    """The simulated node's devices (pure: the same config and node give the same answer)."""
    g = config.gpus
    devices: list[DeviceInfo] = []
    counter_sets: list[CounterSetInfo] = []
    roots = g.pcie_roots or max(1, (g.count + 1) // 2)

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
                host_path=h.format(index=i, name=name, uuid=gpu_uuid),
                container_path=c.format(index=i, name=name, uuid=gpu_uuid),
            )
            for h, c in g.mounts
        )
        env_key = f"DRA_SIM_{_env_name(name)}"
        edits = ContainerEdits(
            env=(f"{env_key}_UUID={gpu_uuid}", f"{env_key}_MODEL={g.model}"),
            device_nodes=nodes,
            mounts=mounts,
        )
        consumes: tuple[Json, ...] = ()
        if g.partitions:
            counter_set = f"{name}-counters"
            counter_sets.append(
                CounterSetInfo(
                    counter_set,
                    {"compute": str(g.compute_slices), "memory": str(g.memory_slices)},
                )
            )
            consumes = (
                {
                    "counterSet": counter_set,
                    "counters": {
                        "compute": {"value": str(g.compute_slices)},
                        "memory": {"value": str(g.memory_slices)},
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
        for profile in g.partitions:
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
    """Reports for the devices a health file names (see examples/kubeletplugin/health.yaml).

    Format: a mapping from device name to either a bare status (``Unhealthy``) or
    ``{health, severity, message}``. Unlisted devices are healthy.
    """
    data = yaml.safe_load(text) if text.strip() else {}
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InvalidInput("", (), "the health file must map device names to health", source=source)
    out: dict[str, HealthReport] = {}
    for raw_name in sorted(data, key=str):
        name = str(raw_name)
        entry = data[raw_name]
        path: FieldPath = (name,)
        if name not in devices:
            raise InvalidInput("", path, "Not found: no such device on this node", source=source)
        if isinstance(entry, str):
            entry = {"health": entry}
        if not isinstance(entry, Mapping):
            raise InvalidInput(
                "", path, "must be a status or {health, severity, message}", source=source
            )
        health = entry.get("health", UNHEALTHY)
        if health not in HEALTH_VALUES:
            shown = ", ".join(f'"{v}"' for v in HEALTH_VALUES)
            raise InvalidInput(
                "",
                (*path, "health"),
                f"Unsupported value: {health!r}: supported values: {shown}",
                source=source,
            )
        severity = entry.get("severity", "")
        message = entry.get("message", "")
        if not isinstance(severity, str) or not isinstance(message, str):
            raise InvalidInput("", path, "severity and message must be strings", source=source)
        out[name] = HealthReport(device=name, health=health, severity=severity, message=message)
    return out


class SimulatedProfile:
    """The bundled backend: devices from a :class:`SimConfig`, side effects as marker files."""

    def __init__(
        self, config: SimConfig, *, node: str, state_dir: Path, health_file: Path | None
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
