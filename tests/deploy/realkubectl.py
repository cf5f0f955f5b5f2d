"""deploy/ rendered by upstream's own ``kubectl kustomize`` (the cached v1.37.2 build).

The tests that put manifests in front of the real API server render them with the real
kustomize, so what they check is exactly what ``kubectl apply -k`` would send.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from dra_solver.service.localcluster.controlplane import binaries
from tests.deploy.manifests import ROOT

KUSTOMIZE_TIMEOUT = 120.0


@cache
def kubectl() -> str:
    return str(binaries().kubectl)


@cache
def kustomize(directory: str) -> str:
    """The YAML ``kubectl kustomize <directory>`` prints (directory relative to the repo).

    A kustomize Component cannot be rendered alone: ``deploy/components/X`` renders as
    deploy/base with the component added, as an overlay using it would.
    """
    if "/components/" not in directory:
        return _run_kustomize(ROOT / directory, directory)
    with tempfile.TemporaryDirectory(prefix="kustomize-") as tmp:
        # kustomize takes only relative paths to other kustomizations.
        base = os.path.relpath(ROOT / "deploy" / "base", tmp)
        component = os.path.relpath(ROOT / directory, tmp)
        (Path(tmp) / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources: [{base}]\ncomponents: [{component}]\n")
        return _run_kustomize(Path(tmp), directory)


def _run_kustomize(path: Path, name: str) -> str:
    done = subprocess.run(
        [kubectl(), "kustomize", str(path)],
        capture_output=True, text=True, timeout=KUSTOMIZE_TIMEOUT, check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {name}: {done.stderr.strip()}")
    return done.stdout


def objects(directory: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(kustomize(directory)) if o is not None]


def to_yaml(objs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False)
