"""The ``dra-solver`` command: one entry point, one module per subcommand.

This package sits above ``service``, ``controllers`` and ``kubeletplugin`` (the import contracts
in pyproject.toml let it import all of them and nothing import it), so the service never names
its companions. Each subcommand module exposes ``add_arguments(parser)`` and
``run(args) -> int``. A subcommand's module is imported only when it runs (the one documented
place that imports by name): ``dra-solver allocate`` never pays for gRPC, the kubernetes client
or the kubelet plugin's protos.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from dra_solver import __version__
from dra_solver.cli.helpformat import DefaultsHelpFormatter
from dra_solver.service.api import ArgumentParser
from dra_solver.service.commands.flagchecks import FlagError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "allocate": ("dra_solver.service.commands.allocate", "allocate claims on one node"),
    "compare": ("dra_solver.service.commands.compare", "compare CP-SAT with upstream's allocator (files or a live pod)"),
    "serve": ("dra_solver.service.commands.serve", "run the gRPC allocation service"),
    "schedule": ("dra_solver.service.commands.schedule", "ask a running service where a pod's claims fit"),
    "explain": ("dra_solver.service.commands.explain", "why claims do not fit (files, a service or a live pod)"),
    "demo": ("dra_solver.service.commands.demo", "run the end-to-end demo on the bundled cluster"),
    "bench": ("dra_solver.service.commands.bench", "run the bundled benchmarks"),
    "local-cluster": ("dra_solver.service.localcluster.cluster", "start or stop a local Kubernetes with dra-solver in it"),
    "controllers": ("dra_solver.controllers.cli", "run the companion controllers"),
    "kubelet-plugin": ("dra_solver.kubeletplugin.cli", "run the DRA kubelet plugin"),
    "version": ("dra_solver.cli.version", "print the version of dra-solver and its engines"),
}


class _Command(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _load(module: str) -> _Command:
    return cast(_Command, importlib.import_module(module))


def build_parser(argv: Sequence[str], *, prog: str = "dra-solver") -> argparse.ArgumentParser:
    return _build(argv, prog=prog)[0]


def _build(argv: Sequence[str], *, prog: str = "dra-solver") -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The dispatcher's parser, and each subcommand's (only the wanted one has its flags).
    Usage errors are one line and exit 2 (:mod:`dra_solver.service.argparsing`)."""
    parser = ArgumentParser(
        prog=prog,
        description="Exact, fast, optimal Kubernetes DRA device allocation.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dra-solver {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = parsers[name] = sub.add_parser(name, help=help_text, description=help_text,
                                           formatter_class=DefaultsHelpFormatter)
        if name == wanted:
            _load(module).add_arguments(p)
    return parser, parsers


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl dra-solver ...``: kubectl runs the ``kubectl-dra_solver`` executable on PATH
    with the words after ``dra-solver``; the subcommands are dra-solver's own."""
    return main(argv, prog="kubectl dra-solver")


def main(argv: Sequence[str] | None = None, *, prog: str = "dra-solver") -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser, subcommands = _build(args_list, prog=prog)
    args, extra = parser.parse_known_args(args_list)
    if extra:  # said by the subcommand, whose --help lists what it takes
        subcommands.get(args.command or "", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not args.command:
        parser.error(f"a COMMAND is required: {', '.join(SUBCOMMANDS)}")
    module, _ = SUBCOMMANDS[args.command]
    try:
        return _load(module).run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except FlagError as err:  # a flag out of its bounds, or flags that do not go together
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # the contract: one line and exit 2, never a traceback
        # Commands turn every input problem into their own message; reaching this is a bug,
        # and saying so beats a traceback or exit 1 (which means "does not fit").
        text = " ".join(str(err).split())[:300]
        print(f"error: internal error (please report): {type(err).__name__}: {text}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
