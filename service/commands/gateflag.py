"""The ``--feature-gates`` flag, spelled and explained the same way by every command."""

from __future__ import annotations

import argparse


def add_feature_gates_argument(parser: argparse.ArgumentParser, *, what: str = "the allocators") -> None:
    parser.add_argument(
        "--feature-gates", default="", metavar="Name=bool,...",
        help=f"feature gates for {what}, as Kubernetes spells them (DRAPrioritizedList=false,"
             "DRADeviceTaints=true, ...; the allocator's short names such as PrioritizedList work "
             "too; docs/cli.md lists them) (default: every gate dra-solver implements on)",
    )
