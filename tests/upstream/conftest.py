"""The upstream Go allocator for these tests: built with scripts/build-upstream.sh (fast once
built), one process per test session. Tests skip only when Go itself is missing; a failing
build fails them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from dra_solver.service import upstream


@pytest.fixture(scope="session")
def upstream_allocator() -> Iterator[upstream.UpstreamAllocator]:
    if not os.environ.get("DRA_SOLVER_K8S_BIN") and shutil.which("go") is None:
        pytest.skip("Go is not installed: the upstream allocator (tools/upstream-allocator) cannot be built")
    path = upstream.binary(build=True)
    with upstream.UpstreamAllocator(path) as allocator:
        yield allocator
