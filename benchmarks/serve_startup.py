"""How fast ``dra-solver serve`` becomes ready, and how much memory it takes, before -> after.

    python benchmarks/serve_startup.py [--mig-nodes 5000] [--big-nodes 21869] [--before REF]
                                       [--inventory PATH ...] [--skip-before]

Inventories: ``--mig-nodes`` 8-GPU nodes with MIG-like partitions (``dra-solver bench``'s
``mig`` shape, JSON files); ``--big-nodes`` a realistic single YAML file (Nodes with labels and
uids, one ResourceSlice of 8 GPUs each with a per-GPU UUID attribute: about 50 MB at 21,869
nodes); ``--inventory`` any file or directory besides.

Each inventory is served by the code at ``--before`` (a git ref, default ``main``, checked out
in a temporary worktree) and by this checkout, one after the other in the same run. Reported
per run: seconds until the ``grpc=`` line, seconds until gRPC health says SERVING, the
process's CPU seconds at that moment, with those of its ended child processes (a large YAML
file is parsed in a forked child beside the decoding: ``service/parse_ahead.py``), its peak
RSS, and how long the first Schedule (one device of the inventory's class)
then takes (what a caller waits for right after "ready"). Targets (issue 16, idle 2-core machine): 5,000 MIG nodes ready in
<= 10 s; the 50 MB / 21,869-node inventory in <= 15 s with RSS <= 1 GiB.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dra_solver.service import bench  # noqa: E402
from dra_solver.service.client import Client  # noqa: E402

BIG_CLASS = "gpu.nvidia.com"


def big_inventory(path: Path, nodes: int) -> Path:
    rng = random.Random(7)
    docs: list[dict[str, object]] = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": BIG_CLASS},
                                      "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}]
    for i in range(nodes):
        name = f"gpu-node-{i:05d}"
        docs.append({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "uid": str(uuid.UUID(int=rng.getrandbits(128))), "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{'abc'[i % 3]}"}}})
        devices = [{"name": f"gpu-{g}", "attributes": {
            "uuid": {"string": f"GPU-{uuid.UUID(int=rng.getrandbits(128))}"},
            "productName": {"string": "NVIDIA A100-SXM4-40GB"}, "index": {"int": g}},
            "capacity": {"memory": {"value": "40Gi"}}} for g in range(8)]
        docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {
            "name": f"{name}-gpu", "uid": str(uuid.UUID(int=rng.getrandbits(128))), "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}})
    with path.open("w") as f:
        yaml.dump_all(docs, f, Dumper=yaml.CSafeDumper, sort_keys=False)
    return path


def serve_once(inventory: Path, code: Path, device_class: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(code))
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(inventory), "--port", "0",
                             "--metrics-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=code, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        listening = time.monotonic() - start
        address = dict(part.split("=", 1) for part in line.split())["grpc"]
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    if health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        ready = time.monotonic() - start
        cpu = bench.cpu_seconds(proc.pid, children=True)
        _, peak = bench.rss_mib(proc.pid)
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "first", "namespace": "default"},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}}
        with Client(address, timeout=600) as client:
            started = time.monotonic()
            placed = client.schedule([claim]).node
            first = time.monotonic() - started
        assert placed, "the first Schedule found no node"
        return {"listening": listening, "ready": ready, "cpu": cpu, "rss_mib": peak, "first": first}
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mig-nodes", type=int, default=5000)
    parser.add_argument("--big-nodes", type=int, default=21869)
    parser.add_argument("--inventory", action="append", default=[], help="another inventory file or directory")
    parser.add_argument("--device-class", default=bench.DRIVER, help="the class the first Schedule asks for on --inventory")
    parser.add_argument("--before", default="main", help="git ref of the code to compare with (default main)")
    parser.add_argument("--skip-before", action="store_true", help="measure this checkout only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="serve-startup-") as tmp:
        work = Path(tmp)
        inventories: list[tuple[str, Path, str]] = []
        if args.mig_nodes:
            mig = bench.write_cluster(work / "mig", nodes=args.mig_nodes, shape="mig")
            inventories.append((f"{args.mig_nodes:,} MIG nodes (JSON)", mig, bench.DRIVER))
        if args.big_nodes:
            path = big_inventory(work / "big.yaml", args.big_nodes)
            inventories.append((f"{args.big_nodes:,} realistic nodes, {path.stat().st_size / 1e6:.0f} MB YAML", path, BIG_CLASS))
        inventories += [(p, Path(p), args.device_class) for p in args.inventory]
        versions: list[tuple[str, Path]] = []
        if not args.skip_before:
            before = work / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.before], check=True, capture_output=True)
            versions.append((f"before ({args.before})", before))
        versions.append(("after", ROOT))
        try:
            print(f"{'inventory':45} {'version':16} {'grpc= line':>10} {'ready':>8} {'CPU':>8} {'peak RSS':>10} {'1st Schedule':>12}")
            for label, inventory, device_class in inventories:
                rows = []
                for name, code in versions:
                    r = serve_once(inventory, code, device_class)
                    rows.append(r)
                    print(f"{label:45} {name:16} {r['listening']:9.1f}s {r['ready']:7.1f}s {r['cpu']:7.1f}s {r['rss_mib']:7.0f} MiB "
                          f"{r['first']:11.2f}s", flush=True)
                if len(rows) == 2:
                    b, a = rows
                    print(f"{'':45} {'before -> after':16} {b['listening'] / a['listening']:9.1f}x {b['ready'] / a['ready']:7.1f}x "
                          f"{b['cpu'] / a['cpu']:7.1f}x {b['rss_mib'] / a['rss_mib']:7.2f}x {b['first'] / a['first']:11.1f}x", flush=True)
            print(f"load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        finally:
            if not args.skip_before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "before")], check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
