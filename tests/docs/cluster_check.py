"""Offline checks for docs commands that need a cluster or a container engine.

A ``cluster`` example cannot run here, but it can still be wrong: a kustomization that does not
render, a deployment name that does not exist, an image tag that is not the one the dev overlay
deploys. Each command shape the docs use is checked against the repository; a command of an
unknown shape fails, so every command in the docs is checked by something.
"""

from __future__ import annotations

import shlex
from functools import cache
from pathlib import Path
from typing import Any

from tests.deploy import kustomize

ROOT = Path(__file__).resolve().parents[2]

KIND_ALIASES = {
    "deploy": "Deployment",
    "deployment": "Deployment",
    "deployments": "Deployment",
    "ds": "DaemonSet",
    "daemonset": "DaemonSet",
    "daemonsets": "DaemonSet",
    "svc": "Service",
    "service": "Service",
    "services": "Service",
    "pod": "Pod",
    "pods": "Pod",
    "po": "Pod",
    "cm": "ConfigMap",
    "configmap": "ConfigMap",
    "sa": "ServiceAccount",
    "serviceaccount": "ServiceAccount",
    "deviceclass": "DeviceClass",
    "deviceclasses": "DeviceClass",
    "resourceclaimtemplate": "ResourceClaimTemplate",
    "resourceclaimtemplates": "ResourceClaimTemplate",
    "lease": "Lease",
    "leases": "Lease",
    "namespace": "Namespace",
    "ns": "Namespace",
}
# Kinds that exist only at run time (created by controllers or the plugin), so their names
# cannot be checked against the manifests.
RUNTIME_KINDS = {"resourceclaim", "resourceclaims", "resourceslice", "resourceslices",
                 "lease", "leases", "events", "nodes", "node", "all"}
KUBECTL_VERBS = {"get", "describe", "logs", "wait", "port-forward", "rollout", "delete",
                 "apply", "kustomize", "exec", "top", "auth", "create", "label", "annotate"}


@cache
def rendered(directory: str) -> tuple[dict[str, Any], ...]:
    return tuple(kustomize.render(ROOT / directory))


@cache
def all_objects() -> tuple[dict[str, Any], ...]:
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for overlay in sorted((ROOT / "deploy" / "overlays").iterdir()):
        for obj in rendered(str(overlay.relative_to(ROOT))):
            seen.setdefault(kustomize.identity(obj), obj)
    return tuple(seen.values())


def check(command: str) -> str | None:
    """None if the command is consistent with the repository, else what is wrong."""
    try:
        argv = shlex.split(command.replace("\\\n", " "))
    except ValueError as err:
        return f"cannot parse: {err}"
    if not argv:
        return "empty command"
    tool = argv[0]
    if tool == "kubectl":
        return _kubectl(argv[1:])
    if tool == "docker":
        return _docker(argv[1:])
    if tool == "kind":
        return _kind(argv[1:])
    if tool == "helm":
        return _helm(argv[1:])
    if tool == "minikube":
        return f"{tool} commands are not part of the documented install"
    return f"no offline check knows {tool!r} commands; teach tests/docs/cluster_check.py"


HELM_RELEASE = "dra-solver"


def _helm(args: list[str]) -> str | None:
    """``helm install|upgrade --install|template RELEASE CHART [--set ...]`` renders our chart
    with those values (the real helm); ``helm uninstall RELEASE`` names our release."""
    from tests.deploy import realhelm

    positional: list[str] = []
    values: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in {"--set", "--set-string", "-f", "--values"}:
            values += [arg, args[i + 1] if arg in {"--set", "--set-string"} else str(ROOT / args[i + 1])]
            i += 2
            continue
        if arg in {"-n", "--namespace", "--version", "--timeout"}:
            i += 2
            continue
        if not arg.startswith("-"):
            positional.append(arg)
        i += 1
    if not positional:
        return "helm without a command"
    verb, rest = positional[0], positional[1:]
    if verb == "uninstall":
        return None if rest == [HELM_RELEASE] else f"helm uninstall {rest}: the release is {HELM_RELEASE}"
    if verb not in {"install", "upgrade", "template"}:
        return f"helm {verb}: no offline check for this command"
    if len(rest) != 2:
        return f"helm {verb}: expected RELEASE CHART, got {rest}"
    release, chart = rest
    if (ROOT / chart).resolve() != realhelm.CHART.resolve():
        return f"{chart} is not the chart in deploy/helm/dra-solver"
    if release != HELM_RELEASE:
        return f"helm {verb} {release}: the docs name the release {HELM_RELEASE}"
    try:
        realhelm.render(*values)
    except AssertionError as err:
        return str(err)
    return None


def _kubectl(args: list[str]) -> str | None:
    namespace = "default"
    positional: list[str] = []
    kustomize_dir: str | None = None
    files: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in {"-n", "--namespace"}:
            namespace = args[i + 1]
            i += 2
            continue
        if arg.startswith("--namespace="):
            namespace = arg.split("=", 1)[1]
        elif arg == "-k":
            kustomize_dir = args[i + 1]
            i += 2
            continue
        elif arg.startswith("--kustomize="):
            kustomize_dir = arg.split("=", 1)[1]
        elif arg == "-f":
            files.append(args[i + 1])
            i += 2
            continue
        elif arg in {"-l", "--selector", "-o", "--output", "--for", "--timeout", "-c",
                     "--container", "--tail", "--since"}:
            i += 2
            continue
        elif not arg.startswith("-"):
            positional.append(arg)
        i += 1
    if not positional:
        return "kubectl without a verb"
    verb, rest = positional[0], positional[1:]
    if verb not in KUBECTL_VERBS:
        return f"kubectl {verb}: no offline check for this verb"
    if verb == "kustomize":
        kustomize_dir = rest[0] if rest else "."
        rest = []
    if kustomize_dir is not None:
        try:
            rendered(str((ROOT / kustomize_dir).resolve().relative_to(ROOT)))
        except (kustomize.KustomizeError, OSError, ValueError) as err:
            return f"{kustomize_dir} does not render: {err}"
    for file in files:
        if not (ROOT / file).is_file():
            return f"{file} does not exist"
    if verb == "rollout":
        rest = rest[1:]  # rollout status|restart TYPE/NAME
    if verb in {"port-forward", "logs", "exec"}:
        rest = rest[:1]  # TYPE/NAME, then ports or a command
    if verb == "auth":
        return None
    if verb == "create" and rest[:1] == ["secret"]:
        return _secret_is_mounted(rest[2:3], namespace)
    return _names_exist(rest, namespace)


def _secret_is_mounted(names: list[str], namespace: str) -> str | None:
    # Secrets are never in the manifests; one the docs create must be one a workload mounts.
    mounted = {
        volume["secret"]["secretName"]
        for obj in all_objects()
        if obj.get("metadata", {}).get("namespace") == namespace
        for volume in (kustomize.pod_spec(obj) or {}).get("volumes", [])
        if "secret" in volume
    }
    if not names or names[0] not in mounted:
        return f"creates Secret {namespace}/{names[0] if names else '?'}, but no workload mounts it"
    return None


def _names_exist(refs: list[str], namespace: str) -> str | None:
    objects = all_objects()
    kind: str | None = None
    for ref in refs:
        if "/" in ref:
            type_part, _, name = ref.partition("/")
            if type_part.lower() in RUNTIME_KINDS:
                continue
            kind_name = KIND_ALIASES.get(type_part.lower())
            if kind_name is None:
                return f"unknown resource type {type_part!r}"
            if not _exists(objects, kind_name, namespace, name):
                return f"no {kind_name} {namespace}/{name} in the rendered manifests"
        elif kind is None:
            if ref.lower() in RUNTIME_KINDS:
                kind = ""
                continue
            kind = KIND_ALIASES.get(ref.lower(), "")
            if not kind and "," not in ref:
                return f"unknown resource type {ref!r}"
        elif kind and not _exists(objects, kind, namespace, ref):
            return f"no {kind} {namespace}/{ref} in the rendered manifests"
    return None


def _exists(objects: tuple[dict[str, Any], ...], kind: str, namespace: str, name: str) -> bool:
    for obj in objects:
        meta = obj.get("metadata", {})
        if obj.get("kind") != kind or meta.get("name") != name:
            continue
        if "namespace" not in meta or meta.get("namespace") == namespace:
            return True
    if kind == "Pod":
        # Pods of a Deployment/DaemonSet have generated names; accept the workload's prefix.
        return any(
            obj.get("kind") in {"Deployment", "DaemonSet"}
            and name.startswith(obj["metadata"]["name"])
            and obj["metadata"].get("namespace") == namespace
            for obj in objects
        )
    return False


def dev_image() -> str:
    images = {
        c["image"]
        for obj in rendered("deploy/overlays/dev")
        for c in (kustomize.pod_spec(obj) or {}).get("containers", [])
        if obj.get("kind") in {"Deployment", "DaemonSet"}
    }
    if len(images) != 1:
        raise AssertionError(f"dev overlay uses several images: {sorted(images)}")
    return str(images.pop())


def _docker(args: list[str]) -> str | None:
    if not args or args[0] != "build":
        return f"docker {' '.join(args[:1])}: only docker build is documented"
    tags = [args[i + 1] for i, a in enumerate(args) if a in {"-t", "--tag"}]
    context = next((a for a in reversed(args[1:]) if not a.startswith("-") and a not in tags), ".")
    if not (ROOT / context / "Dockerfile").is_file():
        return f"no Dockerfile in build context {context}"
    dev = dev_image()
    local = [t for t in tags if t.partition(":")[0] == dev.partition(":")[0]]
    if local and dev not in local:
        return f"builds {local}, but the dev overlay deploys {dev}"
    return None


def _kind(args: list[str]) -> str | None:
    if args[:1] == ["create"] or args[:1] == ["delete"]:
        return None
    if args[:2] == ["load", "docker-image"]:
        images = [a for a in args[2:] if not a.startswith("-")]
        if dev_image() not in images:
            return f"loads {images}, but the dev overlay deploys {dev_image()}"
        return None
    return f"kind {' '.join(args[:2])}: no offline check"
