"""Allocator feature gates, with upstream's names and Kubernetes' ``Name=bool,...`` syntax.

A gate that is off makes the allocators behave as a cluster with that gate off does (for
example adminAccess requested with AdminAccess off is an error), so comparisons with upstream
stay honest for clusters that have not enabled everything.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from dra_solver.model.errors import InvalidInput, clip, quote

GATE_NAMES: dict[str, str] = {
    "AdminAccess": "admin_access",
    "PrioritizedList": "prioritized_list",
    "PartitionableDevices": "partitionable_devices",
    "DeviceTaints": "device_taints",
    "DeviceBindingAndStatus": "device_binding_and_status",
    "ConsumableCapacity": "consumable_capacity",
    "ListTypeAttributes": "list_type_attributes",
}


@dataclass(frozen=True, slots=True)
class FeatureGates:
    admin_access: bool = True
    prioritized_list: bool = True
    partitionable_devices: bool = True
    device_taints: bool = True
    device_binding_and_status: bool = True
    consumable_capacity: bool = True
    list_type_attributes: bool = True

    @classmethod
    def parse(cls, text: str, *, base: FeatureGates | None = None) -> FeatureGates:
        """``AdminAccess=true,DeviceTaints=false``; unknown names and values are errors."""
        gates = base or cls()
        changes: dict[str, bool] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep:
                raise InvalidInput("", ("--feature-gates",), f'missing "=" in {quote(item)}')
            if name not in GATE_NAMES:
                known = ", ".join(sorted(GATE_NAMES))
                raise InvalidInput("", ("--feature-gates",), f"unrecognized feature gate: {clip(name)} (known: {known})")
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                raise InvalidInput("", ("--feature-gates",), f"invalid value of {name}={clip(value)}, err: must be true or false")
            changes[GATE_NAMES[name]] = lowered == "true"
        return replace(gates, **changes)

    @classmethod
    def from_mapping(cls, gates: dict[str, Any]) -> FeatureGates:
        """From ``{"AdminAccess": true, ...}`` (the conformance case format); missing = off."""
        return cls(**{attr: bool(gates.get(name, False)) for name, attr in GATE_NAMES.items()})

    def to_mapping(self) -> dict[str, bool]:
        by_attr = {attr: name for name, attr in GATE_NAMES.items()}
        return {by_attr[f.name]: bool(getattr(self, f.name)) for f in fields(self)}

    def __str__(self) -> str:
        return ",".join(f"{k}={'true' if v else 'false'}" for k, v in self.to_mapping().items())
