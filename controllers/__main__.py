"""``python -m dra_solver.controllers``: the same as ``dra-solver controllers``."""

from __future__ import annotations

import sys

from dra_solver.controllers.cli import main

if __name__ == "__main__":
    sys.exit(main())
