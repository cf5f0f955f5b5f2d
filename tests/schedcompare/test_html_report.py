"""The scheduler comparison's HTML report: written by ``compare --schedulers ... --report``,
well-formed (parsed, every element closed in order), self-contained, with each workload's
figures, plots and the reasons for pods placed differently."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from dra_solver.cli import main
from dra_solver.service.schedcompare import command, workloads
from dra_solver.service.schedcompare.htmlpage import render_report
from dra_solver.service.schedcompare.report import CAPACITY, NODE_CHOICE, WorkloadComparison
from dra_solver.service.schedcompare.runner import SideResult
from dra_solver.service.schedcompare.workloads import Workload
from tests.schedcompare.builders import N0, N1, bound, gpu_workload, gpus, pending

VOID = {"meta", "br", "hr", "img", "input", "link", "col", "wbr"}


class _Tree(HTMLParser):
    """Checks nesting (every element closed, in order) and keeps the text per element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.counts: dict[str, int] = {}
        self.text: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack and data.strip():
            self.text.setdefault(self.stack[-1], []).append(data.strip())


def _parse(page: str) -> _Tree:
    tree = _Tree()
    tree.feed(page)
    tree.close()
    assert tree.errors == [], tree.errors[:5]
    assert tree.stack == [], tree.stack
    return tree


def _comparison() -> WorkloadComparison:
    w = gpu_workload({"a": "1gpu", "b": "8gpu", "c": "8gpu"})
    up = SideResult("kube-scheduler", w.name, {
        "a": bound("a", "1gpu", N0, gpus(N0, 0), 1), "b": bound("b", "8gpu", N1, gpus(N1, *range(8)), 2),
        "c": pending("c", "8gpu")}, None, first_created=0.5, last_created=0.6)
    us = SideResult("dra-solver", w.name, {
        "a": bound("a", "1gpu", N1, gpus(N1, 0), 1), "b": bound("b", "8gpu", N0, gpus(N0, *range(8)), 2),
        "c": pending("c", "8gpu")}, None, first_created=0.5, last_created=0.6)
    for side in (up, us):
        side.last_bound = 2.01
    return WorkloadComparison(w, {"kube-scheduler": up, "dra-solver": us})


def test_report_is_well_formed_and_shows_each_workload() -> None:
    page = render_report([_comparison()])
    assert page.startswith("<!doctype html>")
    tree = _parse(page)
    assert tree.text["title"] == ["dra-solver: kube-scheduler vs the dra-solver scheduler"]
    assert tree.text["h2"] == ["mixed"]
    # Three plots per workload (placed by size, bound over time, bind-latency CDF), each a
    # well-formed SVG document of its own.
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) == 3
    for svg in svgs:
        assert ET.fromstring(svg).tag.endswith("svg")
    cells = tree.text["td"]
    # Summary and per-workload rows: both sides bound 2 of 3 pods.
    assert cells.count("kube-scheduler") >= 2 and cells.count("dra-solver") >= 2
    assert "2" in cells and "8gpu" in cells and "1/2" in cells  # 8gpu: 1 of 2 placed, each side
    # a on other nodes, both had room: node choice; b on other nodes, each side's a had taken a
    # GPU of the node the other side gave b: capacity. In the reasons table and a row each.
    assert cells.count(NODE_CHOICE) == 2 and cells.count(CAPACITY) == 2
    assert any(c.startswith(f"kube-scheduler chose {N0}, dra-solver {N1}") for c in cells)
    assert f"{N0} [gpu-0]" in cells and "pending: 0/2 nodes are available: 2 cannot allocate all claims." not in cells
    for external in ('src="http', "href=\"http", "<script", "<link "):
        assert external not in page


def test_report_escapes_what_it_shows() -> None:
    c = _comparison()
    w = c.workload
    c = WorkloadComparison(Workload(name="<w&>", description='"quoted" <b>', nodes=w.nodes, cluster=w.cluster,
                                    namespaced=w.namespaced, pods=w.pods), c.sides)
    tree = _parse(render_report([c]))
    assert tree.text["h2"] == ["<w&>"]
    assert '"quoted" <b>.' in tree.text["p"]


def _fake_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """``compare --schedulers`` without control planes: the runs return the hand-made pair."""
    ran: list[str] = []
    scheduler = tmp_path / "kube-scheduler"
    scheduler.write_text("")

    class Bins:
        def path(self, name: str) -> Path:
            return tmp_path / name

    def compare_workload(workload: Workload, bins: Any, **_: Any) -> WorkloadComparison:
        ran.append(workload.name)
        return _comparison()

    monkeypatch.setattr(command, "binaries", lambda: Bins())
    monkeypatch.setattr(command, "compare_workload", compare_workload)
    return ran


def test_compare_schedulers_writes_the_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    ran = _fake_run(monkeypatch, tmp_path)
    report = tmp_path / "schedulers.html"
    assert main(["compare", "--schedulers", "mixed", "--nodes", "2", "--pods", "3", "--quiet",
                 "--report", str(report)]) == 0
    out = capsys.readouterr()
    assert ran == ["mixed"]
    assert "WORKLOAD" in out.out and f"report written to {report}" in out.err
    tree = _parse(report.read_text())
    assert tree.counts["svg"] == 3


def test_compare_schedulers_checks_the_report_path_before_running(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ran = _fake_run(monkeypatch, tmp_path)
    missing = tmp_path / "no-such-dir" / "r.html"
    assert main(["compare", "--schedulers", "mixed", "--quiet", "--report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert ran == [] and "--report" in err and "no such directory" in err and len(err.strip().splitlines()) == 1


def test_compare_schedulers_all_as_a_backlog_leaves_out_steady_state(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``all`` runs every workload a backlog can (steady-state deletes pods as others arrive),
    and says which it left out; naming steady-state is refused (tests/service/test_flag_checks)."""
    ran = _fake_run(monkeypatch, tmp_path)
    assert main(["compare", "--schedulers", "all", "--backlog", "--nodes", "2", "--pods", "3", "--quiet"]) == 0
    assert ran == [n for n in workloads.WORKLOADS if n != "steady-state"]
    assert "note: --backlog: steady-state left out (it deletes pods as others arrive)" in capsys.readouterr().err


def test_the_benchmark_script_refuses_steady_state_as_a_backlog_before_running_anything() -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "scheduler_compare.py"
    done = subprocess.run([sys.executable, str(script), "--workloads", "mixed,steady-state", "--backlog"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert "error: --backlog: Forbidden: steady-state deletes pods as others arrive" in done.stderr
    assert "mixed:" not in done.stderr  # nothing ran first


def test_write_report_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command.write_report(str(tmp_path), [_comparison()]) == 2  # a directory
    err = capsys.readouterr().err
    assert err.startswith("error: --report: cannot write") and len(err.strip().splitlines()) == 1


def test_arguments_parse() -> None:
    # The report option is shared with the allocator comparison.
    from dra_solver.service.commands.compare import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--schedulers", "mixed", "--report", "x.html"])
    assert args.schedulers == "mixed" and args.report == "x.html"
