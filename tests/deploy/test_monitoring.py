"""Dashboard, alert rules, scrape config and monitors name only what the code exports.

The exported series are read from the code itself: ``service.metrics.Metrics`` builds the
solver's registry, and the controllers' and kubelet plugin's metrics modules are read the same
way when they define one. Every metric name and label in the Grafana dashboard and the alert
rules must exist there (with the target labels the scrape config adds).
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.deploy import promql
from tests.deploy.manifests import DEPLOY, find, overlay, rendered

DASHBOARD = DEPLOY / "monitoring" / "grafana-dashboard.json"
# Labels Prometheus adds to every series: the job and instance, and our relabelling's
# namespace, pod and component (deploy/prometheus/scrape-config.yaml, the monitors).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "component"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def _registries() -> list[CollectorRegistry]:
    """The registries the three components export, built as the code builds them."""
    from dra_solver.service.metrics import Metrics

    out = [Metrics().registry]
    for module_name in ("dra_solver.controllers.metrics", "dra_solver.kubeletplugin.metrics"):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:
                continue
            raise
        factory = getattr(module, "Metrics", None) or getattr(module, "ControllerMetrics", None)
        if factory is not None:
            out.append(factory().registry)
        elif isinstance(getattr(module, "REGISTRY", None), CollectorRegistry):
            out.append(module.REGISTRY)
    return out


def exported() -> dict[str, set[str]]:
    """Series name -> label names, over every exported metric."""
    series: dict[str, set[str]] = {}
    for registry in _registries():
        for collector in list(registry._collector_to_names):
            kind = getattr(collector, "_type", None)
            name = getattr(collector, "_name", None)
            labels = set(getattr(collector, "_labelnames", ()))
            if kind is None or name is None:
                for family in collector.collect():
                    for sample in family.samples:
                        series.setdefault(sample.name, set()).update(sample.labels)
                continue
            for suffix in SUFFIXES[kind]:
                extra = {"le"} if suffix == "_bucket" else set()
                series[name + suffix] = labels | extra
    return series


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def _dashboard_exprs() -> list[tuple[str, str]]:
    out = []
    dashboard = _dashboard()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            text = query["query"] if isinstance(query, dict) else query
            inner = text.removeprefix("label_values(").removesuffix(")")
            metric = inner.split(",")[0].strip()
            out.append((f"variable {variable['name']}", metric))
    return out


def _rule_exprs() -> list[tuple[str, str]]:
    rule = yaml.safe_load((DEPLOY / "monitoring" / "prometheusrule.yaml").read_text())
    return [
        (r.get("alert") or r["record"], r["expr"])
        for group in rule["spec"]["groups"]
        for r in group["rules"]
    ]


def _check_expr(where: str, expr: str, series: dict[str, set[str]]) -> list[str]:
    problems = []
    names = promql.metric_names(expr) - {"up"}
    used_labels = promql.label_names(expr) - TARGET_LABELS - {"__name__"}
    for name in sorted(names):
        if name not in series:
            problems.append(f"{where}: {name} is not exported")
    known = set().union(*(series.get(n, set()) for n in names)) if names else set()
    for label in sorted(used_labels - known):
        problems.append(f"{where}: label {label} is on none of {sorted(names)}")
    return problems


def test_dashboard_queries_use_exported_metrics_and_labels() -> None:
    series = exported()
    problems = [p for where, expr in _dashboard_exprs() for p in _check_expr(where, expr, series)]
    assert not problems, "\n".join(problems)


def test_alert_rules_use_exported_metrics_and_labels() -> None:
    series = exported()
    problems = [p for where, expr in _rule_exprs() for p in _check_expr(where, expr, series)]
    assert not problems, "\n".join(problems)


def test_dashboard_covers_what_operators_ask_for() -> None:
    # The list: latency p50/p99, outcomes, solver status, objective, inventory size,
    # reservations.
    exprs = " ".join(expr for _, expr in _dashboard_exprs())
    for needle in (
        "histogram_quantile(0.5, sum by (le, rpc) (rate(dra_solver_allocation_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le, rpc) (rate(dra_solver_allocation_duration_seconds_bucket",
        "dra_solver_allocation_duration_seconds_count",
        "dra_solver_solves_total",
        "dra_solver_first_available_score_sum",
        "dra_solver_inventory_objects",
        "dra_solver_reservations_in_flight",
        # Every RPC's latency, and the kubelet plugin's work (issue 18).
        "dra_solver_request_duration_seconds_bucket",
        "dra_solver_kubelet_plugin_claims_total",
        "dra_solver_kubelet_plugin_operation_duration_seconds_bucket",
        "dra_solver_kubelet_plugin_prepared_claims",
        "dra_solver_kubelet_plugin_checkpoint_writes_total",
        "dra_solver_kubelet_plugin_device_health_events_total",
    ):
        assert needle in exprs, f"no panel uses {needle}"


def test_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], f"{panel['title']}: no query"
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        for target in panel["targets"]:
            for var in promql._VARIABLE.findall(target["expr"]):
                name = var.strip("${}")
                assert name.startswith("__") or name in variables, f"undefined ${name}"
            assert 'namespace=~"$namespace"' in target["expr"], (
                f"{panel['title']}: every query follows the namespace variable"
            )


def test_dashboard_ships_as_a_grafana_sidecar_config_map() -> None:
    objects = rendered("deploy/monitoring")
    config_map = find(objects, "ConfigMap", "dra-solver-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = config_map["data"].values()
    assert json.loads(text) == _dashboard()


def test_monitors_select_the_right_pods_and_ports() -> None:
    objects = overlay("production")
    service = find(objects, "Service", "dra-solver")
    monitoring = rendered("deploy/monitoring")
    service_monitor = find(monitoring, "ServiceMonitor", "dra-solver")
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"
    ].items()
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in service_monitor["spec"]["endpoints"]:
        assert endpoint["port"] in service_ports
    for pod_monitor in [o for o in monitoring if o["kind"] == "PodMonitor"]:
        selector = pod_monitor["spec"]["selector"]["matchLabels"]
        workloads = [
            o for o in objects
            if o["kind"] in {"Deployment", "DaemonSet"}
            and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert workloads, f"{pod_monitor['metadata']['name']} selects no pods"
        for workload in workloads:
            ports = {
                p["name"]
                for c in workload["spec"]["template"]["spec"]["containers"]
                for p in c.get("ports", [])
            }
            for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]:
                assert endpoint["port"] in ports


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_rules_and_scrape_config(tmp_path: Path) -> None:
    rule = yaml.safe_load((DEPLOY / "monitoring" / "prometheusrule.yaml").read_text())
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run(["promtool", "check", "rules", str(rules)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # Debian's Prometheus is built without Kubernetes service discovery, so the job is checked
    # with a static target in its place (everything else as shipped).
    shipped = yaml.safe_load((DEPLOY / "prometheus" / "scrape-config.yaml").read_text())
    (job,) = shipped["scrape_configs"]
    sd = job.pop("kubernetes_sd_configs")
    assert sd[0]["role"] == "pod"
    job["static_configs"] = [{"targets": ["127.0.0.1:9090"]}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    done = subprocess.run(["promtool", "check", "config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promql_reader() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, rpc) (rate(a_bucket{namespace=~"$namespace", '
        'x!="y"}[$__rate_interval]))) / on (rpc) group_left b_total offset 5m'
    )
    assert promql.metric_names(expr) == {"a_bucket", "b_total"}
    assert promql.label_names(expr) == {"le", "rpc", "namespace", "x"}
