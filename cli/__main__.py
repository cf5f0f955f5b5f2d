"""``python -m dra_solver.cli``: the same as the ``dra-solver`` command."""

from __future__ import annotations

import sys

from dra_solver.cli import main

sys.exit(main())
