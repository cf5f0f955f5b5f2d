"""Metrics over HTTP, parsed as Prometheus parses them; docs/metrics.md lists each series."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dra_solver.service.metrics import Metrics
from tests import builders as b
from tests.service.conftest import ROOT, Running


def _scrape(url: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = [(s.name, dict(s.labels), s.value) for s in family.samples]
    return out


def test_metrics_scraped_over_http(fresh: Callable[..., Running]) -> None:
    r = fresh()
    r.client.allocate([b.SOLVER_TEST.named("m1").request("gpu").obj()], "node-b")
    r.client.schedule([b.SOLVER_TEST.named("m2").request("gpu").obj()], reserve=True)
    with pytest.raises(grpc.RpcError):
        r.client.allocate([b.SOLVER_TEST.named("m3").request("gpu", count=0).obj()], "node-b")
    m = _scrape(r.metrics_url)

    codes = {(s[1]["grpc_method"], s[1]["grpc_status_code"]): s[2] for s in m["dra_solver_grpc_requests"] if s[0].endswith("_total")}
    assert codes[("Allocate", "OK")] == 1 and codes[("Allocate", "INVALID_ARGUMENT")] == 1 and codes[("Schedule", "OK")] == 1

    counts = {(s[1]["rpc"], s[1]["outcome"]): s[2] for s in m["dra_solver_allocation_duration_seconds"] if s[0].endswith("_count")}
    assert counts[("Allocate", "allocated")] == 1 and counts[("Schedule", "allocated")] == 1 and counts[("Allocate", "invalid")] == 1

    statuses = {(s[1]["allocator"], s[1]["status"]) for s in m["dra_solver_solves"] if s[0].endswith("_total")}
    assert any(a == "cpsat" for a, _ in statuses)
    objects = {s[1]["kind"]: s[2] for s in m["dra_solver_inventory_objects"]}
    assert objects["Node"] == 3 and objects["ResourceSlice"] == 3 and objects["DeviceClass"] == 1
    assert {s[1]["driver_name"]: s[2] for s in m["dra_solver_inventory_devices"]} == {"gpu.example.com": 16}
    assert m["dra_solver_reservations_in_flight"][0][2] == 1
    assert m["dra_solver_inventory_ready"][0][2] == 1
    devices = {s[1]["driver_name"]: s[2] for s in m["dra_solver_allocated_devices"] if s[0].endswith("_total")}
    assert devices["gpu.example.com"] == 2


def test_metrics_expose_no_request_contents(fresh: Callable[..., Running]) -> None:
    r = fresh()
    r.client.allocate([b.SOLVER_TEST.named("secret-claim-name", ns="secret-namespace").request("gpu").obj()], "node-b")
    with urllib.request.urlopen(r.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    assert "secret-claim-name" not in text and "secret-namespace" not in text


def test_docs_list_every_metric() -> None:
    from dra_solver.kubeletplugin.metrics import Metrics as PluginMetrics

    doc = (ROOT / "docs" / "metrics.md").read_text()
    current = doc.split("\n## Renamed", 1)[0]
    documented = set(re.findall(r"`(dra_solver_[a-z_]+)`", current))
    exported = {family.name for family in Metrics().registry.collect()}
    exported |= {family.name for family in PluginMetrics().registry.collect()}
    # Counters are exported as NAME_total; the docs use the scraped name.
    scraped = {f"{n}_total" if f"{n}_total" in documented else n for n in exported}
    assert scraped == documented
