"""A self-contained HTML page for ``dra-solver compare --report``.

Tables plus plots rendered with matplotlib into inline SVG, so the page opens anywhere
without network access: time vs problem size for every allocator that ran (log scale; upstream's
Go allocator too when it was built), claims placed over a replay, and FirstAvailable score
differences. With upstream, the table says per row whether our port chose upstream's devices and
why CP-SAT's answer differs from upstream's.

Made to be read by people: times in µs, ms or s; every plotted point has a hover title (and a
label when there are few); integer quantities on integer ticks; every replay row drawn with its
own dash pattern and marker, so no line hides another; a measurement flagged as warm-up
(``SideResult.warmup``: it paid for one-time start-up work) is left out of the time plot and
named under it.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dra_solver.service.compare import CompareRow, SideResult
from dra_solver.service.replay import SMALLEST_FIRST, ReplayResult

SIDES = (("cpsat", "CP-SAT", "o"), ("backtracking", "backtracking", "s"), ("upstream", "upstream", "^"))
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
MARKERS = ("o", "s", "^", "D", "v", "P")
LABEL_POINTS_UP_TO = 12
"""Few enough points to label each on the plot; beyond that only hover titles."""


def human_seconds(seconds: float) -> str:
    """``850 µs``, ``12.3 ms``, ``1.24 s``: the unit a person reads at a glance."""
    if seconds <= 0:
        return "0 s"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 10e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def pyplot() -> Any:
    # lazy import: matplotlib (~1 s), only for ``compare --report``
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "dra-solver"  # the same ids for the same plot
    import matplotlib.pyplot as plt  # lazy import: matplotlib, as above

    return plt


def _ticker() -> Any:
    """matplotlib.ticker (loaded by ``pyplot``)."""
    return pyplot().matplotlib.ticker


def svg(fig: Any, titles: dict[str, str] | None = None) -> str:
    """The figure as inline SVG; ``titles`` maps an artist's gid to its hover title."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    pyplot().close(fig)
    text = buf.getvalue()
    text = text[text.find("<svg") :]
    for gid, title in (titles or {}).items():
        opening = f'<g id="{gid}">'
        text = text.replace(opening, f"{opening}<title>{html.escape(title)}</title>", 1)
    return text


def _integer_axis(axis: Any) -> None:
    axis.set_major_locator(_ticker().MaxNLocator(integer=True))


def _timed(side: SideResult | None) -> bool:
    return side is not None and not side.warmup


def time_vs_size_plot(rows: Sequence[CompareRow], *, plot_id: str = "time") -> str:
    """Wall time against devices on the node, one marker per allocator, log scale."""
    plt = pyplot()
    FuncFormatter = _ticker().FuncFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    titles: dict[str, str] = {}
    points = 0
    for side, label, marker in SIDES:
        present = [r for r in rows if _timed(getattr(r, side))]
        if not present:
            continue
        first = True
        for r in present:
            result: SideResult = getattr(r, side)
            gid = f"{plot_id}-{side}-{points}"
            x, y = r.devices_on_node, max(result.seconds, 1e-6)
            ax.scatter([x], [y], marker=marker, color=_color(side), label=label if first else None, gid=gid,
                       s=36, alpha=0.85)
            titles[gid] = f"{r.scenario} @ {r.node}: {label} {human_seconds(result.seconds)}, {result.verdict}"
            first = False
            points += 1
    if points <= LABEL_POINTS_UP_TO:
        for r in rows:
            side_results = [getattr(r, s) for s, _, _ in SIDES if _timed(getattr(r, s))]
            if side_results:
                y = max(max(s.seconds for s in side_results), 1e-6)
                ax.annotate(f"{r.scenario}@{r.node}", (r.devices_on_node, y), textcoords="offset points",
                            xytext=(4, 4), fontsize=7, color="#444")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: human_seconds(v)))
    _integer_axis(ax.xaxis)
    ax.set_xlabel("devices on node")
    ax.set_ylabel("wall time (log scale)")
    ax.set_title("Allocation time vs size")
    if points:
        ax.legend()
    return svg(fig, titles)


def _color(side: str) -> str:
    return {"cpsat": "#1f77b4", "backtracking": "#d62728", "upstream": "#2ca02c"}.get(side, "#555")


def _warmup_note(rows: Sequence[CompareRow]) -> str:
    left_out = [
        f"{label} on {r.scenario}@{r.node} ({human_seconds(getattr(r, side).seconds)})"
        for r in rows
        for side, label, _ in SIDES
        if getattr(r, side) is not None and getattr(r, side).warmup
    ]
    if not left_out:
        return ""
    return (
        "<p class='note'>Not plotted (warm-up: the measurement paid for one-time start-up work): "
        + html.escape("; ".join(left_out)) + ".</p>"
    )


def score_delta_plot(rows: Sequence[CompareRow], *, plot_id: str = "score") -> str:
    """CP-SAT's FirstAvailable score minus backtracking's, per (scenario, node)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    labels = [f"{r.scenario}@{r.node}" for r in rows]
    deltas = [r.cpsat.score - r.backtracking.score for r in rows]
    titles: dict[str, str] = {}
    for i, (r, delta) in enumerate(zip(rows, deltas, strict=True)):
        gid = f"{plot_id}-bar-{i}"
        ax.bar([i], [delta], color="#1f77b4" if delta >= 0 else "#d62728", gid=gid)
        titles[gid] = f"{labels[i]}: CP-SAT {r.cpsat.score}, backtracking {r.backtracking.score} ({delta:+d})"
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    _integer_axis(ax.yaxis)
    ax.axhline(0, color="#888", linewidth=0.8)
    ax.set_ylabel("score CP-SAT - backtracking")
    ax.set_title("FirstAvailable score difference")
    return svg(fig, titles)


def replay_plot(results: Sequence[ReplayResult], *, plot_id: str = "replay") -> str:
    """Claims placed as claims arrive, one line per row, each with its own dash and marker."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    titles: dict[str, str] = {}
    longest = max((len(r.placed_curve) for r in results), default=0)
    every = max(1, longest // 12)
    for i, res in enumerate(results):
        gid = f"{plot_id}-line-{i}"
        xs = range(1, len(res.placed_curve) + 1)
        # Each later row is drawn thinner on top of the earlier ones: where two rows coincide,
        # the earlier one still shows around the later one.
        ax.plot(xs, res.placed_curve, label=f"{res.name} ({res.placed})", gid=gid,
                linestyle=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)],
                markevery=(i % every, every), markersize=max(3.0, 9.0 - 1.5 * i),
                linewidth=max(1.0, 3.6 - 0.7 * i), alpha=0.9)
        titles[gid] = f"{res.name}: {res.placed} of {res.claims} claims placed"
    _integer_axis(ax.xaxis)
    _integer_axis(ax.yaxis)
    ax.set_xlabel("claims arrived")
    ax.set_ylabel("claims placed")
    ax.set_title("Claims placed over the replay")
    ax.legend()
    return svg(fig, titles)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: object) -> str:
    text = str(value)
    css = " class='no'" if text == "NO" else ""
    return f"<td{css}>{html.escape(text)}</td>"


def _upstream_section(rows: Sequence[CompareRow]) -> str:
    agree = sum(1 for r in rows if r.agree)
    port = sum(1 for r in rows if r.port_matches_upstream)
    head = (
        f"<h2>Per-node comparison (with upstream's Go allocator)</h2><p>{agree}/{len(rows)} rows agree on the "
        f"verdict; the backtracking port chose upstream's devices on {port}/{len(rows)}. Upstream's time is "
        f"measured around its Allocate call alone.</p>"
    )
    body = []
    for r in rows:
        up = r.upstream
        body.append([
            r.scenario, r.node, r.cpsat.verdict, r.backtracking.verdict, up.verdict if up else "-",
            "yes" if r.agree else "NO",
            f"{r.cpsat.score}/{r.backtracking.score}/{up.score if up else '-'}",
            "-" if up is None else ("yes" if r.port_matches_upstream else "NO"),
            human_seconds(r.cpsat.seconds), human_seconds(r.backtracking.seconds),
            human_seconds(up.seconds) if up else "-",
            r.backtracking.steps, up.steps if up else "-", up.status if up else "-", r.why or "-",
            r.why_port or "-",
        ])
    return head + _table(
        ["scenario", "node", "CP-SAT", "backtracking", "upstream", "agree", "score CP/BT/UP", "BT = upstream",
         "CP-SAT time", "BT time", "upstream time", "BT steps", "upstream steps", "upstream tier", "why CP-SAT differs",
         "why backtracking differs"],
        body,
    )


def _replay_section(replays: Sequence[ReplayResult]) -> list[str]:
    parts = ["<h2>Replay</h2>"]
    table_rows = [
        [r.name, r.claims, r.placed, "-" if r.first_failure is None else r.first_failure,
         human_seconds(r.seconds_per_claim), r.free_whole_devices,
         ", ".join(f"{k}={v}" for k, v in r.stranded_counters.items()) or "-"]
        for r in replays
    ]
    parts.append(
        _table(["allocator", "claims", "placed", "first failure", "time/claim", "free whole devices",
                "stranded counters"], table_rows)
    )
    sizes: list[str] = []
    for r in replays:
        sizes.extend(s for s in r.placed_by_size() if s not in sizes)
    if sizes:
        parts.append("<h3>Placed by size</h3><p>Claims placed of those that came, per size class.</p>")
        parts.append(_table(
            ["allocator", *sizes],
            [[r.name, *(_placed(r, s) for s in sizes)] for r in replays],
        ))
    if any(r.name == SMALLEST_FIRST.name for r in replays):
        parts.append(
            f"<p class='note'>{html.escape(SMALLEST_FIRST.name)}: upstream's backtracking search over every "
            "slice's devices reordered smallest first; a reference point, not a bound (a policy may place more).</p>"
        )
    parts.append(replay_plot(replays))
    return parts


def _placed(result: ReplayResult, size: str) -> str:
    row = result.placed_by_size().get(size)
    return f"{row['placed']}/{row['claims']}" if row else "-"


def render_report(
    *,
    rows: Sequence[CompareRow] = (),
    replays: Sequence[ReplayResult] = (),
    title: str = "dra-solver: CP-SAT vs backtracking",
) -> str:
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#f3f3f3}"
        ".no{color:#b00;font-weight:bold}.note{color:#555;font-size:13px}svg{max-width:100%;height:auto}"
        "</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC. Hover over a point or bar for its "
        "scenario, node and value.</p>",
    ]
    if rows and any(r.upstream is not None for r in rows):
        parts.append(_upstream_section(rows))
    elif rows:
        agree = sum(1 for r in rows if r.agree)
        parts.append(f"<h2>Per-node comparison</h2><p>{agree}/{len(rows)} rows agree on the verdict.</p>")
        parts.append(
            _table(
                ["scenario", "node", "CP-SAT", "backtracking", "agree", "score CP/BT", "devices",
                 "CP-SAT time", "BT time", "BT steps", "CP-SAT status", "vars/cons"],
                [
                    [r.scenario, r.node, r.cpsat.verdict, r.backtracking.verdict, "yes" if r.agree else "NO",
                     f"{r.cpsat.score}/{r.backtracking.score}", "differ" if r.devices_differ else "same",
                     human_seconds(r.cpsat.seconds), human_seconds(r.backtracking.seconds), r.backtracking.steps,
                     r.cpsat.status, f"{r.cpsat.variables}/{r.cpsat.constraints}"]
                    for r in rows
                ],
            )
        )
    if rows:
        parts.append(time_vs_size_plot(rows))
        parts.append(_warmup_note(rows))
        parts.append(score_delta_plot(rows))
    if replays:
        parts.extend(_replay_section(replays))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)
