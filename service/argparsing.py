"""The argument parser every dra-solver command line uses: a usage error is one line and exit 2.

argparse's own ``error`` prints the whole usage block before the message; the project's contract
for every CLI error is one line on stderr (``PROG: error: MESSAGE (see PROG --help)``) and exit
status 2. Subcommand parsers made with ``add_subparsers().add_parser`` inherit the class.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} --help)\n")
