"""Fuzzing the one decoder: whatever the text, the answer is objects or ``InvalidInput``.

Mutations of real documents (the bundled cluster, flow and block YAML, JSON) and arbitrary
JSON-like values, decoded under every ``validate`` mode. Properties: no exception but the
core's own errors (no RecursionError, TypeError, QuantityError, UnicodeError ...), a generous
per-input time bound (hypothesis' deadline) and a per-input memory bound (``tests/fuzzbounds``:
the Python memory one input takes at its peak), since every limit is enforced while parsing.
The default profile is derandomized (tests/conftest.py); ``HYPOTHESIS_PROFILE=long`` runs a
long campaign with fresh inputs (docs/limits-and-errors.md says how).
"""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_solver.model.decode import VALIDATION_MODES, DecodeLimits, ValidationMode, decode_text
from dra_solver.model.errors import DraSolverError
from tests.fuzzbounds import MIB, bounded

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = (ROOT / "examples" / "cluster.yaml").read_text()

SEEDS = [
    CLUSTER,
    json.dumps(list(yaml.safe_load_all(CLUSTER))),
    "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c, namespace: default}\n"
    "spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com, count: 2}}]}}\n",
    "kind: ResourceSlice\napiVersion: resource.k8s.io/v1\nmetadata: {name: s}\nspec:\n  driver: d\n"
    "  pool: {name: p, resourceSliceCount: 1}\n  nodeName: n\n  sharedCounters:\n  - name: cs\n"
    "    counters: {mem: {value: 7Gi}}\n  devices:\n  - name: g\n    capacity: {mem: {value: '1'}}\n",
    "a: &a [x, y]\nb: [*a, *a]\n<<: {kind: DeviceClass}\n",
]

# Characters that change YAML/JSON structure, and values that once crashed the decoder.
PIECES = [
    *"{}[]:,-&*!|>'\"\n \t#?<%@`\\",
    "\\ud800", "\ud800", "7\\n", "\n  ", "? ", "!!binary ", "!!python/object ", "*a", "&a ",
    "[" * 600, "{" * 300, "9" * 5000, "null", "~", "yes", ".inf", "0x1F", "1e999", "---\n", "...\n",
    "kind: List\nitems:\n", "\x00", "\u2028", "\ufeff",
]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)))
        end = min(len(text), pos + draw(st.integers(1, 8)))
        if action == "insert":
            text = text[:pos] + piece + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[end:]
        else:
            text = text[:pos] + piece + text[end:]
    return text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)


@st.composite
def shaped_objects(draw: st.DrawFn) -> Any:
    """Objects of our kinds with arbitrary values in arbitrary places."""
    doc: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(["resource.k8s.io/v1", "v1", "x"])),
        "kind": draw(st.sampled_from(["ResourceClaim", "ResourceSlice", "DeviceClass", "Node", "List", "Pod"])),
        "metadata": draw(st.one_of(json_values, st.just({"name": "n", "namespace": "default"}))),
        "spec": draw(json_values),
    }
    if draw(st.booleans()):
        doc["items"] = draw(st.lists(json_values, max_size=3))
    return doc


MEMORY_CAP_MIB = 32
"""Per input: 200,000 characters within the decoder's limits take far less (the long campaign's
largest is in docs/limits-and-errors.md)."""


def _decode(text: str, mode: ValidationMode) -> None:
    with bounded(MEMORY_CAP_MIB, campaign="decoder"), contextlib.suppress(DraSolverError):  # invalid input, said cleanly
        decode_text(text, source="fuzz", validate=mode, limits=DecodeLimits(max_chars=200_000), warnings=[])


def test_the_memory_bound_catches_a_blow_up() -> None:
    """The bound is not vacuous: 48 MiB taken by one input goes over it, while the decoder
    refuses a "billion laughs" (a million values from 400 bytes) well within it."""
    with pytest.raises(AssertionError, match="MiB of Python memory"), bounded(MEMORY_CAP_MIB, campaign="self-test"):
        _ = [0] * (6 * MIB)  # 48 MiB
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(6))
    with bounded(MEMORY_CAP_MIB, campaign="self-test"), pytest.raises(DraSolverError, match="aliases expand"):
        decode_text(bomb, source="bomb", validate="strict", limits=DecodeLimits(max_chars=200_000), warnings=[])


@settings(deadline=timedelta(seconds=5))
@given(text=mutated(), mode=st.sampled_from(VALIDATION_MODES))
def test_mutated_documents_decode_or_are_invalid_input(text: str, mode: ValidationMode) -> None:
    _decode(text, mode)


@settings(deadline=timedelta(seconds=5))
@given(doc=shaped_objects(), mode=st.sampled_from(VALIDATION_MODES), as_yaml=st.booleans())
def test_arbitrary_values_in_object_shapes_decode_or_are_invalid_input(doc: Any, mode: ValidationMode, as_yaml: bool) -> None:
    text = yaml.safe_dump(doc) if as_yaml else json.dumps(doc)
    _decode(text, mode)


@settings(deadline=timedelta(seconds=5))
@given(text=st.text(max_size=300), mode=st.sampled_from(VALIDATION_MODES))
def test_any_text_decodes_or_is_invalid_input(text: str, mode: ValidationMode) -> None:
    _decode(text, mode)
