"""Claim creation to pod binding on the real kube-apiserver, for pods with claim templates.

    python benchmarks/claim_to_bind.py [--pods 1000] [--nodes 125] [--gpus 8] [--rate 0]
                                       [--workers N] [--claim-workers N] [--timeout 600] [-o json]

Starts its own control plane (upstream v1.37.2: etcd, kube-apiserver, kube-controller-manager,
built by scripts/build-upstream.sh), the solver service on its Kubernetes inventory, and the
controllers (claim controller, scheduler, eviction) in this process; publishes ``--nodes``
Nodes with a ResourceSlice of ``--gpus`` GPUs each; then creates ``--pods`` pods, each with a
one-GPU claim template (all at once, or ``--rate`` pods per second).

A watch of its own records, for every pod, when its generated ResourceClaim was first seen and
when the pod was first seen bound; it prints p50/p99/max of claim-to-bind and of
pod-to-bind. The scheduler's periodic flush is set to an hour, so a pod that waited for it
would show up as a timeout; the scheduler's ``scheduler_queue_incoming_pods_total`` counts how
many pods only the flush brought back (must be 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dra_solver.controllers import objects as ob
from dra_solver.controllers.manager import Manager, Options
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi.informer import Informer
from dra_solver.service.localcluster.cluster import create_node, node_object
from dra_solver.service.localcluster.controlplane import ControlPlane, binaries

DRIVER = "gpu.example.com"
RESOURCE = "/apis/resource.k8s.io/v1"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Timeline:
    """First sight of each pod's generated claim and of the pod bound, from one watch each."""

    def __init__(self, kube_api: kube.Kube) -> None:
        self.claim_seen: dict[str, float] = {}
        self.bound_seen: dict[str, float] = {}
        self.lock = threading.Lock()
        self.claims = Informer(kube_api.claims(), watch_timeout=600)
        self.pods = Informer(kube_api.pods(), watch_timeout=600)
        self.claims.add_handler(self._on_claim)
        self.pods.add_handler(self._on_pod)

    def _on_claim(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        owner, _ = ob.owning_pod(new)
        if owner:
            with self.lock:
                self.claim_seen.setdefault(f"{ob.namespace(new)}/{owner}", time.monotonic())

    def _on_pod(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None and ob.pod_node(new):
            with self.lock:
                self.bound_seen.setdefault(ob.key(new), time.monotonic())

    def start(self) -> None:
        self.claims.start()
        self.pods.start()
        self.claims.wait_synced(60)
        self.pods.wait_synced(60)

    def stop(self) -> None:
        self.claims.stop()
        self.pods.stop()


def setup_cluster(cp: ControlPlane, nodes: int, gpus: int) -> None:
    cp.request("POST", f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    })
    cp.request("POST", f"{RESOURCE}/namespaces/default/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 1}}]}}},
    })

    def one(i: int) -> None:
        name = f"node-{i:04d}"
        create_node(cp, node_object(name, cpu="64", memory="512Gi"))
        # The TaintNodesByCondition admission plugin marks new Nodes not-ready; no kubelet will
        # lift it, so do what the node lifecycle controller would.
        cp.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type="application/merge-patch+json")
        cp.request("POST", f"{RESOURCE}/resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{d}", "attributes": {"model": {"string": "a100"}}} for d in range(gpus)]},
        })

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(nodes)))


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "dra-solver",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


def start_solver(kubeconfig: str) -> Any:
    from dra_solver.service.commands import serve

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    service = serve.build(parser.parse_args(["--kubeconfig", kubeconfig, "--port", "0", "--metrics-port", "-1", "--log-level", "warning"]))
    service.start()
    deadline = time.monotonic() + 60
    while not service.engine.source.snapshot().ready:
        if time.monotonic() > deadline:
            raise SystemExit("the solver's inventory did not sync within 60 s")
        time.sleep(0.05)
    return service


def run(args: argparse.Namespace) -> dict[str, Any]:
    from dra_solver.service.client import Client

    cp = ControlPlane(binaries())
    cp.start()
    service = client = manager = timeline = None
    try:
        setup_cluster(cp, args.nodes, args.gpus)
        kubeconfig = str(cp.kubeconfig)
        service = start_solver(kubeconfig)
        snapshot_ready = time.monotonic() + 60
        while len(service.engine.source.snapshot().inventory.slices) < args.nodes and time.monotonic() < snapshot_ready:
            time.sleep(0.1)
        client = Client(f"127.0.0.1:{service.port}", timeout=60)
        kube_api = kube.Kube(kube.api_client(kubeconfig=kubeconfig, user_agent="dra-solver-bench/controllers"))
        options = Options(scheduler_workers=args.workers, claim_workers=args.claim_workers, flush_interval=3600.0,
                          events=True, identity="bench")
        manager = Manager(kube_api, options, solver_client=client, metrics=ControllerMetrics())
        manager.start()
        timeline = Timeline(kube.Kube(kube.api_client(kubeconfig=kubeconfig, user_agent="dra-solver-bench/watch")))
        timeline.start()

        created: dict[str, float] = {}
        names = [f"bench-{i:05d}" for i in range(args.pods)]
        start = time.monotonic()

        def create(i: int) -> None:
            if args.rate > 0:
                delay = start + i / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            created[f"default/{names[i]}"] = time.monotonic()
            cp.request("POST", "/api/v1/namespaces/default/pods", pod(names[i]))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(args.pods)))
        created_all = time.monotonic() - start
        deadline = time.monotonic() + args.timeout
        while len(timeline.bound_seen) < args.pods and time.monotonic() < deadline:
            time.sleep(0.1)
        total = time.monotonic() - start
        with timeline.lock:
            bound = dict(timeline.bound_seen)
            claims = dict(timeline.claim_seen)
        claim_to_bind = [bound[k] - claims[k] for k in bound if k in claims]
        pod_to_bind = [bound[k] - created[k] for k in bound if k in created]
        metrics = manager.metrics
        flushed = metrics.queue_incoming_pods.labels(event="UnschedulableTimeout", queue="active")._value.get()
        attempts = {r: metrics.schedule_attempts.labels(result=r)._value.get() for r in ("scheduled", "unschedulable", "waiting", "error")}
        solver_calls: dict[str, float] = {}
        for family in metrics.registry.collect():
            for sample in family.samples:
                if sample.name == "dra_solver_scheduler_solver_request_duration_seconds_count":
                    label = f"{sample.labels['rpc']} {sample.labels['code']}"
                    solver_calls[label] = solver_calls.get(label, 0.0) + sample.value

        def summary(values: list[float]) -> dict[str, float]:
            return {
                "p50_s": round(percentile(values, 0.50), 4),
                "p99_s": round(percentile(values, 0.99), 4),
                "max_s": round(max(values), 4) if values else float("nan"),
                "mean_s": round(statistics.fmean(values), 4) if values else float("nan"),
            }

        return {
            "pods": args.pods, "nodes": args.nodes, "gpus_per_node": args.gpus, "rate": args.rate or "burst",
            "scheduler_workers": args.workers, "claim_workers": args.claim_workers,
            "bound": len(bound), "seconds_to_create_all": round(created_all, 2), "seconds_until_all_bound": round(total, 2),
            "pods_per_second": round(len(bound) / total, 1) if total > 0 else 0.0,
            "claim_to_bind": summary(claim_to_bind), "pod_to_bind": summary(pod_to_bind),
            "woken_by_flush": flushed, "attempts": attempts, "solver_calls": solver_calls,
            "rollbacks": metrics.rollbacks._value.get(),
        }
    finally:
        if timeline is not None:
            timeline.stop()
        if manager is not None:
            manager.stop()
        if client is not None:
            client.close()
        if service is not None:
            service.stop(0)
        cp.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--rate", type=float, default=0.0, help="pods created per second (0 = all at once)")
    parser.add_argument("--workers", type=int, default=Options.scheduler_workers, help="scheduler workers")
    parser.add_argument("--claim-workers", type=int, default=Options.claim_workers, help="claim controller workers")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every pod to be bound")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = parser.parse_args()
    result = run(args)
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        c, p = result["claim_to_bind"], result["pod_to_bind"]
        print(f"{result['bound']}/{result['pods']} pods bound on {result['nodes']} nodes x {result['gpus_per_node']} GPUs "
              f"({result['rate']}, {result['scheduler_workers']} scheduler workers) in {result['seconds_until_all_bound']} s "
              f"({result['pods_per_second']} pods/s; creating them took {result['seconds_to_create_all']} s)")
        print(f"claim created -> pod bound: p50 {c['p50_s']:.3f} s  p99 {c['p99_s']:.3f} s  max {c['max_s']:.3f} s")
        print(f"pod created   -> pod bound: p50 {p['p50_s']:.3f} s  p99 {p['p99_s']:.3f} s  max {p['max_s']:.3f} s")
        print(f"pods woken only by the periodic flush: {result['woken_by_flush']:.0f}; attempts: {result['attempts']}; "
              f"solver calls: {result['solver_calls']}; rollbacks: {result['rollbacks']:.0f}")
    return 0 if result["bound"] == result["pods"] and result["woken_by_flush"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
