"""Allocator feature gates, with Kubernetes' gate names and ``Name=bool,...`` syntax.

A gate that is off makes the allocators behave as a cluster with that gate off does (for
example adminAccess requested with DRAAdminAccess off is an error), so comparisons with
upstream stay honest for clusters that have not enabled everything.

Two spellings are accepted. The Kubernetes gate names (``DRAPrioritizedList``, as cluster
operators pass them to kube-scheduler) are listed in :data:`KUBERNETES_GATES` with their stage
and default in Kubernetes v1.37 (pkg/features). The short names of upstream's allocator
(``PrioritizedList``, the fields of ``structured.Features``) stay as they were: scripts use
them. Kubernetes refuses to turn a GA gate that is locked to its default off; we allow it, so
that an older cluster (DRAPrioritizedList off, as in 1.32) can still be modelled.
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
"""The allocator's own names (upstream's ``structured.Features`` fields) -> attribute."""


@dataclass(frozen=True, slots=True)
class KubernetesGate:
    """One DRA feature gate of Kubernetes v1.37 and what it means to the allocators."""

    stage: str
    """``Alpha``, ``Beta`` or ``GA`` in Kubernetes v1.37."""
    default: bool
    """Its default in Kubernetes v1.37."""
    allocator: str | None
    """The :class:`FeatureGates` attribute it sets; None: no effect on choosing devices."""
    supported: bool = True
    """False: the allocators do not implement it, so only ``=false`` is accepted."""


KUBERNETES_GATES: dict[str, KubernetesGate] = {
    "DynamicResourceAllocation": KubernetesGate("GA", True, None),
    "DRAAdminAccess": KubernetesGate("GA", True, "admin_access"),
    "DRAConsumableCapacity": KubernetesGate("Beta", True, "consumable_capacity"),
    "DRADerivedAttributes": KubernetesGate("Alpha", False, None, supported=False),
    # The allocator's DeviceBindingAndStatus is on when both gates are (as kube-scheduler does).
    "DRADeviceBindingConditions": KubernetesGate("Beta", True, "device_binding_and_status"),
    "DRADeviceCompatibilityGroups": KubernetesGate("Alpha", False, None, supported=False),
    "DRADeviceTaintRules": KubernetesGate("GA", True, None),
    "DRADeviceTaints": KubernetesGate("GA", True, "device_taints"),
    "DRAExtendedResource": KubernetesGate("GA", True, None),
    "DRAFractionalCapacityRange": KubernetesGate("Beta", True, None, supported=False),
    "DRAListTypeAttributes": KubernetesGate("Alpha", False, "list_type_attributes"),
    "DRANodeAllocatableResources": KubernetesGate("Alpha", False, None),
    "DRAOptionalNodeOperations": KubernetesGate("Alpha", False, None, supported=False),
    "DRAPartitionableDevices": KubernetesGate("Beta", True, "partitionable_devices"),
    "DRAPartitionableDevicesType": KubernetesGate("Alpha", False, None, supported=False),
    "DRAPrioritizedList": KubernetesGate("GA", True, "prioritized_list"),
    "DRAResourceClaimDeviceStatus": KubernetesGate("GA", True, "device_binding_and_status"),
    "DRAResourceClaimGranularStatusAuthorization": KubernetesGate("Beta", True, None),
    "DRAResourcePoolStatus": KubernetesGate("Alpha", False, None),
    "DRASchedulerFilterTimeout": KubernetesGate("Beta", True, None),
    "DRAWorkloadResourceClaims": KubernetesGate("Beta", False, None),
}
"""Kubernetes v1.37's DRA gates (pkg/features/kube_features.go), sorted by name."""

_PARSE_BOOL = {v: True for v in ("1", "t", "T", "TRUE", "true", "True")} | {v: False for v in ("0", "f", "F", "FALSE", "false", "False")}


def gate_value(value: str) -> bool | None:
    """A --feature-gates value as Kubernetes reads it (Go's strconv.ParseBool: 1, t, T, TRUE,
    true, True and their false forms); None for anything else (the caller says
    ``err: strconv.ParseBool: parsing "VALUE": invalid syntax``)."""
    return _PARSE_BOOL.get(value)

_BOTH_FOR_BINDING = ("DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus")


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
        """``DRAAdminAccess=true,DeviceTaints=false``: Kubernetes' gate names or the
        allocator's; unknown names and values are errors, as kube-scheduler's flag says them."""
        gates = base or cls()
        changes: dict[str, bool] = {}
        binding: dict[str, bool] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep:
                raise InvalidInput("", ("--feature-gates",), f'missing "=" in {quote(item)}')
            if name not in GATE_NAMES and name not in KUBERNETES_GATES:
                raise InvalidInput(
                    "", ("--feature-gates",),
                    f"unrecognized feature gate: {clip(name)} (known: {', '.join(known_gate_names())})",
                )
            value = value.strip()
            parsed = gate_value(value)
            if parsed is None:
                raise InvalidInput(
                    "", ("--feature-gates",), f'invalid value of {name}={clip(value)}, err: strconv.ParseBool: parsing {quote(value)}: invalid syntax'
                )
            on = parsed
            if name in GATE_NAMES:
                changes[GATE_NAMES[name]] = on
                continue
            gate = KUBERNETES_GATES[name]
            if on and not gate.supported:
                raise InvalidInput(
                    "", ("--feature-gates",),
                    f"{name}=true: dra-solver's allocators do not implement this feature (only {name}=false is accepted)",
                )
            if name in _BOTH_FOR_BINDING:
                binding[name] = on
            elif gate.allocator is not None:
                changes[gate.allocator] = on
        if binding:
            # Either gate off turns binding conditions off; both named on turn them on; one
            # named on leaves the other as it was.
            current = changes.get("device_binding_and_status", gates.device_binding_and_status)
            changes["device_binding_and_status"] = (
                all(binding.values()) and (len(binding) == 2 or current)
            )
        return replace(gates, **changes)

    @classmethod
    def from_mapping(cls, gates: dict[str, Any]) -> FeatureGates:
        """From ``{"AdminAccess": true, ...}`` (the conformance case format); missing = off."""
        return cls(**{attr: bool(gates.get(name, False)) for name, attr in GATE_NAMES.items()})

    def to_mapping(self) -> dict[str, bool]:
        """The allocator's names (upstream's ``structured.Features``) -> on/off."""
        by_attr = {attr: name for name, attr in GATE_NAMES.items()}
        return {by_attr[f.name]: bool(getattr(self, f.name)) for f in fields(self)}

    def __str__(self) -> str:
        return ",".join(f"{k}={'true' if v else 'false'}" for k, v in self.to_mapping().items())


def known_gate_names() -> list[str]:
    """Every accepted name: Kubernetes' first (what operators type), then the allocator's."""
    return [*sorted(KUBERNETES_GATES), *sorted(GATE_NAMES)]
