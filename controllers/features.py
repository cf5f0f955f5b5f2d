"""The Kubernetes feature gates the controllers honour, by upstream's names and v1.37 defaults.

``--feature-gates DRADeviceBindingConditions=false`` reads as kube-scheduler's flag does: a
comma-separated list of ``Name=true|false``. Only the gates that change what the controllers
do are known here; a gate upstream locks to its default (GA features) can be named but not
changed, with upstream's message. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dra_solver.model import gate_value

# name -> (default in v1.37, locked to the default)
GATES: dict[str, tuple[bool, bool]] = {
    # Extended resources backed by DRA: GA in v1.37, locked on.
    "DRAExtendedResource": (True, True),
    # Binding conditions on devices: beta in v1.36 and v1.37, on by default.
    "DRADeviceBindingConditions": (True, False),
    # status.devices of a ResourceClaim: GA in v1.37, locked on.
    "DRAResourceClaimDeviceStatus": (True, True),
}


class FeatureGateError(ValueError):
    """A --feature-gates value upstream would refuse too."""


@dataclass(frozen=True, slots=True)
class KubeFeatures:
    extended_resource: bool = True
    binding_conditions: bool = True
    device_status: bool = True

    @property
    def device_binding(self) -> bool:
        """Upstream's ``DeviceBindingAndStatus``: binding conditions need device status too."""
        return self.binding_conditions and self.device_status

    def solver_gates(self) -> str:
        """The solver's own gate spelling for what the scheduler allows it to allocate."""
        return "" if self.device_binding else "DeviceBindingAndStatus=false"


_FIELDS = {
    "DRAExtendedResource": "extended_resource",
    "DRADeviceBindingConditions": "binding_conditions",
    "DRAResourceClaimDeviceStatus": "device_status",
}


def parse(text: str) -> KubeFeatures:
    """``A=true,B=false`` over the v1.37 defaults; unknown names, bad values and changes to a
    locked gate are errors (one line each, naming the gate)."""
    out = KubeFeatures()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep:
            raise FeatureGateError(f'--feature-gates: missing "=" in {item!r}')
        if name not in GATES:
            raise FeatureGateError(f"--feature-gates: unrecognized feature gate: {name} (known: {', '.join(sorted(GATES))})")
        enabled = gate_value(value)
        if enabled is None:
            raise FeatureGateError(f'--feature-gates: invalid value of {name}={value}, err: strconv.ParseBool: parsing "{value}": invalid syntax')
        default, locked = GATES[name]
        if locked and enabled != default:
            raise FeatureGateError(f"--feature-gates: cannot set feature gate {name} to {str(enabled).lower()}, feature is locked to {str(default).lower()}")
        out = replace(out, **{_FIELDS[name]: enabled})
    return out
