"""Every manifest in deploy/ parses, renders, and is a valid Kubernetes object.

Rendering uses tests/deploy/kustomize.py everywhere; the same directories are rendered by
upstream's ``kubectl kustomize`` too and the two must agree object for object, which keeps the
small renderer honest.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy import kustomize, realkubectl, schema
from tests.deploy.manifests import DEPLOY, KUSTOMIZATIONS, OVERLAYS, ROOT, overlay, rendered

OPERATOR_KINDS = set(schema.OPERATOR_SCHEMAS)
CHART = DEPLOY / "helm"
"""Helm templates and the chart's files: rendered and checked by test_helm.py instead."""


def _not_chart(paths: list[Any]) -> list[Any]:
    return [p for p in paths if CHART not in p.parents]


def test_every_yaml_and_json_file_parses() -> None:
    files = _not_chart(sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]))
    assert files
    for path in files:
        docs = kustomize.load_yaml_documents(path)
        assert docs, f"{path}: empty"
        for doc in docs:
            if path.name != "kustomization.yaml" and "scrape_configs" not in doc:
                assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{path}: not an object"
    for path in _not_chart(sorted(DEPLOY.rglob("*.json"))):
        json.loads(path.read_text(encoding="utf-8"))


def test_every_manifest_file_is_used() -> None:
    # A manifest not listed in any kustomization would never be applied.
    listed: set[str] = set()
    for directory in KUSTOMIZATIONS:
        (k,) = kustomize.load_yaml_documents(ROOT / directory / "kustomization.yaml")
        base = ROOT / directory
        for entry in [*k.get("resources", []), *(p.get("path", "") for p in k.get("patches", []))]:
            listed.add(str((base / entry).resolve()))
        for gen in k.get("configMapGenerator", []):
            for spec in gen.get("files", []):
                listed.add(str((base / spec.rpartition("=")[2]).resolve()))
    for path in _not_chart(sorted(DEPLOY.rglob("*"))):
        if path.is_dir() or path.name == "kustomization.yaml" or path.parent.name == "prometheus":
            continue
        assert str(path.resolve()) in listed, f"{path.relative_to(ROOT)} is in no kustomization"


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_renders(directory: str) -> None:
    if "components" in directory:
        pytest.skip("components render as part of an overlay")
    objects = rendered(directory)
    assert objects


@pytest.mark.parametrize(
    "directory", [d for d in KUSTOMIZATIONS if "components" not in d and d != "deploy/base"]
)
def test_renderer_agrees_with_kubectl_kustomize(directory: str) -> None:
    # Upstream's kubectl v1.37.2, the one the suite builds (tests/deploy/realkubectl.py).
    theirs = {kustomize.identity(o): o for o in realkubectl.objects(directory)}
    ours = {kustomize.identity(o): o for o in rendered(directory)}
    assert sorted(ours) == sorted(theirs)
    for key, obj in ours.items():
        assert obj == theirs[key], f"{key} differs between our renderer and kubectl kustomize"


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    out = []
    targets = {name: f"deploy/overlays/{name}" for name in OVERLAYS}
    targets["monitoring"] = "deploy/monitoring"
    for name, directory in targets.items():
        try:
            objects = rendered(directory)
        except (kustomize.KustomizeError, OSError) as err:
            # Reported by test_renders; keep collection going.
            out.append((f"{name}:unrenderable", {"error": str(err)}))
            continue
        for obj in objects:
            kind, ns, obj_name = kustomize.identity(obj)
            out.append((f"{name}:{kind}/{ns}/{obj_name}", obj))
    return out


@pytest.mark.parametrize(("ident", "obj"), _all_objects(), ids=[i for i, _ in _all_objects()])
def test_object_is_valid_for_the_kubernetes_api(ident: str, obj: dict[str, Any]) -> None:
    assert "error" not in obj, obj.get("error")
    if obj["kind"] in OPERATOR_KINDS:
        assert schema.operator_errors(obj) == []
        return
    errors = schema.strict_errors(obj, schema.model_name(obj))
    assert errors == [], f"{ident}:\n  " + "\n  ".join(errors)
    schema.deserialize(obj)  # required fields
    namespaced = obj["kind"] not in schema.CLUSTER_SCOPED
    assert ("namespace" in obj["metadata"]) == namespaced, f"{ident}: namespace set wrongly"


@pytest.mark.parametrize("name", OVERLAYS)
def test_namespaces_exist_and_labels_are_consistent(name: str) -> None:
    objects = overlay(name)
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    for obj in objects:
        ns = obj["metadata"].get("namespace")
        assert ns is None or ns in namespaces, f"{kustomize.identity(obj)}: namespace not created"
        if obj["kind"] in {"Deployment", "DaemonSet"}:
            selector = obj["spec"]["selector"]["matchLabels"]
            labels = obj["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items(), f"{kustomize.identity(obj)}: selector"


def test_strict_schema_catches_typos() -> None:
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"spec": {"containers": [{"name": "c", "readinesProbe": {}}]}},
            "replicas": "2",
        },
    }
    errors = schema.strict_errors(bad, "V1Deployment")
    assert any("readinesProbe: unknown field" in e for e in errors)
    assert any("spec.replicas: expected an integer" in e for e in errors)


def test_overlays_need_no_custom_resource_definitions() -> None:
    # `kubectl apply -k deploy/overlays/...` must work on a bare cluster; prometheus-operator
    # objects live in deploy/monitoring, applied only where the operator runs.
    for name in OVERLAYS:
        for obj in overlay(name):
            assert obj["kind"] not in OPERATOR_KINDS, f"{name}: {kustomize.identity(obj)}"
