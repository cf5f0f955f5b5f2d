"""Shared helpers of the CP-SAT feature tests: build a request, solve it both ways (fast path
and forced model), and check every allocation with the independent checker."""

from __future__ import annotations

from typing import Any

from dra_solver.model import allocate_cpsat
from dra_solver.model import objects as o
from dra_solver.model.allocation import (
    AllocatedState,
    AllocationOutcome,
    AllocationRequest,
    Inventory,
)
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.check import check_allocation
from dra_solver.model.decode import decode_object
from dra_solver.model.features import FeatureGates
from tests.builders import DRIVER_A, DRIVER_B
from tests.model.alloc_builders import device_class, node

CEL = CelEnvironment()


def make_request(
    claims: list[o.ResourceClaim],
    slices: list[o.ResourceSlice],
    *,
    classes: tuple[o.DeviceClass, ...] = (),
    allocated: AllocatedState | None = None,
    gates: FeatureGates | None = None,
    rules: tuple[o.DeviceTaintRule, ...] = (),
    policy: str = "",
    time_limit: float | None = 10.0,
    allocated_claims: tuple[o.ResourceClaim, ...] = (),
) -> AllocationRequest:
    inventory = Inventory(
        classes=classes or (device_class(), device_class("class-b", DRIVER_B)),
        slices=tuple(slices),
        taint_rules=rules,
        claims=allocated_claims,
        extra_allocated=allocated or AllocatedState(),
    )
    return AllocationRequest(
        claims=tuple(claims),
        node=node(),
        inventory=inventory,
        gates=gates or FeatureGates(),
        policy=policy,
        time_limit=time_limit,
    )


def solve(request: AllocationRequest, *, fast_path: bool = False) -> AllocationOutcome:
    """Allocate with CP-SAT; every allocation must pass ``model.check``."""
    outcome = allocate_cpsat(request, cel=CEL, fast_path=fast_path)
    if outcome.allocated:
        violations = check_allocation(request, outcome, cel=CEL)
        assert not violations, "\n".join(str(v) for v in violations)
    return outcome


def solve_both(request: AllocationRequest) -> AllocationOutcome:
    """The forced model and the default path agree on the verdict; returns the model's."""
    modeled = solve(request)
    fast = solve(request, fast_path=True)
    assert fast.allocated == modeled.allocated
    return modeled


def devices(outcome: AllocationOutcome, claim: int = 0) -> list[str]:
    """``request=device`` of one claim's results, in result order."""
    result = outcome.results[claim]
    assert result.devices is not None
    return [f"{r.request}={r.device}" for r in result.devices.results or []]


def counter_slice(
    sets: dict[str, dict[str, str]], *, pool: str = "pool-1", count: int = 2, driver: str = DRIVER_A
) -> o.ResourceSlice:
    """A slice holding only shared counters: ``{"gpu-0": {"mem": "4"}}``."""
    obj = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{pool}-counters"},
            "spec": {
                "driver": driver,
                "nodeName": "node-1",
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                "sharedCounters": [
                    {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}
                    for name, counters in sets.items()
                ],
            },
        }
    )
    assert isinstance(obj, o.ResourceSlice)
    return obj


def consumes(counter_set: str, **counters: str) -> list[dict[str, Any]]:
    return [{"counterSet": counter_set, "counters": {k: {"value": v} for k, v in counters.items()}}]


