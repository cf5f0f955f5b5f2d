"""What a Schedule derives from its claims' specs (``service.claim_facts``): worked out once
per set of spec objects and kept, always equal to working it out afresh."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dra_solver.model import ALL, CelEnvironment, FeatureGates, claim_reads, claims_key
from dra_solver.model import objects as o
from dra_solver.service.bench import device_class
from dra_solver.service.claim_facts import ClaimFacts

CEL = CelEnvironment()
DRIVER = "gpu.example.com"

SPECS: list[dict[str, Any]] = [
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2, "selectors": [
        {"cel": {"expression": f"device.attributes['{DRIVER}'].model == 'a100'"}}]}}]}},
    {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": DRIVER}}, {"name": "b", "exactly": {"deviceClassName": DRIVER}}],
                 "constraints": [{"matchAttribute": f"{DRIVER}/numa"}]}},
    {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "selectors": [
        {"cel": {"expression": "device.attributes.exists(d, true)"}}]}}]}},
]


def _claim(name: str, spec: int) -> o.ResourceClaim:
    return o.ResourceClaim.model_validate(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "default"}, "spec": SPECS[spec]}
    )


def _classes() -> list[o.DeviceClass]:
    return [o.DeviceClass.model_validate(device_class())]


def _fresh(claims: list[o.ResourceClaim], classes: list[o.DeviceClass], allocator: str, policy: str, gates: FeatureGates) -> tuple[Any, bytes]:
    return (claim_reads(claims, classes, compile=CEL.compile), claims_key(claims, allocator=allocator, policy=policy, gates=gates))


def test_claims_sharing_their_spec_objects_share_the_facts() -> None:
    facts, classes, gates = ClaimFacts(), _classes(), FeatureGates()
    template = _claim("t", 1)
    first = template.model_copy(update={"metadata": o.ObjectMeta(name="pod-1-gpu", namespace="default")})
    second = template.model_copy(update={"metadata": o.ObjectMeta(name="pod-2-gpu", namespace="default")})
    a = facts.get([first], classes, allocator="cpsat", policy="", gates=gates, compile=CEL.compile)
    b = facts.get([second], classes, allocator="cpsat", policy="", gates=gates, compile=CEL.compile)
    assert b is a and len(facts) == 1
    assert (a.reads, a.key) == _fresh([first], classes, "cpsat", "", gates)
    assert a.reads == frozenset({(DRIVER, "model")})


def test_anything_else_is_worked_out_afresh() -> None:
    facts, classes, gates = ClaimFacts(), _classes(), FeatureGates()
    claim = _claim("c", 0)
    kept = facts.get([claim], classes, allocator="cpsat", policy="", gates=gates, compile=CEL.compile)
    # An equal spec in another object, other classes (a new snapshot), another policy: not taken for it.
    for claims, cls, policy in (([_claim("c", 0)], classes, ""), ([claim], _classes(), ""), ([claim], classes, "spread")):
        got = facts.get(claims, cls, allocator="cpsat", policy=policy, gates=gates, compile=CEL.compile)
        assert got is not kept
        assert (got.reads, got.key) == _fresh(claims, cls, "cpsat", policy, gates)
    assert facts.get([claim], classes, allocator="cpsat", policy="spread", gates=gates, compile=CEL.compile).key != kept.key


def test_it_keeps_a_bounded_number_of_entries() -> None:
    facts, classes, gates = ClaimFacts(size=3), _classes(), FeatureGates()
    claims = [_claim(f"c{i}", i % len(SPECS)) for i in range(10)]
    for c in claims:
        facts.get([c], classes, allocator="cpsat", policy="", gates=gates, compile=CEL.compile)
    assert len(facts) == 3
    none = ClaimFacts(size=0)
    none.get([claims[0]], classes, allocator="cpsat", policy="", gates=gates, compile=CEL.compile)
    assert len(none) == 0


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["", "pack", "spread"]), st.booleans()), min_size=1, max_size=25),
)
def test_kept_facts_always_equal_fresh_ones(picks: list[tuple[int, str, bool]]) -> None:
    """Calls with claims from a few templates (two claims sharing a template's spec object),
    new objects with equal specs now and then, policies and gates switched: every answer is
    what working it out afresh gives."""
    facts, classes = ClaimFacts(size=4), _classes()
    templates = [_claim(f"t{i}", i) for i in range(len(SPECS))]
    gates_on, gates_off = FeatureGates(), FeatureGates.parse("DRAPrioritizedList=false")
    for n, (pick, policy, gates_flag) in enumerate(picks):
        gates = gates_on if gates_flag else gates_off
        if pick < len(SPECS):
            claims = [templates[pick].model_copy(update={"metadata": o.ObjectMeta(name=f"p{n}", namespace="default")})]
        else:
            claims = [_claim(f"p{n}a", 0), templates[1].model_copy(update={"metadata": o.ObjectMeta(name=f"p{n}b", namespace="default")})]
        got = facts.get(claims, classes, allocator="cpsat", policy=policy, gates=gates, compile=CEL.compile)
        assert (got.reads, got.key) == _fresh(claims, classes, "cpsat", policy, gates)
    assert facts.get([templates[3]], classes, allocator="cpsat", policy="", gates=gates_on, compile=CEL.compile).reads is ALL
