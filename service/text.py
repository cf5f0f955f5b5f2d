"""Callers' values in answers and errors: quoted, bounded, always encodable.

API:
- ``shown(value)``: a caller's value for an error message, JSON-quoted, at most
  ``SHOWN_CHARS`` characters (the rest elided, the length said).
- ``clip(text, limit)``: ``text`` cut to ``limit`` characters, saying how many were left out,
  with lone surrogates escaped (grpc-message and details must encode as UTF-8).
"""

from __future__ import annotations

import json

SHOWN_CHARS = 64
"""Characters of a caller's value quoted back in an error; the rest is elided."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (saying how many were left out), with lone
    surrogates escaped so the text always encodes as UTF-8 (grpc-message, details)."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: str) -> str:
    """A caller's value for an error message: JSON-quoted, at most :data:`SHOWN_CHARS`."""
    if len(value) > SHOWN_CHARS:
        return json.dumps(value[:SHOWN_CHARS])[:-1] + f'..." ({len(value)} characters)'
    return json.dumps(value)
