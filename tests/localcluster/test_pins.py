"""tools/upstream-versions.env is the one place versions are pinned: the Go modules under tools/
must agree with it, or the cache (keyed by that file) would hold binaries of other versions.

Every k8s.io module a go.mod requires resolves (after its ``replace`` line, if any) to the pinned
staging version, k8s.io/kubernetes to the pinned Kubernetes version, and every etcd module of
tools/etcd to the pinned etcd version. A few k8s.io modules have release trains of their own
(klog, kube-openapi, utils, ...); Kubernetes itself pins those, so they are exempt here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
PINS_FILE = TOOLS / "upstream-versions.env"

INDEPENDENT = frozenset({"k8s.io/klog/v2", "k8s.io/kube-openapi", "k8s.io/utils", "k8s.io/gengo/v2",
                         "k8s.io/system-validators"})
"""k8s.io modules versioned on their own, not from the staging tree."""

ETCD_MODULES = ("go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/api/v3", "go.etcd.io/etcd/client/pkg/v3",
                "go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/pkg/v3")


def read_pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            pins[key.strip()] = value.strip()
    return pins


def _block_lines(go_mod: str, directive: str) -> list[str]:
    """The entries of ``directive`` (``require``/``replace``), single-line or parenthesised."""
    lines = []
    in_block = False
    for raw in go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
            elif line:
                lines.append(line)
        elif line == f"{directive} (":
            in_block = True
        elif line.startswith(f"{directive} "):
            lines.append(line[len(directive) + 1:].strip())
    return lines


def requires(go_mod: str) -> dict[str, str]:
    return {parts[0]: parts[1] for parts in (line.split() for line in _block_lines(go_mod, "require"))}


def replaces(go_mod: str) -> dict[str, tuple[str, str]]:
    """``old => new version`` lines, by old module path."""
    out = {}
    for line in _block_lines(go_mod, "replace"):
        left, _, right = line.partition("=>")
        new = right.split()
        out[left.split()[0]] = (new[0], new[1] if len(new) > 1 else "")
    return out


def pin_mismatches(go_mod: str, pins: dict[str, str]) -> list[str]:
    """Every place ``go_mod`` disagrees with ``pins``, one line each (empty when they agree)."""
    staging, kubernetes, etcd = pins["KUBERNETES_STAGING_VERSION"], pins["KUBERNETES_VERSION"], pins["ETCD_VERSION"]
    required, replaced = requires(go_mod), replaces(go_mod)
    problems = []
    for module, (target, version) in sorted(replaced.items()):
        if module.startswith("k8s.io/") and (target, version) != (module, staging):
            problems.append(f"replace {module} => {target} {version}: want {module} {staging}")
    for module, version in sorted(required.items()):
        effective = replaced[module][1] if module in replaced else version
        if module == "k8s.io/kubernetes":
            want = kubernetes
        elif module.startswith("k8s.io/") and module not in INDEPENDENT:
            want = staging
        elif module in ETCD_MODULES and "go.etcd.io/etcd/server/v3" in required:
            want = etcd  # the etcd server build; kube-apiserver's etcd client follows Kubernetes
        else:
            continue
        if effective != want:
            problems.append(f"require {module} {version} (resolves to {effective}): want {want}")
    return problems


def test_the_pins_file_names_matching_versions() -> None:
    pins = read_pins(PINS_FILE.read_text())
    assert set(pins) == {"KUBERNETES_VERSION", "KUBERNETES_STAGING_VERSION", "ETCD_VERSION"}
    # v1.X.Y is published as staging modules v0.X.Y.
    assert pins["KUBERNETES_STAGING_VERSION"] == "v0." + pins["KUBERNETES_VERSION"].removeprefix("v1.")
    assert re.fullmatch(r"v3\.6\.\d+", pins["ETCD_VERSION"]), "the issue asks for an etcd 3.6.x release"


NOT_KUBERNETES = frozenset({"helm"})
"""Tools that are not Kubernetes components: helm (tools/helm, pinned by its own go.mod) builds
against the k8s.io client libraries its release chose; forcing ours on it would build a helm
nobody ships. Its version is checked in tests/deploy/test_helm.py."""


@pytest.mark.parametrize("module", sorted(p.parent.name for p in TOOLS.glob("*/go.mod") if p.parent.name not in NOT_KUBERNETES))
def test_go_modules_agree_with_the_pins_file(module: str) -> None:
    pins = read_pins(PINS_FILE.read_text())
    go_mod = (TOOLS / module / "go.mod").read_text()
    assert pin_mismatches(go_mod, pins) == []


def test_each_pin_reaches_its_module() -> None:
    """The checks above see the modules the pins are about (a parser that found nothing would
    pass them): the Kubernetes build requires k8s.io/kubernetes and replaces the staging
    modules, and the etcd build requires the etcd server."""
    kube = (TOOLS / "kube" / "go.mod").read_text()
    assert "k8s.io/kubernetes" in requires(kube)
    assert {"k8s.io/api", "k8s.io/apiserver", "k8s.io/kubectl"} <= set(replaces(kube))
    # Every staging module Kubernetes requires at the placeholder v0.0.0 is replaced.
    placeholders = {m for m, v in requires(kube).items() if v == "v0.0.0"}
    assert placeholders and placeholders <= set(replaces(kube))
    etcd = (TOOLS / "etcd" / "go.mod").read_text()
    assert set(ETCD_MODULES) <= set(requires(etcd))


def test_a_drifted_go_mod_is_named() -> None:
    pins = {"KUBERNETES_VERSION": "v1.37.2", "KUBERNETES_STAGING_VERSION": "v0.37.2", "ETCD_VERSION": "v3.6.16"}
    go_mod = """module x

require k8s.io/kubernetes v1.37.1

require (
\tk8s.io/api v0.37.2 // indirect
\tk8s.io/kubectl v0.0.0 // indirect
\tk8s.io/klog/v2 v2.140.0 // indirect
\tgo.etcd.io/etcd/server/v3 v3.6.15
)

replace (
\tk8s.io/api => k8s.io/api v0.37.2
\tk8s.io/kubectl => k8s.io/kubectl v0.36.0
)
"""
    assert pin_mismatches(go_mod, pins) == [
        "replace k8s.io/kubectl => k8s.io/kubectl v0.36.0: want k8s.io/kubectl v0.37.2",
        "require go.etcd.io/etcd/server/v3 v3.6.15 (resolves to v3.6.15): want v3.6.16",
        "require k8s.io/kubectl v0.0.0 (resolves to v0.36.0): want v0.37.2",
        "require k8s.io/kubernetes v1.37.1 (resolves to v1.37.1): want v1.37.2",
    ]
