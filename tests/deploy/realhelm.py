"""deploy/helm/dra-solver rendered by the real ``helm template`` (helm v4, built from the Go
module proxy at the version pinned in tools/helm/go.mod into the same cache as upstream's
Kubernetes binaries, by scripts/build-upstream.sh)."""

from __future__ import annotations

import subprocess
from functools import cache
from typing import Any

import yaml

from dra_solver.service.localcluster.controlplane import binaries
from tests.deploy.manifests import ROOT

CHART = ROOT / "deploy" / "helm" / "dra-solver"
HELM_TIMEOUT = 120.0


@cache
def helm() -> str:
    return str(binaries(modules=("helm",)).path("helm"))


def render(*args: str) -> str:
    """``helm template dra-solver deploy/helm/dra-solver ARGS...``: the YAML it prints."""
    done = subprocess.run([helm(), "template", "dra-solver", str(CHART), *args],
                          capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)
    if done.returncode != 0:
        raise AssertionError(f"helm template {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def objects(*args: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(render(*args)) if o is not None]
