"""A self-contained HTML page for ``dra-solver compare --report``.

Tables plus plots rendered with matplotlib into inline SVG, so the page opens anywhere
without network access: time vs problem size for every allocator that ran (log scale; upstream's
Go allocator too when it was built), claims placed over a replay, and FirstAvailable score
differences. With upstream, the table says per row whether our port chose upstream's devices and
why CP-SAT's answer differs from upstream's.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from datetime import UTC, datetime

from dra_solver.service.compare import CompareRow
from dra_solver.service.replay import ReplayResult


def _svg(fig: object) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")  # type: ignore[attr-defined]
    _plt().close(fig)  # type: ignore[attr-defined]
    text = buf.getvalue()
    return text[text.find("<svg") :]


def _plt() -> object:
    """matplotlib's pyplot on the file-only Agg backend."""
    # lazy import: matplotlib (~1 s), only for ``compare --report``
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy import: matplotlib, as above

    return plt


def time_vs_size_plot(rows: Sequence[CompareRow]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))  # type: ignore[attr-defined]
    for side, marker in (("cpsat", "o"), ("backtracking", "x"), ("upstream", "^")):
        present = [r for r in rows if getattr(r, side) is not None]
        if not present:
            continue
        xs = [r.devices_on_node for r in present]
        ys = [max(getattr(r, side).seconds, 1e-6) for r in present]
        ax.scatter(xs, ys, label=side, marker=marker)
    ax.set_yscale("log")
    ax.set_xlabel("devices on node")
    ax.set_ylabel("wall time (s, log scale)")
    ax.set_title("Allocation time vs size")
    ax.legend()
    return _svg(fig)


def score_delta_plot(rows: Sequence[CompareRow]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3))  # type: ignore[attr-defined]
    labels = [f"{r.scenario}@{r.node}" for r in rows]
    deltas = [r.cpsat.score - r.backtracking.score for r in rows]
    ax.bar(range(len(deltas)), deltas)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("score CP-SAT - backtracking")
    ax.set_title("FirstAvailable score difference")
    return _svg(fig)


def replay_plot(results: Sequence[ReplayResult]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))  # type: ignore[attr-defined]
    for res in results:
        ax.plot(range(1, len(res.placed_curve) + 1), res.placed_curve, label=f"{res.name} ({res.placed})")
    ax.set_xlabel("claims arrived")
    ax.set_ylabel("claims placed")
    ax.set_title("Claims placed over the replay")
    ax.legend()
    return _svg(fig)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


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
            f"{r.cpsat.seconds:.6f}", f"{r.backtracking.seconds:.6f}", f"{up.seconds:.6f}" if up else "-",
            r.backtracking.steps, up.steps if up else "-", up.status if up else "-", r.why or "-",
            r.why_port or "-",
        ])
    return head + _table(
        ["scenario", "node", "CP-SAT", "backtracking", "upstream", "agree", "score CP/BT/UP", "BT = upstream",
         "CP-SAT s", "BT s", "upstream s", "BT steps", "upstream steps", "upstream tier", "why CP-SAT differs",
         "why backtracking differs"],
        body,
    )


def render_report(
    *,
    rows: Sequence[CompareRow] = (),
    replays: Sequence[ReplayResult] = (),
    best_fit: int | None = None,
    title: str = "dra-solver: CP-SAT vs backtracking",
) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#f3f3f3}"
        ".no{color:#b00;font-weight:bold}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC.</p>",
    ]
    if rows and any(r.upstream is not None for r in rows):
        parts.append(_upstream_section(rows))
        parts.append(time_vs_size_plot(rows))
        parts.append(score_delta_plot(rows))
    elif rows:
        agree = sum(1 for r in rows if r.agree)
        parts.append(f"<h2>Per-node comparison</h2><p>{agree}/{len(rows)} rows agree on the verdict.</p>")
        parts.append(
            _table(
                ["scenario", "node", "CP-SAT", "backtracking", "agree", "score CP/BT", "devices",
                 "CP-SAT s", "BT s", "BT steps", "CP-SAT status", "vars/cons"],
                [
                    [r.scenario, r.node, r.cpsat.verdict, r.backtracking.verdict, "yes" if r.agree else "NO",
                     f"{r.cpsat.score}/{r.backtracking.score}", "differ" if r.devices_differ else "same",
                     f"{r.cpsat.seconds:.6f}", f"{r.backtracking.seconds:.6f}", r.backtracking.steps,
                     r.cpsat.status, f"{r.cpsat.variables}/{r.cpsat.constraints}"]
                    for r in rows
                ],
            )
        )
        parts.append(time_vs_size_plot(rows))
        parts.append(score_delta_plot(rows))
    if replays:
        parts.append("<h2>Replay</h2>")
        table_rows = [
            [r.name, r.claims, r.placed, "-" if r.first_failure is None else r.first_failure,
             f"{r.seconds_per_claim * 1e3:.2f} ms", r.free_whole_devices,
             ", ".join(f"{k}={v}" for k, v in r.stranded_counters.items()) or "-"]
            for r in replays
        ]
        if best_fit is not None:
            table_rows.append(["bestFit (bound)", replays[0].claims, best_fit, "", "", "", ""])
        parts.append(
            _table(["allocator", "claims", "placed", "first failure", "time/claim", "free whole devices",
                    "stranded counters"], table_rows)
        )
        parts.append(replay_plot(replays))
    parts.append("</body></html>")
    return "\n".join(parts)
