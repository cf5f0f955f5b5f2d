"""Claims decoded once per distinct content: what thousands of pods from one template share.

API:
- ``ClaimTemplates(size=256)``: kept by the engine across calls.
- ``key(doc) -> str | None``: a claim document's content without its metadata (None: not one
  this keeps: not a plain ResourceClaim mapping, or too large to keep).
- ``get(key, doc) -> ResourceClaim | None``: the claim decoded and validated earlier under
  ``key``, with ``doc``'s own metadata (decoded and validated here); None when there is none,
  or ``doc``'s metadata is not clean or not valid (the caller decodes ``doc`` as usual, which
  reports the problem in the usual words).
- ``put(key, claim, *, doc=None, text=None)``: ``claim`` decoded from a document of that key
  and found valid; with the document and the JSON text it was parsed from, that text is kept
  as a frame around the metadata (when it is exactly what ``json.dumps`` writes for the
  document: compact or spaced separators, ASCII-escaped or not). ``get`` takes ``text`` too,
  and keeps a frame for each way a template is written (up to ``MAX_FRAMES``).
- ``from_text(text) -> ResourceClaim | None``: the claim a JSON text holds, when it is a kept
  frame with other metadata in it: found without parsing anything but the metadata, which is
  then decoded and validated as ``get`` does. None otherwise (the caller parses the text).
- ``spec_text(spec) -> str | None``: the JSON of a spec this holds (``model_dump_json``,
  ``exclude_none``), for ``model.claims_key``; None for other specs.

Why: a Schedule call spent a fifth of its time decoding, field-checking and validating its
claim, while a scheduler's claims come from a few templates and differ only in metadata.
Every claim from here shares its template's spec and status objects: nothing after decoding
changes them (defaults are applied while decoding). A client writes every claim of a template
the same way, so after the first its text is the kept frame with other metadata: parsing the
spec again (and comparing it) was still a tenth of a Schedule.

Why a frame is exact: the text before the metadata's value is byte for byte a prefix of a JSON
text that parsed, so a parser stands at the same place in both (a key's value, at the top
level); the metadata's value is parsed from there (``model.json_value_at``: the limits, hooks
and checks of the full parse); what follows it is byte for byte the rest of that text. The
text is therefore the kept document with this metadata.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from dra_solver import model
from dra_solver.model import objects as o

MAX_KEY = 64 * 1024
"""Characters of a key kept at most: a huge claim is decoded every time rather than held."""

MAX_FRAMES = 4
"""Frames cut per template at most (a template written in several ways, by several clients);
as many tries for texts that give none, so that cutting is not tried on every call."""

_MARK = "\x00metadata\x00"
"""Stands in for the metadata when a frame is cut (a string no claim carries twice: checked)."""

_SEPARATORS = ((",", ":"), (", ", ": "))
"""How JSON writers separate items and keys: compact (Go, ``json.dumps(separators=...)``) or
Python's default."""


class ClaimTemplates:
    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._entries: OrderedDict[str, o.ResourceClaim] = OrderedDict()
        self._texts: dict[int, tuple[o.ResourceClaimSpec, str]] = {}
        """id(spec) -> (that spec, its JSON), for the specs held in ``_entries``."""
        self._frames: dict[str, dict[str, str]] = {}
        """Text up to the metadata's value -> text after it -> the key of the claim."""
        self._frame_of: dict[str, list[tuple[str, str]]] = {}
        """Key -> its frames, for the keys held in ``_entries`` that have any."""
        self._tries: dict[str, int] = {}
        """Key -> texts a frame was cut from or tried on, for the keys held in ``_entries``."""
        self._lock = threading.Lock()

    def key(self, doc: Any) -> str | None:
        if type(doc) is not dict or doc.get("kind") != "ResourceClaim":
            return None
        # repr tells apart what JSON text would merge: 1 and 1.0 and True, a mapping that
        # repeated a key (model.decode keeps those apart for strict field validation).
        key = repr([item for item in doc.items() if item[0] != "metadata"])
        return key if len(key) <= MAX_KEY else None

    def get(self, key: str, doc: dict[str, Any], text: str | None = None) -> o.ResourceClaim | None:
        with self._lock:
            template = self._entries.get(key)
            if template is None:
                return None
            self._entries.move_to_end(key)
            cut = text is not None and self._tries.get(key, 0) < MAX_FRAMES
        claim = _with_metadata(template, doc.get("metadata", {}))
        if cut and claim is not None and text is not None:
            # Only for a claim that is valid: a text is framed once its document was found good.
            self._add_frame(key, doc, text)
        return claim

    def from_text(self, text: str) -> o.ResourceClaim | None:
        if not self._frames:  # nothing kept yet (or nothing written the way a JSON writer writes)
            return None
        at = text.find('"metadata":')
        if at < 0:
            return None
        start = at + len('"metadata":')
        while text.startswith(" ", start):
            start += 1
        with self._lock:
            rests = self._frames.get(text[:start])
        if rests is None:
            return None
        found = model.json_value_at(text, start)
        if found is None:
            return None
        metadata, end = found
        with self._lock:
            key = rests.get(text[end:])
            template = self._entries.get(key) if key is not None else None
            if key is None or template is None:
                return None
            self._entries.move_to_end(key)
        return _with_metadata(template, metadata)

    def put(self, key: str, claim: o.ResourceClaim, *, doc: dict[str, Any] | None = None, text: str | None = None) -> None:
        spec_json = claim.spec.model_dump_json(exclude_none=True)
        with self._lock:
            was = self._entries.pop(key, None)
            if was is not None:
                self._forget(key, was)
            self._entries[key] = claim
            self._texts[id(claim.spec)] = (claim.spec, spec_json)
            while len(self._entries) > self._size:
                gone_key, gone = self._entries.popitem(last=False)
                self._forget(gone_key, gone)
        if doc is not None and text is not None:
            self._add_frame(key, doc, text)

    def _add_frame(self, key: str, doc: dict[str, Any], text: str) -> None:
        frame = _frame(doc, text) if len(text) <= MAX_KEY else None
        with self._lock:
            if key not in self._entries:
                return  # forgotten meanwhile
            tries = self._tries[key] = self._tries.get(key, 0) + 1
            frames = self._frame_of.setdefault(key, [])
            if frame is None or frame in frames or tries > MAX_FRAMES:
                return
            frames.append(frame)
            self._frames.setdefault(frame[0], {})[frame[1]] = key

    def _forget(self, key: str, claim: o.ResourceClaim) -> None:
        """What is kept beside an entry that left ``_entries`` (under the lock)."""
        self._texts.pop(id(claim.spec), None)
        self._tries.pop(key, None)
        for before, after in self._frame_of.pop(key, []):
            rests = self._frames.get(before, {})
            if rests.get(after) == key:
                del rests[after]
            if not rests:
                self._frames.pop(before, None)

    def spec_text(self, spec: o.ResourceClaimSpec) -> str | None:
        hit = self._texts.get(id(spec))
        return hit[1] if hit is not None and hit[0] is spec else None

    def __len__(self) -> int:
        return len(self._entries)


def _with_metadata(template: o.ResourceClaim, metadata: Any) -> o.ResourceClaim | None:
    """``template`` with this metadata (as the document holds it), or None when the metadata is
    not clean or not valid (the full decode reports it in the usual words)."""
    meta = model.decode_metadata(metadata)
    if meta is None:
        return None
    claim = template.model_copy(update={"metadata": meta})
    if model.validate_claim_metadata(claim):
        return None
    return claim


def _frame(doc: dict[str, Any], text: str) -> tuple[str, str] | None:
    """``text`` around the value of ``doc``'s metadata, when ``text`` is exactly what a JSON
    writer makes of ``doc`` (anything else: None, and claims like it are parsed in full)."""
    if type(doc) is not dict or "metadata" not in doc:
        return None
    for separators in _SEPARATORS:
        for ascii_only in (True, False):
            try:
                whole = json.dumps(doc, separators=separators, ensure_ascii=ascii_only, allow_nan=False)
            except (TypeError, ValueError):  # a value JSON cannot write back: no frame
                return None
            if whole != text:
                continue
            marked = json.dumps({**doc, "metadata": _MARK}, separators=separators, ensure_ascii=ascii_only, allow_nan=False)
            mark = json.dumps(_MARK, ensure_ascii=ascii_only)
            if marked.count(mark) != 1:
                return None
            before, after = marked.split(mark)
            return before, after
    return None

