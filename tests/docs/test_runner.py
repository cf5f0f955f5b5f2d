"""The docs runner itself: exit codes, shown output, background servers and port remapping."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.docs import mdblocks, runner


def _run_page(tmp_path: Path, text: str) -> None:
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    run = runner.FileRun(runner.make_sandbox(tmp_path), runner.environment(tmp_path))
    try:
        for block in mdblocks.blocks(page):
            run.run_block(block)
    finally:
        run.close()


def test_runs_commands_in_a_sandbox_of_the_repository(tmp_path: Path) -> None:
    _run_page(
        tmp_path,
        "```console\n$ test -f deploy/base/kustomization.yaml && echo found\nfound\n"
        "$ echo written > out.txt && cat out.txt\nwritten\n```\n"
        "<!-- doctest: exit=3 -->\n```console\n$ exit 3\n```\n",
    )
    assert not (runner.ROOT / "out.txt").exists()


def test_wrong_output_or_status_fails(tmp_path: Path) -> None:
    with pytest.raises(runner.DocExampleFailed, match="not in the output"):
        _run_page(tmp_path, "```console\n$ echo one\ntwo\n```\n")
    with pytest.raises(runner.DocExampleFailed, match="exit status 1"):
        _run_page(tmp_path, "```console\n$ false\n```\n")


def test_background_server_with_remapped_port(tmp_path: Path) -> None:
    _run_page(
        tmp_path,
        "<!-- doctest: background ports=8765 -->\n```console\n"
        "$ python -m http.server 8765 --bind 127.0.0.1\nServing HTTP on 127.0.0.1 port 8765\n```\n"
        "```console\n$ curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8765/\n200\n```\n",
    )


def test_refuses_to_run_the_test_suite(tmp_path: Path) -> None:
    with pytest.raises(runner.DocExampleFailed, match="runs the test suite or installs"):
        _run_page(tmp_path, "```console\n$ ./scripts/test.sh\n```\n")
