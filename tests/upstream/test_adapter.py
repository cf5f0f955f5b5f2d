"""``service.upstream`` when the wrapper misbehaves: real processes standing in for it (a shell
script that exits, hangs or prints garbage) must give one clear ``UpstreamFailed`` each, never
a hang or a traceback from JSON parsing; the next request starts a fresh process."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_solver.service import upstream


def _stand_in(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "upstream-allocator"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return script


def test_exits_without_answer(tmp_path: Path) -> None:
    with upstream.UpstreamAllocator(_stand_in(tmp_path, "exit 7")) as runner, \
            pytest.raises(upstream.UpstreamFailed, match=r"(exited \(status 7\) without an answer|exited with status 7)"):
        runner.run({"timeoutSeconds": 1})


def test_hangs_past_its_deadline(tmp_path: Path) -> None:
    with upstream.UpstreamAllocator(_stand_in(tmp_path, "sleep 60"), grace_seconds=0.2) as runner, \
            pytest.raises(upstream.UpstreamFailed, match="no answer within"):
        runner.run({"timeoutSeconds": 0.1})


def test_garbage_then_a_fresh_process(tmp_path: Path) -> None:
    script = _stand_in(tmp_path, 'read line; echo "not json"; read line; echo \'{"verdict": "unsatisfiable"}\'')
    with upstream.UpstreamAllocator(script) as runner:
        with pytest.raises(upstream.UpstreamFailed, match="not JSON"):
            runner.run({"timeoutSeconds": 1})
        # The broken process was stopped; a new one answers the first line with garbage again.
        with pytest.raises(upstream.UpstreamFailed, match="not JSON"):
            runner.run({"timeoutSeconds": 1})


def test_unknown_verdict(tmp_path: Path) -> None:
    with upstream.UpstreamAllocator(_stand_in(tmp_path, 'read line; echo \'{"verdict": "maybe"}\'')) as runner, \
            pytest.raises(upstream.UpstreamFailed, match="unknown verdict 'maybe'"):
        runner.run({"timeoutSeconds": 1})


def test_not_built_names_the_build_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_SOLVER_K8S_BIN", str(tmp_path / "empty"))
    with pytest.raises(upstream.UpstreamNotBuilt, match=r"scripts/build-upstream\.sh upstream-allocator"):
        upstream.binary()


def test_the_wrapper_follows_the_pinned_version() -> None:
    """tools/upstream-allocator requires exactly the staging version the pin file names."""
    import re

    pins = dict(
        line.split("=", 1) for line in upstream.VERSIONS_FILE.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    go_mod = (upstream.REPO_ROOT / "tools" / "upstream-allocator" / "go.mod").read_text()
    required = dict(re.findall(r"^\s*(k8s\.io/(?:api|apimachinery|dynamic-resource-allocation)) (v\S+)$", go_mod, re.M))
    assert set(required) == {"k8s.io/api", "k8s.io/apimachinery", "k8s.io/dynamic-resource-allocation"}
    assert set(required.values()) == {pins["KUBERNETES_STAGING_VERSION"]}
