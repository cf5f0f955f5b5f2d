"""The simulated backend's files: the devices config (``--config``) and the health file.

Both are read by the project's one bounded decoder (``model.decode.parse_documents``: size,
nesting depth and alias expansion limited, no recursion), checked for unknown and duplicate
fields with the API server's wording (``model.decode.field_problems``), then validated by the
pydantic models below. Every problem is one :class:`InvalidInput` naming the file and the field
(``devices.yaml: gpus.partitions.profiles[1].name: Duplicate value: '1g.10gb'``).

``examples/kubeletplugin/devices.yaml`` and ``health.yaml`` document every field.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from dra_solver.model import (
    FieldPath,
    Format,
    InvalidInput,
    QuantityError,
    StrictDecodingError,
    field_problems,
    parse_documents,
    parse_quantity_field,
)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"
HEALTH_VALUES = (HEALTHY, UNHEALTHY, UNKNOWN)

_CUSTOM = "config"
"""Error type of the checks below; ``at`` in its context extends the location."""


def _fail(detail: str, *at: str | int) -> PydanticCustomError:
    # The detail is the whole text (braces escaped: pydantic formats the template).
    return PydanticCustomError(_CUSTOM, detail.replace("{", "{{").replace("}", "}}"), {"at": at})


# --- quantities ------------------------------------------------------------------------------

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


def _quantity(value: object) -> IntQuantity:
    if isinstance(value, IntQuantity):
        return value
    parsed = parse_int_quantity(value)
    if parsed is None:
        raise _fail(f"Invalid value: {value!r}: must be a whole quantity like 80Gi, 400G or 1024")
    return parsed


def _matching(pattern: str, what: str) -> AfterValidator:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise _fail(f"Invalid value: {value!r}: {what}")
        return value

    return AfterValidator(check)


Quantity = Annotated[IntQuantity, PlainValidator(_quantity)]
Count = Annotated[int, Field(strict=True, ge=0)]
Positive = Annotated[int, Field(strict=True, ge=1)]
Seconds = Annotated[float, Field(strict=True, gt=0)]
Name = Annotated[str, Field(strict=True, min_length=1, max_length=64)]
LongName = Annotated[str, Field(strict=True, min_length=1, max_length=4096)]
Names = tuple[Annotated[str, Field(strict=True, min_length=1)], ...]


class _Model(BaseModel):
    # Lists of objects are ``list`` (not tuple) so that strict field checking walks into them.
    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True)


# --- the devices config ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionProfile:
    """A MIG-like profile as built: defaults filled in from its GPU."""

    name: str
    compute: int
    memory_slices: int
    memory: IntQuantity
    count: int


class ProfileConfig(_Model):
    name: Annotated[str, Field(strict=True, min_length=1, max_length=20), _matching(r"^[a-z0-9]+(\.[a-z0-9]+)*$", "must look like 1g.10gb")]
    compute: Positive = 1
    memory_slices: Positive = Field(1, alias="memorySlices")
    memory: Quantity | None = None
    """Default: the GPU's memory * memorySlices / the GPU's memorySlices."""
    count: Positive | None = None
    """Default: as many as fit on one GPU."""


class PartitionsConfig(_Model):
    compute_slices: Positive = Field(7, alias="computeSlices")
    memory_slices: Positive = Field(8, alias="memorySlices")
    profiles: list[ProfileConfig] = []


def _profiles(partitions: PartitionsConfig, memory: IntQuantity) -> tuple[PartitionProfile, ...]:
    """The profiles with their defaults, checked against the GPU's slices."""
    out: list[PartitionProfile] = []
    seen: set[str] = set()
    for i, p in enumerate(partitions.profiles):
        if p.name in seen:
            raise _fail(f"Duplicate value: {p.name!r}", "profiles", i, "name")
        seen.add(p.name)
        if p.compute > partitions.compute_slices or p.memory_slices > partitions.memory_slices:
            raise _fail("Invalid value: the profile is larger than the GPU's slices", "profiles", i)
        fits = min(partitions.compute_slices // p.compute, partitions.memory_slices // p.memory_slices)
        count = fits if p.count is None else p.count
        if count > fits:
            raise _fail(f"Invalid value: {count}: at most {fits} fit on one GPU", "profiles", i, "count")
        size = p.memory if p.memory is not None else memory.scaled(p.memory_slices, partitions.memory_slices)
        out.append(PartitionProfile(p.name, p.compute, p.memory_slices, size, count))
    # Partition devices are named gpu-N-<profile>-M; keep them within a DNS label.
    if max((len(p.name) + 14 for p in out), default=0) > 63:
        raise _fail("Invalid value: partition device names would exceed 63 characters")
    return tuple(out)


class MountConfig(_Model):
    host_path: LongName = Field(alias="hostPath")
    container_path: LongName = Field(alias="containerPath")


class GpuConfig(_Model):
    count: Count = 8
    model: Name = "SimGPU-80GB"
    memory: Quantity = IntQuantity(80 * 1024**3, True)
    driver_version: Annotated[Name, _matching(r"^[0-9]+\.[0-9]+\.[0-9]+$", "must be MAJOR.MINOR.PATCH")] = Field(
        "1.0.0", alias="driverVersion"
    )
    numa_nodes: Positive = Field(2, alias="numaNodes")
    nvlink_domains: Positive = Field(1, alias="nvlinkDomains")
    pcie_roots: Count = Field(0, alias="pcieRoots")
    """0: one root per two GPUs."""
    device_nodes: Names = Field((), alias="deviceNodes")
    mounts: list[MountConfig] = []
    partitions: PartitionsConfig = PartitionsConfig()

    @field_validator("partitions")
    @classmethod
    def _fit(cls, partitions: PartitionsConfig, info: ValidationInfo) -> PartitionsConfig:
        if isinstance(info.data.get("memory"), IntQuantity):  # else its own error is reported
            _profiles(partitions, info.data["memory"])
        return partitions

    def profiles(self) -> tuple[PartitionProfile, ...]:
        return _profiles(self.partitions, self.memory)


class NicConfig(_Model):
    count: Count = 0
    model: Name = "SimNIC-400G"
    bandwidth: Quantity = IntQuantity(400 * 1000**3, False)
    default_bandwidth: Quantity = Field(IntQuantity(10 * 1000**3, False), alias="defaultBandwidth")
    min_bandwidth: Quantity = Field(IntQuantity(1000**3, False), alias="minBandwidth")
    bandwidth_step: Quantity = Field(IntQuantity(1000**3, False), alias="bandwidthStep")

    @model_validator(mode="after")
    def _ordered(self) -> NicConfig:
        if self.bandwidth_step.value == 0:
            raise _fail("Invalid value: must be greater than zero", "bandwidthStep")
        if not self.min_bandwidth.value <= self.default_bandwidth.value <= self.bandwidth.value:
            raise _fail("Invalid value: need minBandwidth <= defaultBandwidth <= bandwidth")
        return self


class HealthConfig(_Model):
    file: Path | None = None
    """Relative paths are relative to the config file."""
    poll_seconds: Seconds = Field(2.0, alias="pollSeconds")
    no_execute_severities: Names = Field(("critical",), alias="noExecuteSeverities")
    check_timeout_seconds: Count = Field(0, alias="checkTimeoutSeconds")

    @field_validator("file", mode="before")
    @classmethod
    def _path(cls, value: object) -> object:
        if isinstance(value, str) and 0 < len(value) <= 4096:
            return Path(value)
        if isinstance(value, Path):
            return value
        raise _fail(f"Invalid value: {value!r}: must be a non-empty string of at most 4096 characters")

    @field_validator("no_execute_severities")
    @classmethod
    def _lower(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(s.lower() for s in value) or ("critical",)


class SimulateConfig(_Model):
    fail_prepare: Names = Field((), alias="failPrepare")


class SimConfig(_Model):
    """The simulated backend's whole configuration; defaults are "8 GPUs, nothing else"."""

    gpus: GpuConfig = GpuConfig()
    nics: NicConfig = NicConfig()
    health: HealthConfig = HealthConfig()
    cdi_class: Annotated[Name, _matching(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", "must be a CDI class name")] = Field(
        "device", alias="cdiClass"
    )
    resync_seconds: Seconds = Field(30.0, alias="resyncSeconds")
    simulate: SimulateConfig = SimulateConfig()

    @field_validator("gpus", "nics", mode="before")
    @classmethod
    def _count_shorthand(cls, value: object) -> object:
        # ``gpus: 8`` means ``gpus: {count: 8}`` (likewise for nics).
        return {"count": value} if isinstance(value, int) and not isinstance(value, bool) else value

    @property
    def fail_prepare(self) -> tuple[str, ...]:
        return self.simulate.fail_prepare


def load_config(path: Path | None) -> SimConfig:
    """Read the simulated backend's config; ``None`` gives the default 8-GPU node.

    Raises InvalidInput naming the file and field for anything wrong, never a traceback.
    """
    if path is None:
        return SimConfig()
    source = str(path)
    return parse_config(_one_document(_read(path, source), source), source=source, base_dir=path.parent)


def parse_config(data: Mapping[str, Any], *, source: str = "", base_dir: Path | None = None) -> SimConfig:
    """The config from its decoded document (see :func:`load_config`)."""
    if not isinstance(data, Mapping):
        raise InvalidInput("", (), "the config must be a mapping", source=source)
    config = _validate(SimConfig, dict(data), source=source)
    file = config.health.file
    if file is not None and not file.is_absolute() and base_dir is not None:
        config = config.model_copy(update={"health": config.health.model_copy(update={"file": base_dir / file})})
    return config


# --- the health file -------------------------------------------------------------------------


class HealthEntry(_Model):
    health: Annotated[str, Field(strict=True), AfterValidator(lambda v: _one_of(v, HEALTH_VALUES))] = UNHEALTHY
    severity: Annotated[str, Field(strict=True)] = ""
    message: Annotated[str, Field(strict=True)] = ""


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        shown = ", ".join(f'"{v}"' for v in allowed)
        raise _fail(f"Unsupported value: {value!r}: supported values: {shown}")
    return value


class _HealthFile(_Model):
    """Device name -> a bare status or ``{health, severity, message}``."""

    devices: dict[str, HealthEntry]

    @field_validator("devices", mode="before")
    @classmethod
    def _bare_status(cls, value: object) -> object:
        if isinstance(value, Mapping):
            return {k: {"health": v} if isinstance(v, str) else v for k, v in value.items()}
        return value


def parse_health_file(text: str, *, source: str, devices: Collection[str]) -> dict[str, HealthEntry]:
    """The entries of a health file for devices of this node (unlisted devices are healthy)."""
    data = _one_document(text, source)
    for name in sorted(data, key=str):
        if str(name) not in devices:
            raise InvalidInput("", (str(name),), "Not found: no such device on this node", source=source)
    return _validate(_HealthFile, {"devices": data}, source=source, skip=1).devices


# --- reading and errors ----------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def _read(path: Path, source: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise InvalidInput("", (), f"cannot read: {err.strerror or err}", source=source) from None
    except UnicodeDecodeError as err:
        raise InvalidInput("", (), f"cannot read: not UTF-8 text: {err.reason}", source=source) from None


def _one_document(text: str, source: str) -> dict[str, Any]:
    """The file's one mapping, through the bounded decoder (an empty file is an empty mapping)."""
    docs = parse_documents(text, source=source)
    if len(docs) > 1:
        raise InvalidInput("", (), f"expected one document, found {len(docs)}", source=source)
    return docs[0] if docs else {}


def _validate(model: type[M], data: dict[str, Any], *, source: str, skip: int = 0) -> M:
    """``data`` as ``model``: unknown or duplicate fields first (all of them, as the API server's
    strict decoding reports them), then the first typed problem. ``skip`` drops leading path
    elements that exist only in the wrapper model."""
    problems = [(path[skip:], what) for path, what in field_problems(model, data)]
    if problems:
        raise StrictDecodingError("", problems, source=source)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise _invalid(err, source=source, skip=skip) from None


_MUST = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "string_too_short": "must be a non-empty string",
}


def _invalid(err: ValidationError, *, source: str, skip: int) -> InvalidInput:
    first = err.errors()[0]
    path: FieldPath = tuple(first["loc"])[skip:]
    kind, value, ctx = first["type"], first.get("input"), first.get("ctx") or {}
    if kind == _CUSTOM:
        path = (*path, *ctx.get("at", ()))
        detail = first["msg"]
    elif kind == "missing":
        detail = "Required value"
    elif kind == "extra_forbidden":
        detail = "unknown field"
    elif kind == "greater_than_equal":
        detail = f"Invalid value: {value!r}: must be an integer >= {ctx['ge']}"
    elif kind == "greater_than":
        detail = f"Invalid value: {value!r}: must be a positive number"
    elif kind == "string_too_long":
        detail = f"Invalid value: {value!r}: must be at most {ctx['max_length']} characters"
    elif kind in _MUST:
        detail = f"Invalid value: {value!r}: {_MUST[kind]}"
    else:
        detail = f"Invalid value: {value!r}: {first['msg'][:1].lower()}{first['msg'][1:]}"
    more = len(err.errors()) - 1
    if more:
        detail += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InvalidInput("", path, detail, source=source)

