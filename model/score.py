"""The kube-scheduler's FirstAvailable score of an allocation.

API:
- ``first_available_score(claims, results) -> int``
- ``subrequest_weight(index) -> int``: ``8 - index``.
- ``best_possible_score(claims) -> int``: the highest score the claims can get (every
  ``firstAvailable`` request on its first subrequest): node choice stops at a node that has it.

Formula (``computeScore`` in kube-scheduler's DynamicResources plugin): for every claim and
every request of it that uses ``firstAvailable``, add ``8 - i`` for each subrequest ``i`` that
appears (as ``req/sub``) in the claim's results. A subrequest counts once however many devices
it got; requests with ``exactly`` add nothing; 8 is ``FirstAvailableDeviceRequestMaxSize``.
The scheduler uses it to prefer nodes where claims get their more preferred subrequests; our
CP-SAT allocator maximises the same number, so the two allocators can be compared with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_solver.model import objects as o


def subrequest_weight(index: int) -> int:
    """Score contributed by choosing subrequest ``index`` (0 = most preferred)."""
    return o.FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE - index


def best_possible_score(claims: Sequence[o.ResourceClaim]) -> int:
    """The score of every ``firstAvailable`` request getting its first subrequest."""
    requests = sum(1 for c in claims for r in c.spec.devices.requests or [] if r.first_available)
    return subrequest_weight(0) * requests


def first_available_score(
    claims: Sequence[o.ResourceClaim], results: Sequence[o.AllocationResult]
) -> int:
    """Sum of ``8 - i`` over the allocated subrequests of every claim (claims and results align)."""
    score = 0
    for claim, result in zip(claims, results, strict=False):
        allocated = {
            r.request
            for r in (result.devices.results or [] if result.devices else [])
            if "/" in r.request
        }
        for request in claim.spec.devices.requests or []:
            if request.exactly is not None:
                continue
            for i, sub in enumerate(request.first_available or []):
                if f"{request.name}/{sub.name}" in allocated:
                    score += subrequest_weight(i)
    return score
