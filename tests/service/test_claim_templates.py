"""Claims decoded once per template (``service.claim_templates``): a claim that differs from one
seen before only in its metadata is that claim with its own metadata, and the engine answers
exactly as if it had decoded and validated it in full, errors included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.model import FeatureGates, InvalidInput
from dra_solver.model import objects as o
from dra_solver.model.schedule import claims_key
from dra_solver.service import engine as e
from dra_solver.service.claim_templates import ClaimTemplates
from dra_solver.service.inventory import StaticSource
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore


def _engine(templates: int = 256) -> e.Engine:
    return e.Engine(source=StaticSource([]), reservations=ReservationStore(), metrics=Metrics(), limits=e.Limits(claim_templates=templates))


SPECS: list[dict[str, Any]] = [
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}]}},
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 0}}]}},  # invalid
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "colour": "red"}}]}},  # unknown field
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1.0}}]}},  # 1.0 is not 1
]

def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


FAULTS: list[dict[str, Any]] = [
    {"name": "Pod_Upper"}, {"name": "x" * 254}, {"name": ""}, {"namespace": "Bad_NS"}, {"generateName": "Bad_"},
    {"uid": "not-a-uid"}, {"labels": {"bad key!": "x"}}, {"labels": {"app": None}}, {"unknownField": 1},
    {"ownerReferences": [{"bogus": 1}]}, {"generation": "two"}, {"name": 5}, {"annotations": ["not", "a", "map"]},
    {"annotations": {"a": "\ud800"}},  # a lone surrogate, written as JSON's escape
    {"annotations": {"a": _nested(120)}},  # nested deeper than the decoder's limit
    {"annotations": {"a": 1e400}},  # written as Infinity, which JSON has no word for
]
"""One thing wrong with the metadata each (or None: nothing), so that most claims are valid and
a template is met again with metadata that must not pass."""

metadata = st.builds(
    lambda name, namespace, extra, fault: {"name": name, "namespace": namespace, **extra, **(fault or {})},
    st.sampled_from(["pod-0-gpu", "pod-1-gpu", "a.b-c"]),
    st.sampled_from(["default", "team-a"]),
    st.sampled_from([{}, {"uid": "00000000-0000-4000-8000-000000000001"}, {"labels": {"app": "x"}, "annotations": {"a": "b"}},
                     {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]},
                     # text that looks like the frame around it
                     {"annotations": {"note": '"metadata": {"name": "x"}, "spec": {}}', "é": "ü"}}]),
    st.one_of(st.none(), st.none(), st.sampled_from(FAULTS)),
)
spec_index = st.one_of(st.integers(0, 1), st.integers(0, len(SPECS) - 1))


STYLES: list[dict[str, Any]] = [{}, {"separators": (",", ":")}, {"ensure_ascii": False}, {"separators": (",", ":"), "ensure_ascii": False}]
"""How clients write JSON: Python's default, compact (Go, ``service.client``), UTF-8 unescaped."""

style = st.one_of(
    st.just((1, False, "")), st.just((1, False, "")), st.just((0, True, "")),
    st.tuples(st.integers(0, len(STYLES) - 1), st.booleans(), st.sampled_from(["", " ", "\n"])),
)
"""A writer's style, whether metadata comes last, and what the text ends with: mostly the same
few, so that a claim often meets a template written the same way (found from its text)."""


def _blob(meta: dict[str, Any], spec: int, *, duplicate_name: bool = False, how: tuple[int, bool, str] = (0, False, "")) -> bytes:
    writer, metadata_last, tail = how
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": SPECS[spec]}
    if metadata_last:
        doc = {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "spec": doc["spec"], "metadata": meta}
    text = json.dumps(doc, **STYLES[writer]) + tail
    if duplicate_name:  # a key named twice in the metadata: strict field validation reports it
        text = text.replace('"metadata": {', '"metadata": {"name": "first", ', 1).replace('"metadata":{', '"metadata":{"name":"first",', 1)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate written unescaped is not UTF-8: refused either way


def _outcome(engine: e.Engine, blob: bytes) -> tuple[str, Any]:
    try:
        claims = engine.decode_claims([blob])
    except Exception as err:  # the error itself is what is compared
        return type(err).__name__, str(err)
    return "ok", [c.model_dump(by_alias=True) for c in claims]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(metadata, spec_index, st.integers(0, 9).map(lambda n: n == 0), style), min_size=1, max_size=8))
def test_a_claim_from_a_known_template_decodes_as_a_fresh_decode_would(calls: list[tuple[dict[str, Any], int, bool, tuple[int, bool, str]]]) -> None:
    """Also when it is found from its text alone: the same template written by other writers,
    metadata first or last, text that looks like the frame inside the metadata, faults the
    frame's own parse must catch (a lone surrogate, nesting too deep, Infinity)."""
    warm = _engine()
    for meta, spec, duplicate, how in calls:
        blob = _blob(meta, spec, duplicate_name=duplicate, how=how)
        assert _outcome(warm, blob) == _outcome(_engine(templates=0), blob)


def test_claims_of_one_template_share_its_spec_and_keep_their_own_metadata() -> None:
    engine = _engine()
    first = engine.decode_claims([_blob({"name": "a", "namespace": "default", "uid": "00000000-0000-4000-8000-000000000001"}, 1)])[0]
    second = engine.decode_claims([_blob({"name": "b", "namespace": "team-a"}, 1)])[0]
    assert second.spec is first.spec, "decoded once"
    assert (second.name, second.namespace, second.metadata.uid) == ("b", "team-a", None)
    assert (first.name, first.namespace) == ("a", "default")
    other = engine.decode_claims([_blob({"name": "c", "namespace": "default"}, 0)])[0]
    assert other.spec is not first.spec
    exactly = (other.spec.devices.requests or [])[0].exactly
    assert exactly is not None and exactly.count == 1  # defaulted


def test_a_kept_specs_text_gives_the_same_claims_key() -> None:
    templates = ClaimTemplates()
    claim = o.ResourceClaim.model_validate({"metadata": {"name": "a", "namespace": "default"}, "spec": SPECS[1]})
    key = templates.key(claim.model_dump(by_alias=True, exclude_none=True))
    assert key is not None
    templates.put(key, claim)
    assert templates.spec_text(claim.spec) == claim.spec.model_dump_json(exclude_none=True)
    assert templates.spec_text(claim.spec.model_copy()) is None, "another object with equal content is not taken for it"
    gates = FeatureGates()
    assert claims_key([claim], allocator="cpsat", policy="", gates=gates, spec_text=templates.spec_text) == claims_key(
        [claim], allocator="cpsat", policy="", gates=gates
    )


def test_templates_are_bounded_and_forget_the_least_recently_used() -> None:
    templates = ClaimTemplates(size=2)
    claims = []
    for i in range(3):
        claim = o.ResourceClaim.model_validate({"metadata": {"name": f"c{i}", "namespace": "default"}, "spec": SPECS[i % 2]})
        (claim.spec.devices.requests or [])[0].name = f"r{i}"  # three distinct specs
        key = templates.key(claim.model_dump(by_alias=True, exclude_none=True))
        assert key is not None
        templates.put(key, claim)
        claims.append(claim)
    assert len(templates) == 2
    assert templates.spec_text(claims[0].spec) is None
    assert templates.spec_text(claims[2].spec) is not None
    assert ClaimTemplates().key({"kind": "ResourceClaim", "spec": {"x": "y" * 70_000}}) is None, "too large to keep"
    assert ClaimTemplates().key({"kind": "Pod"}) is None


def _doc(name: str, spec: int = 1, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "default", **meta}, "spec": SPECS[spec]}


def test_a_claim_written_as_its_template_was_is_found_from_its_text() -> None:
    engine = _engine()
    compact = {"separators": (",", ":")}
    first = engine.decode_claims([json.dumps(_doc("a"), **compact).encode()])[0]
    templates = engine._templates
    # Found from the text alone: the same frame, other metadata.
    found = templates.from_text(json.dumps(_doc("b", labels={"app": "web"}), **compact))
    assert found is not None and found.spec is first.spec
    assert (found.name, found.metadata.labels) == ("b", {"app": "web"})
    # Not found: written otherwise, another spec, metadata that is not valid (the full decode reports it).
    assert templates.from_text(json.dumps(_doc("b"))) is None
    assert templates.from_text(" " + json.dumps(_doc("b"), **compact)) is None
    assert templates.from_text(json.dumps(_doc("b", spec=0), **compact)) is None
    assert templates.from_text(json.dumps(_doc("B_ad"), **compact)) is None
    assert templates.from_text(json.dumps(_doc("b"), **compact)[:-1]) is None
    assert templates.from_text('{"metadata": 5}') is None
    # A key named twice in the metadata: not taken from the frame; the full decode says why.
    twice = json.dumps(_doc("b"), **compact).replace('"metadata":{', '"metadata":{"name":"first",', 1)
    assert templates.from_text(twice) is None
    with pytest.raises(InvalidInput, match=r'duplicate field "metadata\.name"'):
        engine.decode_claims([twice.encode()])
    # The engine takes it from there, with every check after decoding as before.
    second = engine.decode_claims([json.dumps(_doc("b"), **compact).encode()])[0]
    assert second.spec is first.spec and second.name == "b"
    with pytest.raises(InvalidInput, match="Duplicate value"):
        engine.decode_claims([json.dumps(_doc("c"), **compact).encode(), json.dumps(_doc("c"), **compact).encode()])


def test_a_frame_is_kept_only_for_what_a_json_writer_writes_and_leaves_with_its_template() -> None:
    templates = ClaimTemplates(size=1)
    doc = _doc("a")
    claim = o.ResourceClaim.model_validate(doc)
    key = templates.key(doc)
    assert key is not None
    # Written by hand (two blanks after a colon): nothing to cut a frame from.
    templates.put(key, claim, doc=doc, text=json.dumps(doc).replace(": ", ":  "))
    assert templates.from_text(json.dumps(_doc("b"))) is None
    templates.put(key, claim, doc=doc, text=json.dumps(doc))
    assert templates.from_text(json.dumps(_doc("b"))) is not None
    # Another template takes the only place: the first one's frame goes with it.
    other = _doc("x", spec=0)
    other_key = templates.key(other)
    assert other_key is not None
    templates.put(other_key, o.ResourceClaim.model_validate(other), doc=other, text=json.dumps(other))
    assert templates.from_text(json.dumps(_doc("b"))) is None
    assert templates.from_text(json.dumps(_doc("y", spec=0))) is not None
    assert len(templates) == 1



def test_each_way_a_template_is_written_gets_its_frame_and_cutting_is_tried_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dra_solver.service import claim_templates

    engine = _engine()
    templates = engine._templates
    engine.decode_claims([json.dumps(_doc("a")).encode()])  # Python's default separators
    compact = {"separators": (",", ":")}
    assert templates.from_text(json.dumps(_doc("b"), **compact)) is None
    engine.decode_claims([json.dumps(_doc("b"), **compact).encode()])  # found by its content; its way kept
    assert templates.from_text(json.dumps(_doc("c"), **compact)) is not None
    assert templates.from_text(json.dumps(_doc("c"))) is not None
    cuts: list[str] = []
    real = claim_templates._frame

    def counted(doc: dict[str, Any], text: str) -> tuple[str, str] | None:
        cuts.append(text)
        return real(doc, text)

    monkeypatch.setattr(claim_templates, "_frame", counted)
    for i in range(10):  # a trailing newline: no frame can be cut
        assert engine.decode_claims([(json.dumps(_doc(f"n{i}"), **compact) + "\n").encode()])[0].name == f"n{i}"
    assert len(cuts) == claim_templates.MAX_FRAMES - 2, "two tries went to the two frames cut before"


@pytest.mark.parametrize("validate", ["strict", "warn", "ignore"])
def test_bytes_that_are_not_utf8_are_refused_as_before_with_or_without_a_template(validate: Any) -> None:
    engine = _engine()
    compact = {"separators": (",", ":")}
    engine.decode_claims([json.dumps(_doc("a"), **compact).encode()])
    # The template's own frame around metadata holding a byte no UTF-8 text has.
    bad = json.dumps(_doc("b"), **compact).encode().replace(b'"name":"b"', b'"name":"\xff"')
    for payload in (bad, b"\xff\xfe"):
        with pytest.raises(InvalidInput, match="not UTF-8 JSON") as err:
            engine.decode_claims([payload], validate=validate)
        assert "claims[0]" in str(err.value)
