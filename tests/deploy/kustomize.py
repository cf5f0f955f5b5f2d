"""A small kustomize renderer, so the manifests can be checked where no kubectl is installed.

It implements exactly the kustomize features `deploy/` uses, with kustomize's semantics:
``resources`` (files and directories), ``components`` (kind Component, applied after the
resources), ``images``, ``replicas``, ``patches`` (strategic-merge files or inline, with an
optional ``target``; and JSON 6902 lists), and ``configMapGenerator`` (files and literals,
without the name hash suffix). Anything else in a kustomization is an error, so a new feature
in the manifests cannot slip past the tests unrendered. Where ``kubectl kustomize`` exists, a
test renders with both and compares.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "components",
    "images",
    "replicas",
    "patches",
    "configMapGenerator",
    "generatorOptions",
}

# Strategic-merge keys for the lists our patches touch (from the Kubernetes API's
# x-kubernetes-patch-merge-key). Lists not named here are replaced wholesale, as in kustomize.
MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "tolerations": "key",
    "imagePullSecrets": "name",
}


class KustomizeError(Exception):
    """A kustomization this renderer (or kustomize) would reject."""


def load_yaml_documents(path: Path) -> list[Obj]:
    """Every non-empty document of a YAML file."""
    with path.open(encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise KustomizeError(f"{path}: document #{i} is not a mapping")
    return docs


def kustomization_file(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    raise KustomizeError(f"{directory}: no kustomization file")


def render(directory: Path) -> list[Obj]:
    """The objects ``kubectl kustomize DIRECTORY`` prints, in resource order."""
    return _render(directory.resolve(), expect_kind="Kustomization")


def _render(directory: Path, *, expect_kind: str) -> list[Obj]:
    path = kustomization_file(directory)
    (k,) = load_yaml_documents(path)
    kind = k.get("kind", "Kustomization")
    if kind != expect_kind:
        raise KustomizeError(f"{path}: kind {kind}, expected {expect_kind}")
    unknown = sorted(set(k) - SUPPORTED_FIELDS)
    if unknown:
        raise KustomizeError(f"{path}: unsupported fields {unknown}")

    objects: list[Obj] = []
    for entry in k.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            objects.extend(_render(target, expect_kind="Kustomization"))
        elif target.is_file():
            _check_inside(directory, target, path)
            objects.extend(load_yaml_documents(target))
        else:
            raise KustomizeError(f"{path}: resource {entry!r} does not exist")
    objects.extend(_generate_config_maps(directory, k, path))
    for entry in k.get("components", []):
        objects = _apply_component(objects, (directory / entry).resolve())
    _check_unique(objects, path)
    return _transform(objects, directory, k, path)


def _apply_component(objects: list[Obj], directory: Path) -> list[Obj]:
    path = kustomization_file(directory)
    (k,) = load_yaml_documents(path)
    if k.get("kind") != "Component":
        raise KustomizeError(f"{path}: a component must have kind Component")
    unknown = sorted(set(k) - SUPPORTED_FIELDS)
    if unknown:
        raise KustomizeError(f"{path}: unsupported fields {unknown}")
    added: list[Obj] = []
    for entry in k.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            added.extend(_render(target, expect_kind="Kustomization"))
        else:
            _check_inside(directory, target, path)
            added.extend(load_yaml_documents(target))
    added.extend(_generate_config_maps(directory, k, path))
    return _transform([*objects, *added], directory, k, path)


def _transform(objects: list[Obj], directory: Path, k: Obj, path: Path) -> list[Obj]:
    objects = [copy.deepcopy(o) for o in objects]
    for patch_spec in k.get("patches", []):
        objects = _apply_patch(objects, patch_spec, directory, path)
    for image in k.get("images", []):
        _apply_image(objects, image)
    for replica in k.get("replicas", []):
        hits = [o for o in objects if o["metadata"]["name"] == replica["name"]]
        if not hits:
            raise KustomizeError(f"{path}: replicas: no object named {replica['name']!r}")
        for obj in hits:
            obj.setdefault("spec", {})["replicas"] = replica["count"]
    return objects


def _check_inside(root: Path, target: Path, path: Path) -> None:
    # kustomize's load restrictor: files (not directories) must live under the kustomization.
    if root not in target.parents:
        raise KustomizeError(f"{path}: {target} is not in or below {root}")


def _check_unique(objects: list[Obj], path: Path) -> None:
    seen: set[tuple[str, str, str]] = set()
    for obj in objects:
        key = identity(obj)
        if key in seen:
            raise KustomizeError(f"{path}: duplicate object {key}")
        seen.add(key)


def identity(obj: Obj) -> tuple[str, str, str]:
    """(kind, namespace, name): what kustomize keys an object by."""
    meta = obj.get("metadata", {})
    return (obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


def _generate_config_maps(directory: Path, k: Obj, path: Path) -> Iterator[Obj]:
    options = k.get("generatorOptions", {})
    for gen in k.get("configMapGenerator", []):
        opts = {**options, **gen.get("options", {})}
        if not opts.get("disableNameSuffixHash"):
            raise KustomizeError(
                f"{path}: configMapGenerator {gen['name']!r}: this renderer needs "
                "disableNameSuffixHash: true"
            )
        data: dict[str, str] = {}
        for spec in gen.get("files", []):
            key, _, rel = spec.partition("=") if "=" in spec else (Path(spec).name, "", spec)
            file = (directory / rel).resolve()
            _check_inside(directory, file, path)
            data[key] = file.read_text(encoding="utf-8")
        for literal in gen.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        meta: Obj = {"name": gen["name"]}
        if "namespace" in gen:
            meta["namespace"] = gen["namespace"]
        labels = {**options.get("labels", {}), **gen.get("options", {}).get("labels", {})}
        if labels:
            meta["labels"] = labels
        annotations = {
            **options.get("annotations", {}),
            **gen.get("options", {}).get("annotations", {}),
        }
        if annotations:
            meta["annotations"] = annotations
        yield {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _apply_image(objects: list[Obj], image: Obj) -> None:
    name = image["name"]
    for container in _containers(objects):
        ref = container.get("image", "")
        repo, tag, digest = split_image(ref)
        if repo != name:
            continue
        repo = image.get("newName", repo)
        if "digest" in image:
            container["image"] = f"{repo}@{image['digest']}"
        elif "newTag" in image:
            container["image"] = f"{repo}:{image['newTag']}"
        else:
            suffix = f"@{digest}" if digest else (f":{tag}" if tag else "")
            container["image"] = f"{repo}{suffix}"


def split_image(ref: str) -> tuple[str, str, str]:
    """(repository, tag, digest) of an image reference."""
    repo, _, digest = ref.partition("@")
    tag = ""
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo, _, tag = repo.rpartition(":")
    return repo, tag, digest


def _containers(objects: list[Obj]) -> Iterator[Obj]:
    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


def pod_spec(obj: Obj) -> Obj | None:
    """The pod spec inside a workload object, or None."""
    if obj.get("kind") == "Pod":
        spec: Obj = obj.get("spec", {})
        return spec
    template = obj.get("spec", {}).get("template")
    if isinstance(template, dict) and obj.get("kind") in {
        "Deployment",
        "DaemonSet",
        "StatefulSet",
        "Job",
        "ReplicaSet",
    }:
        inner: Obj = template.get("spec", {})
        return inner
    return None


def _apply_patch(objects: list[Obj], spec: Obj, directory: Path, path: Path) -> list[Obj]:
    if "path" in spec:
        file = (directory / spec["path"]).resolve()
        _check_inside(directory, file, path)
        patch = yaml.safe_load(file.read_text(encoding="utf-8"))
    elif "patch" in spec:
        patch = yaml.safe_load(spec["patch"])
    else:
        raise KustomizeError(f"{path}: a patch needs path or patch")
    target = spec.get("target")
    if isinstance(patch, list):
        if target is None:
            raise KustomizeError(f"{path}: a JSON 6902 patch needs a target")
        matched = [o for o in objects if _matches(o, target)]
        if not matched:
            raise KustomizeError(f"{path}: patch target {target} matches nothing")
        for obj in matched:
            _json6902(obj, patch, path)
        return objects
    if not isinstance(patch, dict):
        raise KustomizeError(f"{path}: patch is neither a mapping nor a list")
    if target is None:
        target = {
            "kind": patch.get("kind"),
            "name": patch.get("metadata", {}).get("name"),
        }
        if "namespace" in patch.get("metadata", {}):
            target["namespace"] = patch["metadata"]["namespace"]
    matched = [o for o in objects if _matches(o, target)]
    if not matched:
        raise KustomizeError(f"{path}: patch target {target} matches nothing")
    if patch.get("$patch") == "delete":
        return [o for o in objects if not _matches(o, target)]
    body = {k: v for k, v in patch.items() if k not in {"apiVersion", "kind"}}
    if spec.get("target") is not None:
        # A targeted patch applies to every match whatever name it carries.
        body.get("metadata", {}).pop("name", None)
        if body.get("metadata") == {}:
            del body["metadata"]
    for obj in matched:
        merged = strategic_merge(obj, body)
        obj.clear()
        obj.update(merged)
    return objects


def _matches(obj: Obj, target: Obj) -> bool:
    meta = obj.get("metadata", {})
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    checks = {
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "group": group,
        "version": version,
    }
    for field, want in target.items():
        if field == "labelSelector":
            labels = meta.get("labels", {})
            for term in str(want).split(","):
                key, _, value = term.partition("=")
                if labels.get(key.strip()) != value.strip():
                    return False
            continue
        if field not in checks:
            raise KustomizeError(f"unsupported patch target field {field!r}")
        if want is None:
            continue
        have = checks[field] or ""
        if not fnmatch.fnmatchcase(have, str(want)):
            return False
    return True


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """Kubernetes strategic merge for the list kinds in MERGE_KEYS; plain merge elsewhere."""
    if isinstance(patch, dict) and isinstance(base, dict):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = _strip_directives(v)
        return out
    if isinstance(patch, list) and isinstance(base, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        out_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                raise KustomizeError(f"list {key}: patch item without merge key {merge_key}")
            index = next(
                (i for i, b in enumerate(out_list) if b.get(merge_key) == item[merge_key]), None
            )
            if item.get("$patch") == "delete":
                if index is not None:
                    del out_list[index]
            elif index is None:
                out_list.append(_strip_directives(item))
            else:
                out_list[index] = strategic_merge(out_list[index], item, key)
        return out_list
    return _strip_directives(patch)


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return copy.deepcopy(value)


def _json6902(obj: Obj, ops: list[Obj], path: Path) -> None:
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = obj
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        kind = op["op"]
        if kind in {"add", "replace"}:
            value = copy.deepcopy(op["value"])
            if isinstance(parent, list):
                if last == "-":
                    parent.append(value)
                elif kind == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            else:
                if kind == "replace" and last not in parent:
                    raise KustomizeError(f"{path}: replace of missing {op['path']}")
                parent[last] = value
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
        else:
            raise KustomizeError(f"{path}: unsupported JSON patch op {kind!r}")
