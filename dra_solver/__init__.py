"""dra-solver: exact, fast, optimal Kubernetes DRA device allocation with CP-SAT.

The one top-level import name the distribution installs. Its subpackages are the repository's
top-level folders (docs/architecture.md, "Packages and layers"):

- ``dra_solver.model`` (``model/``): the pure core, objects in and results out;
- ``dra_solver.service`` (``service/``): the gRPC service, its client, inventories, metrics;
- ``dra_solver.controllers`` (``controllers/``) and ``dra_solver.kubeletplugin``
  (``kubeletplugin/``): the companion processes;
- ``dra_solver.cli`` (``cli/``): the ``dra-solver`` command, above all four.

In the repository, ``dra_solver/<name>`` is a symbolic link to ``<name>/``, so tools that read
the tree (mypy, import-linter, pytest) see the installed names; a wheel maps the folders with
setuptools' ``package-dir``.
"""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("dra-solver")
except metadata.PackageNotFoundError:  # running from a tree that was never installed
    __version__ = "0+unknown"
