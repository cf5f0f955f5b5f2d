"""Prometheus naming rules for what a component's /metrics shows, with the real ``promtool``.

``promtool check metrics`` (Debian's Prometheus, put on CI by scripts/install-prometheus.sh)
checks the exposition format, ``_total`` on counters, base units and help texts; the rules it
does not check are checked here: no ``*_created`` series, no word twice in a row
(``dra_solver_solver_status``), a unit suffix on every duration, ratio and size.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DEBIAN_PROMTOOL = Path("/usr/bin/promtool")
UNIT_WORDS = {"duration": "_seconds", "latency": "_seconds", "gap": "_ratio", "bytes": "_bytes"}


def promtool() -> str:
    found = shutil.which("promtool") or (str(DEBIAN_PROMTOOL) if DEBIAN_PROMTOOL.exists() else None)
    if found is None:
        raise AssertionError(
            "promtool is not installed: scripts/install-prometheus.sh installs Debian's prometheus "
            "package, which has it (scripts/test.sh runs that script)"
        )
    return found


def problems(text: str) -> list[str]:
    """Everything promtool and the rules above find in one /metrics page."""
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False)
    found = [f"promtool: {line}" for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode != 0 and not found:
        found.append(f"promtool exited {done.returncode}")
    for family in text_string_to_metric_families(text):
        name = family.name
        if name.endswith("_created") or any(s.name.endswith("_created") for s in family.samples):
            found.append(f"{name}: a *_created series")
        words = name.split("_")
        for a, b in itertools.pairwise(words):
            if a == b:
                found.append(f"{name}: the word {a!r} twice in a row")
        for word, suffix in UNIT_WORDS.items():
            if word in words and not (name.endswith(suffix) or f"{name}_total".endswith(f"{suffix}_total")):
                found.append(f"{name}: a {word} without the unit suffix {suffix}")
        if family.type == "counter" and not any(s.name.endswith("_total") for s in family.samples if not s.name.endswith("_created")) and family.samples:
            found.append(f"{name}: a counter without _total")
    return found


def names(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}
