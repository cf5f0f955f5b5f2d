"""Suite-wide settings: hypothesis profiles and the location of the shared test data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fuzz campaigns' largest per-input memory peaks (tests/fuzzbounds.py), when fuzz
    tests ran in this process (not under xdist's workers): what the long profile reports."""
    from tests.fuzzbounds import peaks

    if peaks:
        shown = ", ".join(f"{name} {mib:.1f} MiB" for name, mib in sorted(peaks.items()))
        terminalreporter.write_line(f"fuzz campaigns, largest per-input Python memory (and process growth): {shown}")


def shared_dir() -> Path:
    """``../shared`` beside the checkout (as CI lays it out), or ``$DRA_SHARED_DIR``."""
    env = os.environ.get("DRA_SHARED_DIR")
    if env:
        return Path(env)
    beside = (ROOT.parent / "shared").resolve()
    return beside if beside.is_dir() else Path("/work/shared")


# The real kube-apiserver (upstream v1.37.2) for the companion tests: see tests/realkube.py.
from tests.realkube import control_plane, kube_cluster  # noqa: E402, F401
