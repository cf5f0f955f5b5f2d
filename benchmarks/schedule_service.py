"""Whole-cluster Schedule through the gRPC service at 500 and 5,000 nodes.

    python benchmarks/schedule_service.py [--nodes 500,5000] [--shape gpu,mig] [--pods 1000]
                                          [--concurrency 1] [--batch 1,16,stream] [--window 1]
                                          [--pin python|serve|none] [-o json]

Same as ``dra-solver bench``: generates clusters of 8-GPU nodes (``gpu``) and of 8 GPUs with
MIG-like partitions sharing counters (``mig``), starts ``dra-solver serve`` on each, schedules
one-claim pods with reservations (one Schedule call per pod, ``--batch N`` pods per
ScheduleBatch call, or ``--batch stream``: one ScheduleStream message per pod, ``--window N``
of them in flight) and prints pods/s, p50/p99 latency and the service's RSS. By default serve's
Python threads run on a CPU of their own and the client on the others (``--pin``).
Targets: at least 100 pods/s at 5,000 nodes; RSS at most 1 GiB.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dra_solver.service.commands import bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    bench.add_arguments(parser)
    return bench.run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
