"""service.bench.Pinning: where a benchmark puts serve and its client (``--pin``)."""

from __future__ import annotations

import pytest

from dra_solver.service import bench
from dra_solver.service.bench import Pinning


def test_each_mode_gives_serve_the_last_cpu_and_the_client_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "allowed_cpus", lambda: (0, 2, 5))
    python = Pinning.choose("python")
    assert (python.cpu, python.client, python.describe()) == (5, (0, 2), "python@5")
    assert python.serve_flags() == ("--python-cpu", "5") and python.serve_cpus() == ()
    whole = Pinning.choose("serve")
    assert (whole.describe(), whole.serve_flags(), whole.serve_cpus(), whole.client) == ("serve@5", (), (5,), (0, 2))
    assert Pinning.choose("none") == Pinning() and Pinning().describe() == "none"


def test_one_cpu_pins_nothing_and_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "allowed_cpus", lambda: (3,))
    assert Pinning.choose("python") == Pinning()
    with pytest.raises(ValueError, match="--pin: not one of python, serve, none: 'fast'"):
        Pinning.choose("fast")
