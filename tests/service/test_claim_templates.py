"""Claims decoded once per template (``service.claim_templates``): a claim that differs from one
seen before only in its metadata is that claim with its own metadata, and the engine answers
exactly as if it had decoded and validated it in full, errors included."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver.model import FeatureGates
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

FAULTS: list[dict[str, Any]] = [
    {"name": "Pod_Upper"}, {"name": "x" * 254}, {"name": ""}, {"namespace": "Bad_NS"}, {"generateName": "Bad_"},
    {"uid": "not-a-uid"}, {"labels": {"bad key!": "x"}}, {"labels": {"app": None}}, {"unknownField": 1},
    {"ownerReferences": [{"bogus": 1}]}, {"generation": "two"}, {"name": 5}, {"annotations": ["not", "a", "map"]},
]
"""One thing wrong with the metadata each (or None: nothing), so that most claims are valid and
a template is met again with metadata that must not pass."""

metadata = st.builds(
    lambda name, namespace, extra, fault: {"name": name, "namespace": namespace, **extra, **(fault or {})},
    st.sampled_from(["pod-0-gpu", "pod-1-gpu", "a.b-c"]),
    st.sampled_from(["default", "team-a"]),
    st.sampled_from([{}, {"uid": "00000000-0000-4000-8000-000000000001"}, {"labels": {"app": "x"}, "annotations": {"a": "b"}},
                     {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]}]),
    st.one_of(st.none(), st.none(), st.sampled_from(FAULTS)),
)
spec_index = st.one_of(st.integers(0, 1), st.integers(0, len(SPECS) - 1))


def _blob(meta: dict[str, Any], spec: int, *, duplicate_name: bool = False) -> bytes:
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": SPECS[spec]}
    text = json.dumps(doc)
    if duplicate_name:  # a key named twice in the metadata: strict field validation reports it
        text = text.replace('"metadata": {', '"metadata": {"name": "first", ', 1)
    return text.encode()


def _outcome(engine: e.Engine, blob: bytes) -> tuple[str, Any]:
    try:
        claims = engine.decode_claims([blob])
    except Exception as err:  # the error itself is what is compared
        return type(err).__name__, str(err)
    return "ok", [c.model_dump(by_alias=True) for c in claims]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(metadata, spec_index, st.integers(0, 9).map(lambda n: n == 0)), min_size=1, max_size=8))
def test_a_claim_from_a_known_template_decodes_as_a_fresh_decode_would(calls: list[tuple[dict[str, Any], int, bool]]) -> None:
    warm = _engine()
    for meta, spec, duplicate in calls:
        blob = _blob(meta, spec, duplicate_name=duplicate)
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
