"""A real Prometheus scrapes a real ``dra-solver serve`` with the scrape job from deploy/.

The Prometheus server is Debian's ``prometheus`` package (scripts/install-prometheus.sh puts it
on CI machines); the test is skipped, saying so, only where that binary is missing. It runs on
loopback with our job from deploy/prometheus/scrape-config.yaml, Kubernetes service discovery
replaced by a static target carrying the labels the relabelling would have produced, and the
alert rules from deploy/monitoring loaded. A workload goes through the gRPC API while
Prometheus scrapes; then Prometheus' HTTP API must return ``dra_solver_`` series, a latency
quantile from the allocation histogram, an answer for every Grafana dashboard query, and
healthy rules.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
import yaml

from dra_solver.service.client import Client
from tests import builders as b

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CLUSTER = ROOT / "examples" / "replay" / "gpu8-cluster.yaml"
WORKLOAD = ROOT / "examples" / "replay" / "gpu8-workload.yaml"
PROMETHEUS = shutil.which("prometheus")
SCRAPE_SECONDS = 1

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed (scripts/install-prometheus.sh installs "
    "Debian's prometheus package; it needs apt-get and root)",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[str, str]]:
    """``dra-solver serve`` on free loopback ports: (grpc address, metrics address)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(CLUSTER),
         "--port", "0", "--metrics-port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"grpc=(\S+) metrics=(\S+)", first)
        if not match:
            _stop(proc)
            raise AssertionError(f"serve printed {first!r}; stderr: {proc.stderr.read() if proc.stderr else ''}")
        with Client(match.group(1), timeout=10) as client:
            client.wait_ready(timeout=60)  # the line comes before the inventory is loaded
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        yield match.group(1), match.group(2)
    finally:
        _stop(proc)


def prometheus_config(target: str, *, rules_file: Path) -> dict[str, Any]:
    """deploy/'s scrape job with Kubernetes discovery swapped for a static target.

    Relabel rules that read ``__meta_kubernetes_*`` labels only exist to select pods and name
    them; the static target carries the labels they would have produced.
    """
    shipped = yaml.safe_load((DEPLOY / "prometheus" / "scrape-config.yaml").read_text())
    (job,) = shipped["scrape_configs"]
    job = dict(job)
    del job["kubernetes_sd_configs"]
    job["relabel_configs"] = [
        rule for rule in job.get("relabel_configs", [])
        if not any(s.startswith("__meta_kubernetes_") for s in rule.get("source_labels", []))
    ]
    if not job["relabel_configs"]:
        del job["relabel_configs"]
    job["scrape_interval"] = f"{SCRAPE_SECONDS}s"
    job["scrape_timeout"] = f"{SCRAPE_SECONDS}s"
    job["static_configs"] = [
        {"targets": [target],
         "labels": {"namespace": "dra-solver", "pod": "dra-solver-test", "component": "solver"}}
    ]
    return {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
        "rule_files": [str(rules_file)],
        "scrape_configs": [job],
    }


def rules_from_manifest() -> dict[str, Any]:
    """The PrometheusRule's groups as a plain Prometheus rules file."""
    rule = yaml.safe_load((DEPLOY / "monitoring" / "prometheusrule.yaml").read_text())
    return {"groups": rule["spec"]["groups"]}


@pytest.fixture(scope="module")
def prometheus(service: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert PROMETHEUS is not None
    work = tmp_path_factory.mktemp("prometheus")
    rules = work / "rules.yml"
    rules.write_text(yaml.safe_dump(rules_from_manifest()))
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(service[1], rules_file=rules)))
    promtool = shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "config", str(config)],
                               capture_output=True, text=True, timeout=60, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
    address = f"127.0.0.1:{_free_port()}"
    log = (work / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address={address}", "--web.enable-lifecycle",
         "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT, cwd=work,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("prometheus did not start:\n" + (work / "prometheus.log").read_text()[-3000:])
            time.sleep(0.2)
        yield f"http://{address}"
    finally:
        _stop(proc)
        log.close()


def query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _claims() -> list[bytes]:
    doc = yaml.safe_load(WORKLOAD.read_text())
    return [json.dumps(item).encode() for item in doc["items"][:6]]


def drive_workload(grpc_address: str, *, seconds: float) -> dict[str, int]:
    """Allocate, Schedule and Explain calls, some failing on purpose, for ``seconds``."""
    from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
    from dra_solver.service.gen.drasolver.v1 import allocation_pb2_grpc as pb_grpc

    claims = _claims()
    impossible = json.dumps(b.claim("too-many", uid="u-too-many", cls=b.CLASS).request(
        "gpu", allocationMode="ExactCount", count=16).obj()).encode()
    # Fails API validation: a request count must be positive.
    invalid = json.dumps(b.claim("bad", uid="u-bad", cls=b.CLASS).request("gpu", allocationMode="ExactCount", count=0).obj()).encode()
    counts: dict[str, int] = {}
    with grpc.insecure_channel(grpc_address) as channel:
        stub: Any = cast(Any, pb_grpc).AllocationServiceStub(channel)
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            claim = claims[i % len(claims)]
            calls: list[tuple[str, Any, object]] = [
                ("allocate", stub.Allocate, pb.AllocateRequest(claims=[claim], node="node-0")),
                ("schedule", stub.Schedule, pb.ScheduleRequest(claims=[claim])),
                ("explain", stub.Explain, pb.ExplainRequest(claims=[impossible], node="node-1")),
                ("invalid", stub.Allocate, pb.AllocateRequest(claims=[invalid], node="node-0")),
                ("unknown-node", stub.Allocate, pb.AllocateRequest(claims=[claim], node="nope")),
            ]
            for name, method, request in calls:
                try:
                    method(request, timeout=10)
                    counts[name] = counts.get(name, 0) + 1
                except grpc.RpcError as err:
                    key = f"{name}:{err.code().name}"
                    counts[key] = counts.get(key, 0) + 1
            i += 1
    return counts


def _wait_for(prometheus: str, promql: str, *, timeout: float = 20) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        result = query(prometheus, promql)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def grafana_to_promql(expr: str) -> str:
    """Grafana's template variables replaced the way Grafana would for 'All' and defaults."""
    expr = expr.replace("$__rate_interval", "30s").replace("$__interval", "5s")
    expr = expr.replace("$__range", "5m")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def test_prometheus_scrapes_dra_solver(service: tuple[str, str], prometheus: str) -> None:
    # Scraping starts a moment after Prometheus reports ready; drive the workload once it has.
    up = _wait_for(prometheus, 'up{job="dra-solver"} == 1')
    assert up, "the target is not up"
    assert up[0]["metric"]["component"] == "solver"

    grpc_address, _ = service
    counts = drive_workload(grpc_address, seconds=4 * SCRAPE_SECONDS)
    assert counts.get("allocate", 0) > 0 and counts.get("schedule", 0) > 0, counts
    assert counts.get("invalid:INVALID_ARGUMENT", 0) > 0, counts
    assert counts.get("unknown-node:NOT_FOUND", 0) > 0, counts
    # Two more scrapes after the workload so rate() sees all of it.
    time.sleep(2 * SCRAPE_SECONDS + 0.5)

    names = {
        r["metric"]["__name__"]
        for r in query(prometheus, 'group by (__name__) ({__name__=~"dra_solver_.+", job="dra-solver"})')
    }
    assert names, "no dra_solver_ series in Prometheus"
    buckets = sorted(n for n in names if n.endswith("_seconds_bucket"))
    assert buckets, f"no latency histogram among {sorted(names)}"

    latency = next((b for b in buckets if "alloc" in b or "request" in b), buckets[0])
    quantile = query(
        prometheus,
        f"histogram_quantile(0.99, sum by (le) (rate({latency}[30s])))",
    )
    assert quantile, f"no quantile from {latency}"
    value = float(quantile[0]["value"][1])
    assert math.isfinite(value) and value > 0, f"p99 of {latency} is {value}"

    # gRPC status codes reach Prometheus with the upstream label name.
    codes = query(prometheus, 'group by (grpc_status_code) ({__name__=~"dra_solver_.+", grpc_status_code!=""})')
    seen = {r["metric"]["grpc_status_code"] for r in codes}
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND"} <= seen, seen

    # Every Grafana panel's query is valid PromQL over what was scraped. Panels about events
    # this workload does not cause (reservations, relists) may be empty; most must show data.
    empty = []
    for title, expr in dashboard_queries():
        promql = grafana_to_promql(expr)
        if not query(prometheus, promql):
            empty.append(f"{title}: {promql}")
    assert len(empty) <= len(dashboard_queries()) // 3, "empty panels:\n" + "\n".join(empty)

    # The alert rules load into a real Prometheus and evaluate without errors.
    _check_rules(prometheus)


def _check_rules(prometheus: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        with urllib.request.urlopen(f"{prometheus}/api/v1/rules", timeout=10) as resp:
            groups = json.load(resp)["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        # Rules not yet evaluated report the zero time ("0001-01-01T00:00:00Z").
        pending = [r for r in rules if r.get("lastEvaluation", "0001").startswith("0001")]
        if (rules and not pending) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rules, "no rules loaded"
    bad = [f"{r['name']}: {r.get('lastError')}" for r in rules if r.get("health") != "ok"]
    assert not bad, bad
