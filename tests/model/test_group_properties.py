"""Properties of gang placement on random small clusters (hypothesis):

- every answer passes ``check_group``;
- group vs per-pod: whenever placing the pods one at a time (in name order, first node that
  fits) places them all in some domain, the group model places them all too, and it never
  places fewer pods than that sequential placement;
- both paths agree (same objective) where the aggregated one is exact, and both agree with
  the brute force.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_solver import model
from dra_solver.model import objects as o
from tests import gang_builders as g
from tests.model.group_brute import brute_force

CEL = model.CelEnvironment()


@st.composite
def groups(draw: st.DrawFn, *, shared: bool) -> model.GroupRequest:
    racks = []
    for r in range(draw(st.integers(1, 2))):
        nodes = []
        for _ in range(draw(st.integers(1, 2))):
            gpus = draw(st.integers(0, 4))
            nodes.append(g.Node(gpus=gpus, busy=draw(st.integers(0, gpus)), cpu=str(draw(st.sampled_from([1, 2, 64])))))
        racks.append(g.Rack(f"r{r}", nodes, fabric=draw(st.integers(0, 1)) if shared else 0))
    pods = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    use_shared = shared and draw(st.booleans())
    return g.group_request(
        g.cluster(racks),
        pods,
        min_count=draw(st.integers(1, len(pods))),
        key=draw(st.sampled_from([g.RACK_LABEL, ""])),
        shared=use_shared,
        policy=draw(st.sampled_from(["pack", "spread"])),
        cpu_millis=draw(st.sampled_from([0, 1000])),
    )


def sequential(req: model.GroupRequest) -> int:
    """Pods one at a time in name order, each on the first node (by name) of one domain where
    it fits with the earlier ones; the best domain's count."""
    idx = req.index
    key = req.topology_key
    domains: dict[str, list[str]] = {}
    for name, node in sorted(idx.nodes_by_name.items()):
        labels = node.metadata.labels or {}
        if key and key not in labels:
            continue
        domains.setdefault(labels.get(key, "") if key else "", []).append(name)
    best = 0
    for nodes in domains.values():
        taken: list[o.AllocationResult] = []
        cpu: dict[str, int] = {}
        placed = 0
        for pod in req.pods:
            for node in nodes:
                room = req.rooms.get(node, model.NodeRoom())
                if room.cpu_millis is not None and cpu.get(node, 0) + pod.cpu_millis > room.cpu_millis:
                    continue
                extra = model.AllocatedState.from_claims(o.ResourceClaim(status=o.ResourceClaimStatus(allocation=r)) for r in taken)
                request = model.AllocationRequest(
                    claims=pod.claims, node=idx.nodes_by_name[node], inventory=idx.node_inventory(node, extra), time_limit=None
                )
                outcome = model.allocate(request, validate=False) if pod.claims else None
                if outcome is not None and not outcome.allocated:
                    continue
                if outcome is not None:
                    taken.extend(outcome.results)
                cpu[node] = cpu.get(node, 0) + pod.cpu_millis
                placed += 1
                break
        best = max(best, placed)
    return best


SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(groups(shared=False))
def test_group_places_whenever_pods_one_at_a_time_do(req: model.GroupRequest) -> None:
    one_at_a_time = sequential(req)
    relaxed = model.schedule_group(replace(req, min_count=1), cel=CEL)
    assert model.check_group(replace(req, min_count=1), relaxed, cel=CEL) == []
    assert relaxed.pods_placed >= one_at_a_time
    if one_at_a_time == len(req.pods):
        whole = model.schedule_group(replace(req, min_count=len(req.pods)), cel=CEL)
        assert whole.placed and whole.pods_placed == len(req.pods)


@SETTINGS
@given(groups(shared=True))
def test_paths_agree_with_each_other_and_with_brute_force(req: model.GroupRequest) -> None:
    joint = model.schedule_group(replace(req, path="joint"), cel=CEL)
    assert model.check_group(req, joint, cel=CEL) == []
    reference = brute_force(req)
    assert joint.placed == reference.feasible
    if joint.placed:
        assert joint.objective == reference.objective
    auto = model.schedule_group(req, cel=CEL)
    assert model.check_group(req, auto, cel=CEL) == []
    assert auto.placed == joint.placed
    if auto.placed:
        assert auto.objective == joint.objective
