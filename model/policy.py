"""Placement policies: what decides among answers with the same FirstAvailable score.

API:
- ``Policy``: ``pack`` (the default: fewest newly opened GPUs and shareable devices, then the
  smallest devices, then upstream's order; among nodes, the fullest that fits), ``spread``
  (the opposite: most opened, the emptiest node), ``first-fit`` (upstream's device order, node
  name order), ``score`` (the score only, node name order). A ``str`` enum: ``Policy.PACK ==
  "pack"``.
- ``POLICIES``: the names, in that order; ``DEFAULT_POLICY``: ``Policy.PACK``.
- ``checked_policy(name) -> Policy``: ``name``, or the default for ``""``; an unknown name is
  an ``InvalidInput`` naming it (a typo must never read as "the allocators disagree").
- ``NODE_POLICIES``: the policies with a node preference (``model.node_load.node_key``).

Why a module of its own: the CP-SAT objective (``model.cpsat.objective``), node choice
(``model.schedule``) and every shell that accepts ``--policy`` read the same names.
"""

from __future__ import annotations

from enum import StrEnum

from dra_solver.model.errors import InvalidInput, quote


class Policy(StrEnum):
    PACK = "pack"
    SPREAD = "spread"
    FIRST_FIT = "first-fit"
    SCORE = "score"


POLICIES: tuple[str, ...] = tuple(p.value for p in Policy)
DEFAULT_POLICY = Policy.PACK
NODE_POLICIES: frozenset[Policy] = frozenset({Policy.PACK, Policy.SPREAD})
"""Policies with a node preference; the others keep node name order."""


def checked_policy(name: str) -> Policy:
    """``name`` or the default for ``""``; an unknown policy is an ``InvalidInput`` naming it."""
    if not name:
        return DEFAULT_POLICY
    try:
        return Policy(name)
    except ValueError:
        raise InvalidInput(
            "", ("policy",), f"Unsupported value: {quote(name)}: supported values: {', '.join(POLICIES)}"
        ) from None
