"""What a Schedule derives from its claims' specs alone, kept per set of spec objects.

API:
- ``ClaimFacts(size=64)``: kept by the engine across calls.
- ``get(claims, classes, *, allocator, policy, gates, compile, spec_text=None) -> Facts``: the
  device attributes the claims can read (``model.claim_reads`` over ``classes``) and their
  ``model.claims_key`` with that allocator, policy and gates; computed once per spec objects,
  classes object, allocator, policy and gates, then kept (least recently used forgotten
  first).

Why: claims made from one template share one spec object (``service.claim_templates``), yet
every Schedule worked both out again from the specs: 2-3% of a whole-GPU answer, measured by
switching between the two ways within one process. Entries are found by the objects'
identities and hold those objects, so an identity is never reused while its entry lives; a
claim decoded in full every time (another validation mode, a template forgotten) brings a new
spec object and is worked out afresh, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dra_solver import model
from dra_solver.model import objects as o


@dataclass(frozen=True, slots=True)
class Facts:
    reads: model.AttributeReads
    key: bytes


@dataclass(frozen=True, slots=True)
class _Entry:
    specs: tuple[o.ResourceClaimSpec, ...]
    classes: Sequence[o.DeviceClass]
    facts: Facts


_Key = tuple[tuple[int, ...], int, str, str, model.FeatureGates]


class ClaimFacts:
    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        claims: Sequence[o.ResourceClaim],
        classes: Sequence[o.DeviceClass],
        *,
        allocator: str,
        policy: str,
        gates: model.FeatureGates,
        compile: Callable[[str], model.CompiledSelector],
        spec_text: Callable[[o.ResourceClaimSpec], str | None] | None = None,
    ) -> Facts:
        specs = tuple(c.spec for c in claims)
        key: _Key = (tuple(map(id, specs)), id(classes), allocator, policy, gates)
        with self._lock:
            # An entry holds the objects its key names by identity: while it lives, no other
            # object can have their ids, so a key found is these very objects.
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry.facts
        facts = Facts(
            model.claim_reads(claims, classes, compile=compile),
            model.claims_key(claims, allocator=allocator, policy=policy, gates=gates, spec_text=spec_text),
        )
        if self._size > 0:
            with self._lock:
                self._entries[key] = _Entry(specs, classes, facts)
                self._entries.move_to_end(key)
                while len(self._entries) > self._size:
                    self._entries.popitem(last=False)
        return facts

    def __len__(self) -> int:
        return len(self._entries)
