"""Suite-wide settings: hypothesis profiles and where the test data is."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from dra_solver.service import upstream

ROOT = Path(__file__).resolve().parents[1]

# The default profile is derandomized so CI sees the same examples every run; the long
# profile (HYPOTHESIS_PROFILE=long) explores fresh ones.
settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


DATA_DIR = ROOT / "tests" / "data"
"""Test data kept in the repository: upstream's conformance cases and the real-world corpus
(copied from the shared case collection; see the README in each folder)."""


@pytest.fixture(scope="session")
def upstream_allocator() -> Iterator[upstream.UpstreamAllocator]:
    """The upstream Go allocator: built with scripts/build-upstream.sh (fast once built), one
    process per test session. Tests skip only when Go itself is missing; a failing build fails
    them."""
    if not os.environ.get("DRA_SOLVER_K8S_BIN") and shutil.which("go") is None:
        pytest.skip("Go is not installed: the upstream allocator (tools/upstream-allocator) cannot be built")
    path = upstream.binary(build=True)
    with upstream.UpstreamAllocator(path) as allocator:
        yield allocator


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fuzz campaigns' largest per-input memory peaks (tests/fuzzbounds.py), when fuzz
    tests ran in this process (not under xdist's workers): what the long profile reports."""
    from tests.fuzzbounds import peaks

    if peaks:
        shown = ", ".join(f"{name} {mib:.1f} MiB" for name, mib in sorted(peaks.items()))
        terminalreporter.write_line(f"fuzz campaigns, largest per-input Python memory (and process growth): {shown}")


# The real kube-apiserver (upstream v1.37.2) for the companion tests: see tests/realkube.py.
from tests.realkube import control_plane, kube_cluster, upstream_cluster, upstream_plane  # noqa: E402, F401
