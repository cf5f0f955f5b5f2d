"""The ``pack`` policy: partitions before whole GPUs, whatever order the driver publishes.

Issue 8's measurement in miniature: with whole GPUs listed first, first-fit gives a small
claim a whole GPU; ``pack`` gives it a partition, so a later claim for a whole GPU still fits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dra_solver.model import allocate
from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocationRequest, Inventory
from dra_solver.model.cel import CelEnvironment
from dra_solver.model.check import check_allocation
from dra_solver.model.decode import decode_all

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import generate

CEL = CelEnvironment()


def _inventory(order: str) -> Inventory:
    return Inventory.from_objects(decode_all(generate.mig_cluster(order, nodes=1)))


def _claim(name: str, gib: int) -> o.ResourceClaim:
    (claim,) = decode_all([generate.memory_claim(name, gib)])
    assert isinstance(claim, o.ResourceClaim)
    return claim


def _allocate(inventory: Inventory, claim: o.ResourceClaim, policy: str) -> o.AllocationResult:
    request = AllocationRequest(claims=(claim,), node=inventory.node("node-0"), inventory=inventory, policy=policy)
    outcome = allocate(request, cel=CEL)
    assert outcome.allocated
    assert not check_allocation(request, list(outcome.results), cel=CEL)
    return outcome.results[0]


def _device(result: o.AllocationResult) -> str:
    assert result.devices is not None and result.devices.results
    return result.devices.results[0].device


@pytest.mark.parametrize("order", ["whole-first", "partitions-first", "shuffled"])
def test_pack_takes_the_smallest_partition(order: str) -> None:
    device = _device(_allocate(_inventory(order), _claim("small", 10), "pack"))
    assert "1g-10gb" in device, device


def test_first_fit_follows_the_driver_order() -> None:
    assert _device(_allocate(_inventory("whole-first"), _claim("small", 10), "first-fit")) == "gpu-0"


def test_pack_fills_an_opened_gpu_before_opening_another() -> None:
    inventory = _inventory("whole-first")
    first = _claim("first", 10)
    result = _allocate(inventory, first, "pack")
    done = first.model_copy(deep=True)
    done.status = o.ResourceClaimStatus(allocation=result)
    busy = Inventory(inventory.classes, inventory.slices, (), inventory.nodes, (done,))
    second = _device(_allocate(busy, _claim("second", 20), "pack"))
    assert second.startswith(_device(result).split("-1g")[0] + "-"), (second, _device(result))
