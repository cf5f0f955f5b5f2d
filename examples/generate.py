"""Generate the bundled comparison scenarios and replay clusters in ``examples/``.

Run ``python examples/generate.py`` to rewrite them; the output is deterministic (fixed seeds),
and a test checks the committed files are current. Shapes follow issue 8's measurements: a
4-node cluster of 8 GPUs per node, each GPU published as a whole device plus MIG-like
partitions (1g.10gb x7, 2g.20gb x3, 3g.40gb x2, 4g.40gb x1) sharing the counters
{compute: 7, memory: 80Gi}, in three device orders.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DRIVER = "gpu.example.com"
PROFILES = [("1g.10gb", 1, 10, 7), ("2g.20gb", 2, 20, 3), ("3g.40gb", 3, 40, 2), ("4g.40gb", 4, 40, 1)]
GPUS_PER_NODE = 8
GPUS_PER_SLICE = 4  # 4 x 14 devices = 56 <= 64, the limit for slices whose devices consume counters


def gpu_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def mig_devices(gpu: int, order: str, rng: random.Random) -> list[dict[str, Any]]:
    counters = f"gpu-{gpu}-counters"
    whole = {
        "name": f"gpu-{gpu}",
        "attributes": {"profile": {"string": "whole"}, "gpu": {"int": gpu}},
        "capacity": {"memory": {"value": "80Gi"}, "compute": {"value": "7"}},
        "consumesCounters": [{"counterSet": counters, "counters": {"compute": {"value": "7"}, "memory": {"value": "80Gi"}}}],
    }
    parts = []
    for profile, compute, mem, count in PROFILES:
        for k in range(count):
            parts.append(
                {
                    "name": f"gpu-{gpu}-{profile.replace('.', '-')}-{k}",
                    "attributes": {"profile": {"string": profile}, "gpu": {"int": gpu}},
                    "capacity": {"memory": {"value": f"{mem}Gi"}, "compute": {"value": str(compute)}},
                    "consumesCounters": [
                        {"counterSet": counters, "counters": {"compute": {"value": str(compute)}, "memory": {"value": f"{mem}Gi"}}}
                    ],
                }
            )
    devices = [whole, *parts] if order == "whole-first" else [*parts, whole]
    if order == "shuffled":
        rng.shuffle(devices)
    return devices


def mig_cluster(order: str, *, nodes: int = 4, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = [gpu_class()]
    for n in range(nodes):
        name = f"node-{n}"
        objects.append(node(name))
        slice_count = GPUS_PER_NODE // GPUS_PER_SLICE + 1
        pool = {"name": name, "generation": 1, "resourceSliceCount": slice_count}
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{DRIVER}-counters"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": pool,
                    "sharedCounters": [
                        {"name": f"gpu-{g}-counters", "counters": {"compute": {"value": "7"}, "memory": {"value": "80Gi"}}}
                        for g in range(GPUS_PER_NODE)
                    ],
                },
            }
        )
        for s in range(GPUS_PER_NODE // GPUS_PER_SLICE):
            devices = [d for g in range(s * GPUS_PER_SLICE, (s + 1) * GPUS_PER_SLICE) for d in mig_devices(g, order, rng)]
            objects.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{name}-{DRIVER}-devices-{s}"},
                    "spec": {"driver": DRIVER, "nodeName": name, "pool": pool, "devices": devices},
                }
            )
    return objects


def memory_claim(name: str, gib: int, *, count: int = 1, size: str = "") -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}
    if gib:
        request["selectors"] = [
            {"cel": {"expression": f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{gib}Gi')) >= 0"}}
        ]
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if size:
        # The replay reports placements per size class.
        metadata["labels"] = {"replay.dra-solver.io/size": size}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def mig_workload(*, claims: int = 200, seed: int = 42) -> dict[str, Any]:
    rng = random.Random(seed)
    sizes = rng.choices([10, 20, 40, 80], weights=[4, 3, 2, 1], k=claims)
    items = [memory_claim(f"claim-{i:03d}-{gib}gi", gib, size=f"{gib}Gi") for i, gib in enumerate(sizes)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


PLAIN_IN_USE = (0, 0, 0, 3, 0, 2, 2, 1)
"""GPUs already taken per node of the 8-GPU cluster: a cluster in use, not a fresh one (on an
empty cluster with power-of-two claims, first node in name order and best fit coincide)."""


def plain_cluster(*, nodes: int = 8, in_use: tuple[int, ...] = PLAIN_IN_USE) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [gpu_class()]
    for n in range(nodes):
        name = f"node-{n}"
        objects.append(node(name))
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{DRIVER}"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{g}", "attributes": {"index": {"int": g}}, "capacity": {"memory": {"value": "80Gi"}}}
                        for g in range(GPUS_PER_NODE)
                    ],
                },
            }
        )
        taken = in_use[n] if n < len(in_use) else 0
        if taken:
            objects.append(_running_claim(f"running-on-{name}", name, taken))
    return objects


def _running_claim(name: str, node_name: str, count: int) -> dict[str, Any]:
    """An allocated claim holding the first ``count`` GPUs of a node."""
    claim = memory_claim(name, 0, count=count)
    claim["metadata"]["uid"] = f"uid-{name}"
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": f"gpu-{g}"} for g in range(count)
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            },
        }
    }
    return claim


def plain_workload(*, claims: int = 60, seed: int = 11) -> dict[str, Any]:
    rng = random.Random(seed)
    counts = rng.choices([1, 2, 4, 8], weights=[4, 3, 2, 2], k=claims)
    items = [memory_claim(f"claim-{i:03d}-{c}gpu", 0, count=c, size=f"{c}gpu") for i, c in enumerate(counts)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _slice(name: str, node_name: str, devices: list[dict[str, Any]], driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def scenario_agree() -> list[dict[str, Any]]:
    """Both allocators find the same devices: plain requests, no choices that matter."""
    devices = [{"name": f"gpu-{i}", "attributes": {"model": {"string": "h100"}}} for i in range(4)]
    return [
        gpu_class(), node("worker-1"), _slice("worker-1-gpus", "worker-1", devices),
        memory_claim("one-gpu", 0), memory_claim("two-gpus", 0, count=2),
    ]


def scenario_higher_score() -> list[dict[str, Any]]:
    """First-fit gives claim-a its first choice, which pushes claim-b to its third choice;
    the optimum gives claim-a its second choice and claim-b its first (score 15 vs 14)."""
    devices = [
        {"name": "gpu-0", "attributes": {"model": {"string": "a100"}}},
        {"name": "gpu-1", "attributes": {"model": {"string": "h100"}}},
    ]

    def sub(name: str, model: str) -> dict[str, Any]:
        return {
            "name": name, "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
            "selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].model == '{model}'"}}],
        }

    def claim(name: str, subs: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": subs}]}},
        }

    return [
        gpu_class(), node("worker-1"), _slice("worker-1-gpus", "worker-1", devices),
        claim("claim-a", [sub("a100", "a100"), sub("h100", "h100")]),
        claim("claim-b", [sub("a100", "a100"), sub("b200", "b200"), sub("h100", "h100")]),
    ]


def scenario_explodes(*, devices: int = 16, values: int = 4, count: int = 5) -> list[dict[str, Any]]:
    """A claim for ``count`` GPUs (one request each) with pairwise distinct NUMA nodes on a node
    that has only ``values`` NUMA nodes: unsatisfiable, and first-fit backtracking tries every
    combination of GPUs with different values before giving up; CP-SAT proves it at once.

    (One request per GPU, not one request for ``count`` GPUs: upstream releases before v0.37.2
    checked distinctness between requests only, see the README's "Where upstream deviates".)"""
    devs = [{"name": f"gpu-{i}", "attributes": {"numa": {"int": i % values}}} for i in range(devices)]
    requests = [
        {"name": f"gpu-{r}", "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}
        for r in range(count)
    ]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "distinct-numa", "namespace": "default"},
        "spec": {"devices": {"requests": requests, "constraints": [{"distinctAttribute": f"{DRIVER}/numa"}]}},
    }
    return [gpu_class(), node("worker-1"), _slice("worker-1-gpus", "worker-1", devs), claim]


def dump(path: Path, docs: list[dict[str, Any]] | dict[str, Any]) -> None:
    header = "# Generated by examples/generate.py; do not edit by hand.\n"
    if isinstance(docs, dict):
        body = yaml.safe_dump(docs, sort_keys=False)
    else:
        body = yaml.safe_dump_all(docs, sort_keys=False)
    path.write_text(header + body, encoding="utf-8")


def outputs() -> dict[Path, list[dict[str, Any]] | dict[str, Any]]:
    return {
        HERE / "compare" / "agree.yaml": scenario_agree(),
        HERE / "compare" / "higher-score.yaml": scenario_higher_score(),
        HERE / "compare" / "backtracking-explodes.yaml": scenario_explodes(),
        HERE / "replay" / "mig-whole-first.yaml": mig_cluster("whole-first"),
        HERE / "replay" / "mig-partitions-first.yaml": mig_cluster("partitions-first"),
        HERE / "replay" / "mig-shuffled.yaml": mig_cluster("shuffled"),
        HERE / "replay" / "mig-workload.yaml": mig_workload(),
        HERE / "replay" / "gpu8-cluster.yaml": plain_cluster(),
        HERE / "replay" / "gpu8-workload.yaml": plain_workload(),
    }


def main() -> int:
    for path, docs in outputs().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        dump(path, docs)
        print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
