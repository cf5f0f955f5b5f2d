"""``python -m dra_solver.kubeletplugin``: the kubelet plugin without the ``dra-solver`` dispatcher.

Same flags as ``dra-solver kubelet-plugin``; tests use it to run the plugin as a real process.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dra_solver.kubeletplugin import cli
from dra_solver.service.api import ArgumentParser


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m dra_solver.kubeletplugin", description="Run the dra-solver DRA kubelet plugin."
    )
    cli.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cli.run(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
