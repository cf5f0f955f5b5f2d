"""The comparison report loads in a real browser: Debian's headless Chromium renders the page
(every section: per-node table, time and score plots, replay tables and plot), and the page's
own load reports no error (an injected ``error`` listener records script and resource errors;
Chromium's console log is read too). scripts/install-chromium.sh installs the browser."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

from dra_solver.service.compare import CompareRow, SideResult
from dra_solver.service.replay import SMALLEST_FIRST, ReplayResult
from dra_solver.service.report import render_report

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0", "--window-size=1280,2400",
)
HOOK = (
    "<script>window.addEventListener('error',function(e){var h=document.documentElement;"
    "h.setAttribute('data-load-errors',(h.getAttribute('data-load-errors')||'')+(e.message||e.type)+';')},true);"
    "window.addEventListener('load',function(){var s=document.querySelectorAll('svg');var h=document.documentElement;"
    "h.setAttribute('data-svgs',String(s.length));h.setAttribute('data-drawn',String(Array.prototype.every.call(s,"
    "function(x){var r=x.getBoundingClientRect();return r.width>100&&r.height>100})));"
    "h.setAttribute('data-titles',String(document.querySelectorAll('svg title').length))});</script>"
)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise AssertionError("chromium is not installed: scripts/install-chromium.sh installs Debian's package "
                             "(scripts/test.sh runs it)")
    return found


def _page() -> str:
    def row(scenario: str, devices: int, cp: float, bt: float, score: int, *, warmup: bool = False) -> CompareRow:
        return CompareRow(scenario=scenario, node="node-a", devices_on_node=devices,
                          cpsat=SideResult("cpsat", "allocated", score=score, seconds=cp, warmup=warmup),
                          backtracking=SideResult("backtracking", "allocated", score=score - 1, seconds=bt, steps=7))

    def replay(name: str, curve: list[int]) -> ReplayResult:
        sizes = ["1gpu", "2gpu", "8gpu", "1gpu"]
        nodes: list[str | None] = ["n" if curve[i] > (curve[i - 1] if i else 0) else None for i in range(4)]
        return ReplayResult(name, claims=4, placed=curve[-1], placed_curve=curve, sizes=sizes, nodes=nodes,
                            seconds=[0.003] * 4)

    rows = [row("warm", 8, 0.9, 0.001, 8, warmup=True), row("gpu/cluster", 8, 0.002, 0.004, 9),
            row("mig/cluster", 64, 0.02, 1.5, 16)]
    replays = [replay("backtracking", [1, 2, 2, 3]), replay("cpsat-pack", [1, 2, 3, 4]),
               replay(SMALLEST_FIRST.name, [1, 2, 3, 4])]
    return render_report(rows=rows, replays=replays)


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)


def test_report_renders_in_chromium_without_errors(tmp_path: Path) -> None:
    page = _page()
    hooked = tmp_path / "hooked.html"
    hooked.write_text(page.replace("<head>", "<head>" + HOOK, 1), encoding="utf-8")
    done = _run(tmp_path, "--dump-dom", hooked.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    html_tag = re.search(r"<html[^>]*>", done.stdout)
    assert html_tag, done.stdout[:500]
    attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', html_tag.group(0)))
    assert "data-load-errors" not in attrs, attrs
    assert attrs.get("data-svgs") == "3", attrs  # time vs size, score difference, replay
    assert attrs.get("data-drawn") == "true", "every plot is laid out at a readable size"
    assert int(attrs.get("data-titles", "0")) >= 9, "hover titles on points, bars and lines"
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console


def test_report_screenshot_is_a_drawn_page(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    report.write_text(_page(), encoding="utf-8")
    shot = tmp_path / "shot.png"
    done = _run(tmp_path, f"--screenshot={shot}", report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2400)
    assert len(data) > 30_000, "a blank page compresses to a few kilobytes"
