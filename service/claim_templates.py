"""Claims decoded once per distinct content: what thousands of pods from one template share.

API:
- ``ClaimTemplates(size=256)``: kept by the engine across calls.
- ``key(doc) -> str | None``: a claim document's content without its metadata (None: not one
  this keeps: not a plain ResourceClaim mapping, or too large to keep).
- ``get(key, doc) -> ResourceClaim | None``: the claim decoded and validated earlier under
  ``key``, with ``doc``'s own metadata (decoded and validated here); None when there is none,
  or ``doc``'s metadata is not clean or not valid (the caller decodes ``doc`` as usual, which
  reports the problem in the usual words).
- ``put(key, claim)``: ``claim`` decoded from a document of that key and found valid.
- ``spec_text(spec) -> str | None``: the JSON of a spec this holds (``model_dump_json``,
  ``exclude_none``), for ``model.claims_key``; None for other specs.

Why: a Schedule call spent a fifth of its time decoding, field-checking and validating its
claim, while a scheduler's claims come from a few templates and differ only in metadata.
Every claim from here shares its template's spec and status objects: nothing after decoding
changes them (defaults are applied while decoding).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from dra_solver import model
from dra_solver.model import objects as o

MAX_KEY = 64 * 1024
"""Characters of a key kept at most: a huge claim is decoded every time rather than held."""


class ClaimTemplates:
    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._entries: OrderedDict[str, o.ResourceClaim] = OrderedDict()
        self._texts: dict[int, tuple[o.ResourceClaimSpec, str]] = {}
        """id(spec) -> (that spec, its JSON), for the specs held in ``_entries``."""
        self._lock = threading.Lock()

    def key(self, doc: Any) -> str | None:
        if type(doc) is not dict or doc.get("kind") != "ResourceClaim":
            return None
        # repr tells apart what JSON text would merge: 1 and 1.0 and True, a mapping that
        # repeated a key (model.decode keeps those apart for strict field validation).
        key = repr([item for item in doc.items() if item[0] != "metadata"])
        return key if len(key) <= MAX_KEY else None

    def get(self, key: str, doc: dict[str, Any]) -> o.ResourceClaim | None:
        with self._lock:
            template = self._entries.get(key)
            if template is None:
                return None
            self._entries.move_to_end(key)
        meta = model.decode_metadata(doc.get("metadata", {}))
        if meta is None:
            return None
        claim = template.model_copy(update={"metadata": meta})
        if model.validate_claim_metadata(claim):
            return None
        return claim

    def put(self, key: str, claim: o.ResourceClaim) -> None:
        text = claim.spec.model_dump_json(exclude_none=True)
        with self._lock:
            was = self._entries.pop(key, None)
            if was is not None:
                self._texts.pop(id(was.spec), None)
            self._entries[key] = claim
            self._texts[id(claim.spec)] = (claim.spec, text)
            while len(self._entries) > self._size:
                _, gone = self._entries.popitem(last=False)
                self._texts.pop(id(gone.spec), None)

    def spec_text(self, spec: o.ResourceClaimSpec) -> str | None:
        hit = self._texts.get(id(spec))
        return hit[1] if hit is not None and hit[0] is spec else None

    def __len__(self) -> int:
        return len(self._entries)
