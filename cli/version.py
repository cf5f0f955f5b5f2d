"""``dra-solver version``: the version of dra-solver and of the engines that decide with it.

    dra-solver version [-o text|json]

The first line (and ``dra-solver --version``) is ``dra-solver VERSION``; then the versions of
Python, OR-Tools (CP-SAT), the CEL engine and gRPC, which bug reports need alongside ours.
"""

from __future__ import annotations

import argparse
import json
import platform
from importlib import metadata

from dra_solver import __version__

ENGINES = (("ortools", "ortools"), ("cel-expr-python", "cel-expr-python"), ("grpcio", "grpcio"), ("protobuf", "protobuf"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")


def versions() -> dict[str, str]:
    out = {"dra-solver": __version__, "python": platform.python_version()}
    for label, dist in ENGINES:
        try:
            out[label] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[label] = "not installed"
    return out


def run(args: argparse.Namespace) -> int:
    found = versions()
    if args.output == "json":
        print(json.dumps(found, indent=2))
        return 0
    print(f"dra-solver {found.pop('dra-solver')}")
    print(", ".join(f"{name} {version}" for name, version in found.items()))
    return 0
