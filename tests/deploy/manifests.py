"""Rendered manifests, shared by the deploy tests (rendering is cheap but not free)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from tests.deploy import kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
KUSTOMIZATIONS = sorted(
    str(p.parent.relative_to(ROOT))
    for p in DEPLOY.rglob("kustomization.yaml")
)


@cache
def rendered(directory: str) -> tuple[dict[str, Any], ...]:
    return tuple(kustomize.render(ROOT / directory))


def overlay(name: str) -> tuple[dict[str, Any], ...]:
    return rendered(f"deploy/overlays/{name}")


def find(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind} {name}, found {len(hits)}"
    return hits[0]
