"""``scripts/kube-up``: upstream's control plane alone, for developing against the real API.

``up`` (the default) builds or reuses the pinned binaries, starts etcd, kube-apiserver and
kube-controller-manager on free loopback ports (exactly the control plane the test suite and
``local-cluster`` use), and prints ``export KUBECONFIG=PATH`` as its last line of standard output
once the API server is ready; the processes keep running. ``down`` stops them and removes the
state directory. ``build`` only builds (or finds) the binaries and prints their directory.

The state directory is ``~/.cache/dra-solver/kube-up`` unless ``--state-dir`` or
``DRA_SOLVER_KUBE_UP_DIR`` says otherwise; it is not the local cluster's, so both can run at once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dra_solver.service.argparsing import ArgumentParser
from dra_solver.service.localcluster.cluster import LocalCluster
from dra_solver.service.localcluster.controlplane import ControlPlaneError, binaries

PROG = "kube-up"


def default_state_dir() -> Path:
    env = os.environ.get("DRA_SOLVER_KUBE_UP_DIR")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "dra-solver" / "kube-up"


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Start or stop upstream's etcd, kube-apiserver and kube-controller-manager "
                                       "on loopback (no dra-solver components).")
    p.add_argument("action", nargs="?", choices=["up", "down", "build"], default="up",
                   help="up (default): start and print 'export KUBECONFIG=PATH'; down: stop and clean up; "
                        "build: build or reuse the binaries and print their directory")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="certificates, etcd data, logs and the kubeconfig (default ~/.cache/dra-solver/kube-up)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.action == "build":
            print(binaries().directory)
            return 0
        cluster = LocalCluster(args.state_dir or default_state_dir(), prog=PROG)
        if args.action == "down":
            cluster.down()
            return 0
        kubeconfig = cluster.up(companions=False)
    except (ControlPlaneError, OSError, subprocess.SubprocessError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; stopped what had started", file=sys.stderr)
        return 130
    print(f"export KUBECONFIG={kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
