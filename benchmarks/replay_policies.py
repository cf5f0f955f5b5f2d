"""Placement quality over a stream of claims (issue 8): every device order, every policy.

    python benchmarks/replay_policies.py [--claims N] [--only mig|gpu8] [-o json]

Replays the bundled scenarios of ``examples/replay`` (``examples/generate.py`` writes them):

- ``mig-<order>``: 4 nodes x 8 GPUs, each GPU published as a whole device plus partitions
  (1g.10gb x7, 2g.20gb x3, 3g.40gb x2, 4g.40gb x1) on shared counters, in three device
  orders (whole-first, partitions-first, shuffled); 200 claims for one device with at least
  10/20/40/80 Gi (weights 4/3/2/1), each placed on the first node in name order that fits.
- ``gpu8``: 8 nodes x 8 GPUs, four of them with 1-3 GPUs already taken; 60 claims for 1/2/4/8
  GPUs, placed on the first node that fits
  and on the best-scoring node (``--node-choice score``: pack = fullest node that fits,
  spread = emptiest).

Rows: ``backtracking`` (upstream's search), ``cpsat-first-fit`` (CP-SAT with upstream's
order as the tie-break), ``cpsat-pack`` (the default policy), ``cpsat-spread``, and
``smallest-first backtracking`` (upstream's search on smallest-first device order, computed
independently of CP-SAT: a reference point, not a bound). Printed: claims placed, first failure, per-claim latency, placements per size class.
Not a test: the placement counts are deterministic, the times depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import generate  # noqa: E402

from dra_solver.model import objects as o  # noqa: E402
from dra_solver.model.cel import CelEnvironment  # noqa: E402
from dra_solver.model.decode import decode_all  # noqa: E402
from dra_solver.service.replay import DEFAULT_CONFIGS, SMALLEST_FIRST, ReplayResult, replay  # noqa: E402


def _scenarios(only: str, claims: int | None) -> list[tuple[str, list[Any], list[Any], str]]:
    out: list[tuple[str, list[Any], list[Any], str]] = []
    if only in ("", "mig"):
        mig_workload = generate.mig_workload(**({"claims": claims} if claims else {}))["items"]
        for order in ("whole-first", "partitions-first", "shuffled"):
            out.append((f"mig-{order}", generate.mig_cluster(order), mig_workload, "first"))
    if only in ("", "gpu8"):
        gpu_workload = generate.plain_workload(**({"claims": claims} if claims else {}))["items"]
        for choice in ("first", "score"):
            out.append(("gpu8", generate.plain_cluster(), gpu_workload, choice))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=None, help="shorten the streams to N claims")
    parser.add_argument("--only", choices=("mig", "gpu8"), default="")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    cel = CelEnvironment()
    rows: list[dict[str, Any]] = []
    for name, cluster_docs, workload_docs, choice in _scenarios(args.only, args.claims):
        cluster = decode_all(cluster_docs)
        workload = [c for c in decode_all(workload_docs) if isinstance(c, o.ResourceClaim)]
        for config in (*DEFAULT_CONFIGS, SMALLEST_FIRST):
            start = time.perf_counter()
            result: ReplayResult = replay(cluster, workload, config, cel=cel, node_choice=choice)
            print(f"{name} ({choice}) {config.name}: {result.placed}/{result.claims} placed "
                  f"in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            rows.append({"scenario": name, "nodeChoice": choice, "row": config.name, **result.to_json()})
    if args.output == "json":
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    header = f"{'scenario':22} {'nodes':6} {'row':16} {'placed':>7} {'first fail':>10} {'ms/claim':>9}  placed by size"
    print(header)
    print("-" * len(header))
    for r in rows:
        sizes = " ".join(f"{k}:{v['placed']}/{v['claims']}" for k, v in r["placedBySize"].items())
        failure = "-" if r["firstFailure"] is None else str(r["firstFailure"])
        print(f"{r['scenario']:22} {r['nodeChoice']:6} {r['row']:16} {r['placed']:>7} {failure:>10} "
              f"{1000 * r['secondsPerClaim']:9.1f}  {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
