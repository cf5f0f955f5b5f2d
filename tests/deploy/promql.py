"""Just enough PromQL reading to know which metrics and labels an expression uses.

The dashboard and the alert rules must only name series the code exports; this pulls the
metric names (identifiers that are not functions, keywords or label names) and the label names
(in ``by``/``without``/``on``/``ignoring`` clauses and in ``{...}`` matchers) out of an
expression. Grafana's ``$variables`` and string literals are removed first.
"""

from __future__ import annotations

import re

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and",
    "or", "unless", "atan2", "inf", "nan", "start", "end",
}
AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_MATCHERS = re.compile(r"\{([^{}]*)\}")
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_LABEL_IN_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)")


def clean(expr: str) -> str:
    expr = _VARIABLE.sub("x", expr)
    return _STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (``{__name__=~...}`` selectors are not resolved)."""
    text = clean(expr)
    text = _MATCHERS.sub(" ", text)
    text = _CLAUSE.sub(" ", text)
    text = _RANGE.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name in KEYWORDS or name in AGGREGATIONS:
            continue
        names.add(name)
    return names


def label_names(expr: str) -> set[str]:
    """Label names used in matchers and grouping clauses."""
    text = clean(expr)
    labels: set[str] = set()
    for body in _MATCHERS.findall(text):
        labels.update(m.group(1) for m in _LABEL_IN_MATCHER.finditer(body))
    for _, body in _CLAUSE.findall(text):
        labels.update(part.strip() for part in body.split(",") if part.strip())
    return labels
