"""A self-contained HTML page for ``dra-solver compare --schedulers ... --report FILE.html``.

Same style as the allocator comparison's report (:mod:`service.report`): tables and
matplotlib plots inlined as SVG, no external assets. Per workload: both sides' pods bound,
pods/s and the ratio, creation-to-bind p50/p99, devices placed twice, claims placed by size
(table and bars), pods bound over time, the creation-to-bind CDF, and every pod placed
differently with its reason and evidence (the first :data:`DETAIL_ROWS`; the JSON has all).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime

from dra_solver.service.report import pyplot, svg
from dra_solver.service.schedcompare.report import (
    OURS,
    UPSTREAM,
    WorkloadComparison,
    reason_summary,
)
from dra_solver.service.schedcompare.runner import SideResult

TITLE = "dra-solver: kube-scheduler vs the dra-solver scheduler"
DETAIL_ROWS = 300
COLORS = {UPSTREAM: "#4c72b0", OURS: "#dd8452"}




def _escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]], css: str = "") -> str:
    head = "".join(f"<th>{_escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    klass = f" class='{css}'" if css else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def placed_by_size_plot(c: WorkloadComparison) -> str:
    """Grouped bars: claims placed per size (FirstAvailable sizes split by subrequest), per side."""
    plt = pyplot()
    sizes = sorted({k for side in c.sides.values() for k in side.placed_by_size()})
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(sizes) + 2), 3.5))
    width = 0.8 / max(1, len(c.sides))
    for i, (name, side) in enumerate(c.sides.items()):
        placed = side.placed_by_size()
        xs = [j + (i - (len(c.sides) - 1) / 2) * width for j in range(len(sizes))]
        ax.bar(xs, [placed.get(s, (0, 0))[0] for s in sizes], width, label=name, color=COLORS.get(name))
    totals = [max((side.placed_by_size().get(s, (0, 0))[1] for side in c.sides.values()), default=0) for s in sizes]
    if any(totals):
        ax.scatter(range(len(sizes)), totals, marker="_", s=400, color="black", label="pods of this size")
    ax.set_xticks(range(len(sizes)), sizes, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("claims placed")
    ax.set_title(f"{c.workload.name}: claims placed by size")
    ax.legend(fontsize=8)
    return svg(fig)


def bound_over_time_plot(c: WorkloadComparison) -> str:
    """Pods bound against seconds since the first pod was created (a backlog run: since the
    scheduler started, where pods/s counts from), per side."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, side in c.sides.items():
        times = sorted(max(0.0, p.bound_at - side.window_start) for p in side.pods.values() if p.bound_at is not None)
        ax.step([0.0, *times], range(len(times) + 1), where="post", label=f"{name} ({side.bound})",
                color=COLORS.get(name))
    backlog = any(side.backlog for side in c.sides.values())
    ax.set_xlabel("seconds since the scheduler started" if backlog else "seconds since the first pod was created")
    ax.set_ylabel("pods bound")
    ax.set_title(f"{c.workload.name}: pods bound over time")
    ax.legend(fontsize=8)
    return svg(fig)


def bind_latency_cdf_plot(c: WorkloadComparison) -> str:
    """Share of bound pods against their time from creation to bind, per side."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, side in c.sides.items():
        values = sorted(p.latency for p in side.pods.values() if p.latency is not None)
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post",
                    label=f"{name} (p50 {_seconds(side.latency_quantile(0.5))})", color=COLORS.get(name))
    ax.set_xlabel("creation to bind (s)")
    ax.set_ylabel("share of bound pods")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{c.workload.name}: creation-to-bind CDF")
    ax.legend(fontsize=8)
    return svg(fig)


def _side_rows(c: WorkloadComparison) -> list[list[object]]:
    up = c.sides.get(UPSTREAM)
    rows: list[list[object]] = []
    for name, side in c.sides.items():
        ratio = ""
        if name == OURS and up is not None and up.pods_per_second > 0:
            ratio = f"{side.pods_per_second / up.pods_per_second:.2f}x"
        rows.append([
            name, len(side.pods), f"{side.bound}{' (run timed out)' if side.timed_out else ''}",
            "-" if side.capacity is None else side.capacity, f"{side.pods_per_second:.1f}", ratio,
            _seconds(side.latency_quantile(0.5)), _seconds(side.latency_quantile(0.99)),
            f"{max(0.0, side.last_created - side.first_created):.1f} s", len(side.double_allocated),
        ])
    return rows


def _sizes_rows(c: WorkloadComparison) -> list[list[object]]:
    sizes = sorted({k for side in c.sides.values() for k in side.placed_by_size()})
    rows: list[list[object]] = []
    for size in sizes:
        row: list[object] = [size]
        for side in c.sides.values():
            placed, pods = side.placed_by_size().get(size, (0, 0))
            row.append(f"{placed}/{pods}" if pods else str(placed))
        rows.append(row)
    return rows


def _pod_cell(side: SideResult, name: str) -> str:
    pod = side.pods[name]
    if pod.bound_at is None:
        return "pending" + (f": {pod.unschedulable}" if pod.unschedulable else " (no verdict)")
    devices = ",".join(d.rsplit("/", 1)[-1] for d in pod.devices)
    return f"{pod.node} [{devices}]"


def _workload_section(c: WorkloadComparison) -> str:
    parts = [f"<h2>{_escape(c.workload.name)}</h2>", f"<p>{_escape(c.workload.description)}.</p>"]
    parts.append(_table(["scheduler", "pods", "bound", "schedulable", "pods/s", "ratio", "bind p50", "bind p99",
                         "creating the pods took", "devices placed twice"], _side_rows(c)))
    problems = [f"{name}: {p}" for name, side in c.sides.items() for p in [*side.double_allocated, *side.problems]]
    if problems:
        parts.append("<p class='no'>" + "<br>".join(_escape(p) for p in problems[:20]) + "</p>")
    parts.append("<h3>Claims placed by size</h3>")
    parts.append(_table(["size", *c.sides], _sizes_rows(c)))
    parts.append("<div class='plots'>")
    parts.append(placed_by_size_plot(c))
    parts.append(bound_over_time_plot(c))
    parts.append(bind_latency_cdf_plot(c))
    parts.append("</div>")
    if UPSTREAM in c.sides and OURS in c.sides:
        diffs = c.diffs
        parts.append(f"<h3>Placed differently: {len(diffs)} pod(s)</h3>")
        if diffs:
            parts.append(_table(["reason", "pods"], list(reason_summary(diffs).items())))
            shown = diffs[:DETAIL_ROWS]
            parts.append(_table(
                ["pod", "size", "difference", "reason", "evidence", UPSTREAM, OURS],
                [[d.pod, d.ours.size, d.kind, d.reason, d.evidence, _pod_cell(c.sides[UPSTREAM], d.pod),
                  _pod_cell(c.sides[OURS], d.pod)] for d in shown], css="details"))
            if len(diffs) > len(shown):
                parts.append(f"<p>{len(diffs) - len(shown)} more in the JSON output (-o json).</p>")
    return "\n".join(parts)


def render_report(comparisons: Sequence[WorkloadComparison], *, title: str = TITLE) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{_escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;vertical-align:top}th{background:#f3f3f3}"
        ".no{color:#b00;font-weight:bold}.details td:nth-child(5){min-width:30em}.plots svg{max-width:32%;height:auto;margin-right:1%}</style></head><body>",
        f"<h1>{_escape(title)}</h1>",
        f"<p>Generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC. Each side ran alone on a fresh "
        "control plane with the same objects; pods/s is pods bound over the time from the first pod's creation "
        "to the last bind.</p>",
    ]
    summary = []
    for c in comparisons:
        for row in _side_rows(c):
            summary.append([c.workload.name, *row])
    parts.append(_table(["workload", "scheduler", "pods", "bound", "schedulable", "pods/s", "ratio", "bind p50",
                         "bind p99", "creating the pods took", "devices placed twice"], summary))
    parts.extend(_workload_section(c) for c in comparisons)
    parts.append("</body></html>")
    return "\n".join(parts)
