"""The container image: a slim, non-root, two-stage build whose context holds only what it needs.

No container engine runs here, so the build is checked by what it would do: the Dockerfile's
stages and instructions are read, the build context is computed from .dockerignore the way
Docker does, and the build stage's install step is replayed on exactly the files its COPY
instructions would bring in (a wheel is built from them and must hold every module of the four
packages and the ``dra-solver`` entry point).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.deploy.manifests import ROOT, overlay

PACKAGES = ("model", "service", "controllers", "kubeletplugin", "cli")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile; continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), parts[0])
            stage_name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, stage_name))
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def _dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text(encoding="utf-8"))


def dockerignore_patterns() -> list[tuple[bool, str]]:
    out = []
    for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        out.append((negate, pattern.strip("/")))
    return out


def _pattern_matches(pattern: str, path: str) -> bool:
    # Docker matches a pattern against the path and every parent directory of it; ** spans
    # directories.
    regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
    regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    compiled = re.compile(f"^{regex}$")
    parts = path.split("/")
    return any(compiled.match("/".join(parts[: i + 1])) for i in range(len(parts)))


def in_context(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """Whether a repository-relative file reaches the build context (last match wins)."""
    excluded = False
    for negate, pattern in patterns:
        if _pattern_matches(pattern, path):
            excluded = not negate
    return not excluded


def _repo_files() -> list[str]:
    """Files and symbolic links (dra_solver/<package> links to <package>/), as Docker sends them."""
    skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    out = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if (path.is_file() or path.is_symlink()) and not skip & set(rel.parts):
            out.append(rel.as_posix())
    return sorted(out)


def test_two_stages_slim_base_non_root_entry_point() -> None:
    _, stages = _dockerfile()
    assert len(stages) >= 2, "a build stage and a final stage"
    final = stages[-1]
    assert "slim" in final.base, f"final base {final.base} is not a slim image"
    assert all(s.base == final.base for s in stages), "build and run on the same Python"
    users = [rest for kw, rest in final.instructions if kw == "USER"]
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric non-root USER (runAsNonRoot can check it)"
    (entrypoint,) = [rest for kw, rest in final.instructions if kw == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["dra-solver"]


def test_final_stage_has_no_build_tools() -> None:
    _, stages = _dockerfile()
    final = stages[-1]
    for keyword, rest in final.instructions:
        assert keyword != "RUN", f"the final stage runs nothing at build time: RUN {rest}"
        if keyword in {"COPY", "ADD"}:
            assert "--from=" in rest, f"the final stage copies only from the build stage: {rest}"
    build = stages[0]
    runs = " ".join(rest for kw, rest in build.instructions if kw == "RUN")
    assert not re.search(r"apt-get|apk add|gcc|build-essential", runs), (
        "every dependency has a wheel: the build stage installs no toolchain either"
    )


def test_exposed_ports_match_the_solver_deployment() -> None:
    _, stages = _dockerfile()
    exposed = {
        int(p.split("/")[0])
        for kw, rest in stages[-1].instructions
        if kw == "EXPOSE"
        for p in rest.split()
    }
    solver = next(
        o for o in overlay("production") if o["kind"] == "Deployment" and o["metadata"]["name"] == "dra-solver"
    )
    ports = {p["containerPort"] for p in solver["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert exposed == ports


def test_build_context_excludes_local_state_and_includes_the_packages() -> None:
    patterns = dockerignore_patterns()
    files = _repo_files()
    sent = [f for f in files if in_context(f, patterns)]
    for f in sent:
        assert not f.startswith(("tests/", ".git/", ".venv/", "benchmarks/", "docs/")), f
    for package in PACKAGES:
        py = [f for f in files if f.startswith(f"{package}/") and f.endswith(".py")]
        assert py, f"{package} has no modules"
        missing = [f for f in py if f not in sent]
        assert not missing, f"not in the build context: {missing}"


def test_dockerignore_matching_follows_docker() -> None:
    patterns = [(False, "*"), (True, "model"), (False, "**/__pycache__")]
    assert in_context("model/objects.py", patterns)
    assert not in_context("model/__pycache__/objects.pyc", patterns)
    assert not in_context("tests/x.py", patterns)
    assert not in_context(".venv/bin/python", patterns)


def _copied_files() -> list[str]:
    """The files the build stage's COPY instructions bring in (before the install step)."""
    _, stages = _dockerfile()
    patterns = dockerignore_patterns()
    files = [f for f in _repo_files() if in_context(f, patterns)]
    copied: list[str] = []
    for keyword, rest in stages[0].instructions:
        if keyword != "COPY":
            continue
        *sources, _dest = rest.split()
        for source in sources:
            if source.startswith("--"):
                continue
            source = source.rstrip("/")
            hits = [f for f in files if f == source or f.startswith(f"{source}/")]
            assert hits or fnmatch.filter(files, source), f"COPY {source}: nothing to copy"
            copied.extend(hits)
    return sorted(set(copied))


def test_install_step_builds_from_the_copied_files_alone(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    for rel in _copied_files():
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target, follow_symlinks=False)
    out = tmp_path / "wheel"
    out.mkdir()
    # The PEP 517 hook pip calls, without pip's network use for build isolation.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta as b; "
            "print(b.build_wheel(sys.argv[1]))",
            str(out),
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            rel = module.relative_to(ROOT).as_posix()
            if "__pycache__" in rel:
                continue
            assert f"dra_solver/{rel}" in names, f"{rel} is missing from the image's install"
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"dra_solver"}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "dra-solver = dra_solver.cli:main" in text


def test_manifests_deploy_the_released_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    images = {
        c["image"]
        for obj in overlay("production")
        if obj["kind"] in {"Deployment", "DaemonSet"}
        for c in obj["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"ghcr.io/dra-solver/dra-solver:{version}"}
