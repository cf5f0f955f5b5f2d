"""--feature-gates: Kubernetes' gate names and the allocator's, as kube-scheduler parses them."""

from __future__ import annotations

import pytest

from dra_solver.model.errors import InvalidInput
from dra_solver.model.features import GATE_NAMES, KUBERNETES_GATES, FeatureGates, known_gate_names


@pytest.mark.parametrize(
    ("kubernetes", "short"),
    [
        ("DRAAdminAccess", "AdminAccess"),
        ("DRAPrioritizedList", "PrioritizedList"),
        ("DRAPartitionableDevices", "PartitionableDevices"),
        ("DRADeviceTaints", "DeviceTaints"),
        ("DRAConsumableCapacity", "ConsumableCapacity"),
        ("DRAListTypeAttributes", "ListTypeAttributes"),
    ],
)
def test_kubernetes_names_mean_what_the_allocator_names_mean(kubernetes: str, short: str) -> None:
    for value in ("false", "true"):
        base = FeatureGates.parse(f"{short}={'false' if value == 'true' else 'true'}")
        assert FeatureGates.parse(f"{kubernetes}={value}", base=base) == FeatureGates.parse(f"{short}={value}", base=base)


def test_binding_conditions_need_both_kubernetes_gates() -> None:
    off = FeatureGates.parse("DRAResourceClaimDeviceStatus=false")
    assert not off.device_binding_and_status
    assert not FeatureGates.parse("DRADeviceBindingConditions=false").device_binding_and_status
    both = FeatureGates.parse("DRADeviceBindingConditions=true,DRAResourceClaimDeviceStatus=true", base=off)
    assert both.device_binding_and_status
    assert not FeatureGates.parse("DRADeviceBindingConditions=true", base=off).device_binding_and_status


def test_gates_without_allocator_effect_are_accepted() -> None:
    assert FeatureGates.parse("DRAExtendedResource=false,DynamicResourceAllocation=true,DRASchedulerFilterTimeout=false") == FeatureGates()


def test_unimplemented_features_may_only_be_off() -> None:
    assert FeatureGates.parse("DRADerivedAttributes=false") == FeatureGates()
    with pytest.raises(InvalidInput, match="DRADerivedAttributes=true: dra-solver's allocators do not implement"):
        FeatureGates.parse("DRADerivedAttributes=true")


def test_errors_read_like_kube_schedulers() -> None:
    with pytest.raises(InvalidInput, match=r"unrecognized feature gate: DRANope \(known: DRAAdminAccess,"):
        FeatureGates.parse("DRANope=true")
    with pytest.raises(InvalidInput, match="invalid value of DRAAdminAccess=yes"):
        FeatureGates.parse("DRAAdminAccess=yes")


def test_known_names_cover_kubernetes_v1_37_dra_gates() -> None:
    names = known_gate_names()
    for gate in ("DRAPrioritizedList", "DRAAdminAccess", "DRADeviceTaints", "DRAPartitionableDevices",
                 "DRAConsumableCapacity", "DRADeviceBindingConditions", "DRAListTypeAttributes",
                 "DRAExtendedResource", "DRAResourceClaimDeviceStatus"):
        assert gate in names
    assert set(GATE_NAMES) <= set(names)
    # Every gate that drives the allocator names a real attribute.
    attrs = {f for f in FeatureGates.__dataclass_fields__}
    assert {g.allocator for g in KUBERNETES_GATES.values() if g.allocator} <= attrs


@pytest.mark.parametrize(("value", "on"), [("1", True), ("t", True), ("T", True), ("TRUE", True), ("True", True), (" true ", True),
                                           ("0", False), ("f", False), ("F", False), ("FALSE", False), ("False", False)])
def test_gate_values_are_read_as_kube_schedulers_flag_reads_them(value: str, on: bool) -> None:
    assert FeatureGates.parse(f"DRAPrioritizedList={value}").prioritized_list is on


@pytest.mark.parametrize("value", ["tRuE", "yes", "", "2"])
def test_values_go_rejects_are_rejected_with_its_words(value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        FeatureGates.parse(f"DRAPrioritizedList={value}")
    assert f'invalid value of DRAPrioritizedList={value}, err: strconv.ParseBool: parsing "{value}": invalid syntax' in str(info.value)
