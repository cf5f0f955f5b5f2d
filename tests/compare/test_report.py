"""The comparison report for people: human units, hover titles, integer ticks, no warm-up
point, distinct scenario names, every replay row drawn and tabled (issue 18)."""

from __future__ import annotations

import re

import pytest

from dra_solver.service.commands.compare import scenario_names
from dra_solver.service.compare import CompareRow, SideResult
from dra_solver.service.replay import SMALLEST_FIRST, ReplayResult
from dra_solver.service.report import (
    human_seconds,
    render_report,
    replay_plot,
    score_delta_plot,
    time_vs_size_plot,
)


def _row(scenario: str, node: str, devices: int, cp: float, bt: float, *, cp_score: int = 8, bt_score: int = 8,
         warmup: bool = False) -> CompareRow:
    return CompareRow(
        scenario=scenario, node=node, devices_on_node=devices,
        cpsat=SideResult("cpsat", "allocated", score=cp_score, seconds=cp, warmup=warmup),
        backtracking=SideResult("backtracking", "allocated", score=bt_score, seconds=bt, steps=3),
    )


def _replay(name: str, curve: list[int], sizes: list[str]) -> ReplayResult:
    placed = curve[-1]
    nodes: list[str | None] = ["n" if i < placed else None for i in range(len(curve))]
    return ReplayResult(name, claims=len(curve), placed=placed, placed_curve=curve, sizes=sizes, nodes=nodes,
                        seconds=[0.0042] * len(curve))


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.000_850, "850 µs"), (0.004_21, "4.21 ms"), (0.123_4, "123.4 ms"), (2.5, "2.50 s"), (0.0, "0 s"),
])
def test_human_seconds(seconds: float, shown: str) -> None:
    assert human_seconds(seconds) == shown


def test_tables_show_human_units_not_raw_seconds() -> None:
    page = render_report(rows=[_row("agree", "node-a", 8, 0.000_9, 0.012)])
    assert "900 µs" in page and "12.0 ms" in page
    assert not re.search(r">0\.\d{6}<", page), "no raw seconds with six decimals"


def test_points_have_hover_titles_and_labels() -> None:
    svg = time_vs_size_plot([_row("agree", "node-a", 8, 0.001, 0.002), _row("big", "node-b", 64, 0.01, 2.0)])
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert "agree @ node-a: CP-SAT 1.00 ms, allocated" in titles
    assert "big @ node-b: backtracking 2.00 s, allocated" in titles
    assert "big@node-b" in svg, "few points: each is labelled on the plot too"


def test_warmup_point_is_not_plotted_and_is_named() -> None:
    rows = [_row("first", "node-a", 8, 0.9, 0.001, warmup=True), _row("second", "node-a", 8, 0.002, 0.001)]
    svg = time_vs_size_plot(rows)
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert not any(t.startswith("first @ node-a: CP-SAT") for t in titles)
    assert any(t.startswith("second @ node-a: CP-SAT") for t in titles)
    page = render_report(rows=rows)
    assert "Not plotted (warm-up" in page and "CP-SAT on first@node-a (900.0 ms)" in page


def test_integer_scores_get_integer_ticks() -> None:
    svg = score_delta_plot([_row("a", "n1", 8, 0.001, 0.001, cp_score=9, bt_score=8),
                            _row("b", "n1", 8, 0.001, 0.001, cp_score=8, bt_score=8)])
    labels = re.findall(r"<!-- (\u2212?\d+(?:\.\d+)?) -->", svg)
    assert labels and all("." not in label for label in labels), labels


def test_replay_rows_are_all_drawn_distinguishably() -> None:
    same = [0, 1, 2, 3]
    results = [_replay("backtracking", same, ["1gpu"] * 4), _replay("cpsat-first-fit", same, ["1gpu"] * 4),
               _replay(SMALLEST_FIRST.name, same, ["1gpu"] * 4)]
    svg = replay_plot(results)
    styles = re.findall(r'<g id="replay-line-\d+">\s*(?:<title>[^<]*</title>)?\s*<path[^>]*style="([^"]*)"', svg)
    assert len(styles) == 3, "every row is drawn, even when two are identical"
    dashes = {re.search(r"stroke-dasharray: ([^;]*)", s).group(1) if "dasharray" in s else "solid" for s in styles}  # type: ignore[union-attr]
    assert len(dashes) == 3, "each row has its own dash pattern, so none hides another"


def test_replay_section_has_the_per_size_table_and_the_renamed_row() -> None:
    results = [_replay("cpsat-pack", [1, 2, 2], ["1gpu", "8gpu", "8gpu"]),
               _replay(SMALLEST_FIRST.name, [1, 1, 2], ["1gpu", "8gpu", "8gpu"])]
    page = render_report(replays=results)
    assert "Placed by size" in page
    assert "<td>smallest-first backtracking</td>" in page and "not a bound" in page
    assert "bestFit" not in page


def test_scenarios_with_one_file_name_get_distinct_names() -> None:
    assert scenario_names(["examples/compare/agree.yaml", "x/higher.yaml"]) == ["agree", "higher"]
    assert scenario_names(["a/gpu/cluster.yaml", "b/mig/cluster.yaml", "c/other.yaml"]) == ["gpu/cluster", "mig/cluster", "other"]
    assert scenario_names(["x/a/cluster.yaml", "y/a/cluster.yaml"]) == ["x/a/cluster", "y/a/cluster"]
    assert scenario_names(["-"]) == ["stdin"]
