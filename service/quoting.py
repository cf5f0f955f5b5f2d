"""How the service quotes a caller's values back in messages: short, and always valid UTF-8.

A module of its own (nothing from the rest of the service) so that the engine, the gRPC
layer and the command-line clients share one spelling without importing each other.
"""

from __future__ import annotations

from dra_solver.model import QUOTED_CHARS, quote

SHOWN_CHARS = QUOTED_CHARS
"""Characters of a caller's value quoted back in an error; the rest is elided."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (saying how many were left out), with lone
    surrogates escaped so the text always encodes as UTF-8 (grpc-message, details)."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: str) -> str:
    """A caller's value for an error message: JSON-quoted, at most :data:`SHOWN_CHARS` (the
    model's own quoting, ASCII-only so that any value fits a grpc-message)."""
    return quote(value, ascii_only=True)


def node_not_found(name: str) -> str:
    """What the service says of a node its inventory does not know (a NOT_FOUND message, and a
    Schedule candidate's verdict reason, which ``dra-solver schedule`` recognises)."""
    return f"node {shown(name)} not found in the inventory"
