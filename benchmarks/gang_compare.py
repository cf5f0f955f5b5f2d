"""Gangs: kube-scheduler v1.37.2 (gang + topology-aware scheduling on) beside dra-solver (issue 17).

    python benchmarks/gang_compare.py [--workload gang-stream|sequential-fails] [--racks R]
        [--gangs G] [--seed S] [--gang-timeout S] [--out FILE.json]

For the workload (see ``service.schedcompare.gangs``): a fresh control plane per side (etcd,
kube-apiserver, kube-controller-manager; feature gates GenericWorkload,
TopologyAwareWorkloadScheduling, DRAWorkloadResourceClaims on), the same racks, slices, claims in
use and templates; first kube-scheduler alone (upstream's resourceclaim and podgroup-protection
controllers in kcm), then ``dra-solver serve`` + ``dra-solver controllers`` alone. The gangs
arrive one at a time. Printed per side: gangs placed, pods bound, GPUs idle and stranded at the
end, time per placed gang (first object created to last pod bound) p50/p99, devices allocated
twice (must be 0); then, for kube-scheduler's side, dra-solver's answers on the same states
(before each gang, kube-scheduler's cluster as the API server shows it: the group solve and the
validator, nothing written) and the gangs placed by one only; then every gang placed by one
side only in the two free-running streams, with the other side's PodGroup message.

Not a test: the figures depend on the machine (``tests/schedcompare/test_gangs_real.py``
checks the one-pod-at-a-time case at CI size).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dra_solver.service.localcluster.controlplane import binaries  # noqa: E402
from dra_solver.service.schedcompare import gangs  # noqa: E402
from dra_solver.service.schedcompare.runner import SCHEDULERS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(gangs.GANG_WORKLOADS), default="gang-stream")
    parser.add_argument("--racks", type=int, default=4)
    parser.add_argument("--gangs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--gang-timeout", type=float, default=30.0)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    if args.workload == "gang-stream":
        workload = gangs.gang_stream(racks=args.racks, gangs=args.gangs, seed=args.seed)
    else:
        workload = gangs.sequential_fails()
    print(f"{workload.name}: {workload.description}; {len(workload.nodes)} nodes, {workload.gpus_total} GPUs", file=sys.stderr, flush=True)
    bins = binaries()
    results = []
    for scheduler in SCHEDULERS:
        t0 = time.monotonic()
        results.append(gangs.run_gang_side(workload, scheduler, bins, gang_timeout=args.gang_timeout,
                                           progress=lambda s: print(f"  {s}", file=sys.stderr, flush=True)))
        print(f"{scheduler}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.out:
            args.out.write_text(json.dumps({"workload": workload.name, "sides": [r.to_json() for r in results]}, indent=2))
    print(gangs.format_comparison(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
