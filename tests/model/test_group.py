"""Gang placement (``model.schedule_group``): the case table on both paths against brute force,
the validator (``check_group``) on every answer and on broken answers, and properties."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from dra_solver import model
from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from tests import builders as b
from tests import gang_builders as g
from tests.model.group_brute import brute_force

CEL = model.CelEnvironment()


@dataclass(frozen=True)
class Case:
    build: Callable[[], model.GroupRequest]
    placed: bool
    aggregated: bool = True
    """The aggregated path is exact for it (else only the joint path is checked)."""
    domain: str | None = None
    pods: int | None = None


def _sequential_fails() -> model.GroupRequest:
    # design-17 section 2: the small pod first on the big node leaves the big pod nowhere.
    objs = g.cluster([g.Rack("r2", [g.Node(gpus=8, cpu="64"), g.Node(gpus=4, cpu="8")])])
    req = g.group_request(objs, [4, 8])
    pods = (replace(req.pods[0], name="a-small"), replace(req.pods[1], name="b-big"))
    return replace(req, pods=pods)


def _first_available() -> model.GroupRequest:
    objs = g.cluster([g.Rack("r0", [g.Node(gpus=4), g.Node(gpus=4, busy=2)])])
    req = g.group_request(objs, [0, 0])

    def claim(name: str) -> o.ResourceClaim:
        doc = b.claim(name, cls=b.CLASS).obj()
        doc["spec"]["devices"]["requests"] = [b.first_available("gpu", b.sub("four", b.CLASS, 4), b.sub("two", b.CLASS, 2))]
        typed = decode_object(doc)
        assert isinstance(typed, o.ResourceClaim)
        return typed

    pods = tuple(replace(p, claims=(claim(f"{p.name}-gpu"),)) for p in req.pods)
    return replace(req, pods=pods)


def _node_local_shared() -> model.GroupRequest:
    # A shared claim on a node's GPU: every pod that uses it must go to that node.
    objs = g.cluster([g.Rack("r0", [g.Node(gpus=4), g.Node(gpus=4)])])
    req = g.group_request(objs, [1, 2])
    shared = g.gpu_claim("train-shared", 1)
    pods = tuple(replace(p, shared=(shared.ref,)) for p in req.pods)
    return replace(req, pods=pods, shared_claims=(shared,))


def _rooms() -> model.GroupRequest:
    objs = g.cluster([g.Rack("r0", [g.Node(gpus=8, cpu="2"), g.Node(gpus=8, cpu="2")])])
    return g.group_request(objs, [2, 2, 2], cpu_millis=1000)


CASES: dict[str, Case] = {
    "one rack fits": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4), g.Node(4)]), g.Rack("r1", [g.Node(4, busy=2), g.Node(4)])]), [4, 2, 2]),
        placed=True, domain="r0",
    ),
    "best fit: the fuller rack": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4), g.Node(4)]), g.Rack("r1", [g.Node(4, busy=1), g.Node(4)])]), [2, 1]),
        placed=True, domain="r1",
    ),
    "spread: the emptier rack": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4), g.Node(4)]), g.Rack("r1", [g.Node(4, busy=1), g.Node(4)])]), [2, 1], policy="spread"),
        placed=True, domain="r0",
    ),
    "sequential fails, joint fits": Case(_sequential_fails, placed=True, domain="r2"),
    "no rack holds it": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4), g.Node(4)]), g.Rack("r1", [g.Node(4), g.Node(4, busy=3)])]), [4, 4, 4]),
        placed=False,
    ),
    "quorum below the pods: as many as fit": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4), g.Node(4)])]), [4, 4, 4], min_count=2),
        placed=True, pods=2,
    ),
    "no topology key: whole cluster": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4)]), g.Rack("r1", [g.Node(4)])]), [4, 4], key=""),
        placed=True,
    ),
    "shared fabric claim: only a rack with fabric": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4), g.Node(4)]), g.Rack("r1", [g.Node(4), g.Node(4)], fabric=1)]), [2, 2], shared=True),
        placed=True, domain="r1",
    ),
    # Without a key, the nodes reaching the same fabric devices are solved as domains of their
    # own (disjoint reach, every pod uses the claim): exact, and the aggregated path applies.
    "shared fabric, no key: pods follow the fabric": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(4)], fabric=1), g.Rack("r1", [g.Node(4)])]), [2, 2], shared=True, key=""),
        placed=True,
    ),
    "shared fabric in two racks, no key: one rack holds every pod": Case(
        lambda: g.group_request(
            g.cluster([g.Rack("r0", [g.Node(4), g.Node(4, busy=2)], fabric=1), g.Rack("r1", [g.Node(4), g.Node(4, busy=3)], fabric=1)]),
            [2, 2, 2], shared=True, key=""),
        placed=True, pods=3,
    ),
    "shared fabric in two racks, no key: no rack holds it, the cluster would": Case(
        lambda: g.group_request(
            g.cluster([g.Rack("r0", [g.Node(4, busy=2)], fabric=1), g.Rack("r1", [g.Node(4, busy=2)], fabric=1)]),
            [2, 2], shared=True, key=""),
        placed=False,
    ),
    "shared GPU on one node": Case(_node_local_shared, placed=True, aggregated=False),
    "room: cpu spreads the pods": Case(_rooms, placed=True),
    "room: cpu too small": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(gpus=8, cpu="1")])]), [1, 1], cpu_millis=1000),
        placed=False,
    ),
    "firstAvailable: best score": Case(_first_available, placed=True),
    "pods without claims": Case(
        lambda: g.group_request(g.cluster([g.Rack("r0", [g.Node(0, cpu="1"), g.Node(0, cpu="1")])]), [0, 0], cpu_millis=1000),
        placed=True,
    ),
}


def _run(req: model.GroupRequest) -> model.GroupOutcome:
    out = model.schedule_group(req, cel=CEL)
    assert model.check_group(req, out, cel=CEL) == []
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_table_against_brute_force(name: str) -> None:
    case = CASES[name]
    req = case.build()
    reference = brute_force(req)
    assert reference.feasible == case.placed
    paths: list[model.GroupPath] = ["joint", "aggregated"] if case.aggregated else ["joint"]
    for path in paths:
        out = _run(replace(req, path=path))
        assert out.placed == case.placed, (path, out.reason)
        assert out.stats.path == path
        if not case.placed:
            assert out.explanation is not None and out.reason
            continue
        assert out.objective == reference.objective, path
        if case.domain is not None:
            assert out.domain == case.domain
        if case.pods is not None:
            assert out.pods_placed == case.pods
    auto = _run(req)
    assert auto.stats.path == ("aggregated" if case.aggregated else "joint")


def test_without_a_key_disjoint_fabric_reach_splits_the_cluster_into_domains() -> None:
    req = CASES["shared fabric in two racks, no key: one rack holds every pod"].build()
    out = _run(req)
    assert out.stats.domains_total == 2 and out.domain is None
    assert {p.node.split("-")[0] for p in out.pods} == {"r0"}, out.pods
    # A pod that does not use the shared claim may go anywhere: no split.
    lone = replace(req, pods=(*req.pods[:2], replace(req.pods[2], shared=())))
    assert _run(lone).stats.domains_total == 1


def test_sequential_fails_places_both_pods_on_the_right_nodes() -> None:
    out = _run(_sequential_fails())
    assert {p.name: p.node for p in out.pods} == {"a-small": "r2-n1", "b-big": "r2-n0"}


def test_explanation_names_the_closest_rack_and_the_blocker() -> None:
    out = _run(CASES["no rack holds it"].build())
    assert out.explanation is not None
    assert out.explanation.closest == "r0"
    assert out.explanation.pods_placeable == 2
    assert out.reason.startswith("0/2 domains (topology.example.com/rack) can hold PodGroup default/train: closest rack r0 fits 2 of 3 pods")
    assert "minCount is 3" in out.reason


def test_explanation_names_a_shared_claim_that_fits_no_domain() -> None:
    objs = g.cluster([g.Rack("r0", [g.Node(4)]), g.Rack("r1", [g.Node(4)])])
    out = _run(g.group_request(objs, [1, 1], shared=True))
    assert not out.placed
    assert out.explanation is not None
    assert any(r.kind == "shared-claim" for r in out.explanation.reasons)


def test_fewer_pods_than_min_count_is_not_placeable() -> None:
    objs = g.cluster([g.Rack("r0", [g.Node(4)])])
    out = _run(g.group_request(objs, [1], min_count=2))
    assert not out.placed
    assert "fewer than its minCount 2" in out.reason


def test_invalid_requests() -> None:
    objs = g.cluster([g.Rack("r0", [g.Node(4)])])
    req = g.group_request(objs, [1, 1])
    with pytest.raises(model.InvalidInput, match="minCount"):
        model.schedule_group(replace(req, min_count=0))
    with pytest.raises(model.InvalidInput, match="Duplicate value"):
        model.schedule_group(replace(req, pods=(req.pods[0], req.pods[0])))
    with pytest.raises(model.InvalidInput, match="not one of the group's shared claims"):
        model.schedule_group(replace(req, pods=(replace(req.pods[0], shared=("default/nope",)),)))
    with pytest.raises(model.InvalidInput, match="topologyKey"):
        model.schedule_group(replace(req, topology_key="not a key!"))


def test_rack_pool_used_by_pods_is_shared_between_nodes() -> None:
    # Per-pod claims on rack-level fabric devices: two nodes reach the same devices, so the
    # aggregated path is not exact and the joint model must not give one device twice.
    objs = g.cluster([g.Rack("r0", [g.Node(2), g.Node(2)], fabric=1)])
    req = g.group_request(objs, [1, 1])
    pods = tuple(replace(p, claims=(*p.claims, g.fabric_claim(f"{p.name}-link"))) for p in req.pods)
    out = _run(replace(req, pods=pods))
    assert not out.placed  # one fabric device, two pods that each want it
    out = _run(replace(req, pods=pods, min_count=1))
    assert out.placed and out.pods_placed == 1 and out.stats.path == "joint"
    with pytest.raises(model.InvalidInput, match="not exact"):
        model.schedule_group(replace(req, pods=pods, path="aggregated"))


# --- the validator -----------------------------------------------------------------------------


def _placed() -> tuple[model.GroupRequest, model.GroupOutcome]:
    req = CASES["shared fabric claim: only a rack with fabric"].build()
    return req, _run(req)


def _rules(req: model.GroupRequest, out: model.GroupOutcome) -> set[str]:
    return {v.rule for v in model.check_group(req, out, cel=CEL)}


def test_check_group_catches_a_wrong_domain() -> None:
    req, out = _placed()
    assert "group-domain" in _rules(req, replace(out, domain="r0"))


def test_check_group_catches_a_missed_quorum() -> None:
    req, out = _placed()
    assert "group-min-count" in _rules(req, replace(out, pods=out.pods[:1]))


def test_check_group_catches_a_shared_claim_given_twice() -> None:
    req, out = _placed()
    assert "group-shared-once" in _rules(req, replace(out, shared=(*out.shared, *out.shared)))


def test_check_group_catches_room_exceeded() -> None:
    req, out = _placed()
    rooms = {n: model.NodeRoom(cpu_millis=0) for n in req.rooms}
    tight = replace(req, pods=tuple(replace(p, cpu_millis=100) for p in req.pods), rooms=rooms)
    assert "group-room" in _rules(tight, out)


def test_check_group_catches_a_device_given_twice() -> None:
    req, out = _placed()
    first, second = out.pods
    moved = replace(second, node=first.node, results=first.results)
    broken = replace(out, pods=(first, moved))
    assert _rules(req, broken) & {"exclusive", "device"}


def test_check_group_catches_an_unreachable_shared_claim() -> None:
    req, out = _placed()
    other = "r1-n0" if out.pods[0].node != "r1-n0" else "r1-n1"
    assert other
    elsewhere = replace(req, index=g.index(g.cluster([g.Rack("r0", [g.Node(4), g.Node(4)]), g.Rack("r1", [g.Node(4), g.Node(4)], fabric=1)])))
    pods = (replace(out.pods[0], node="r0-n0"), *out.pods[1:])
    assert "group-reach" in _rules(elsewhere, replace(out, pods=pods))
