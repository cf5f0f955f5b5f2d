"""The front-door types of gang placement: a PodGroup placed whole, and what comes back.

API:
- ``GroupRequest``: the group's pods (``GroupPod``: own claims, the shared claims it uses by
  ``namespace/name``, candidate nodes, CPU and memory requests), its shared claims, ``min_count``,
  the topology key (a node label; "" = the whole cluster is one domain), the room left on each
  node (``NodeRoom``), the snapshot (``NodeIndex``) and devices in flight, gates, policy,
  deadline and which path to take (``GroupPath``).
- ``GroupOutcome``: placed or not; the domain; each placed pod's node and allocation
  (``PodPlacement``); each shared claim's allocation; the FirstAvailable score; the objective
  tuple (``GroupObjective``); statistics (``GroupStats``) and, when not placed, a group-level
  ``GroupExplanation``.

Contract (``model.group.schedule_group``): a placement puts at least ``min_count`` pods (as many
as fit, like upstream, which also binds pods beyond the quorum), every pod's claims allocated on
its node, the shared claims allocated once and reachable from every node that uses them, all
nodes in one domain. Not placeable is an answer, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from dra_solver.model import objects as o
from dra_solver.model.cluster import AllocatedState
from dra_solver.model.features import FeatureGates
from dra_solver.model.node_index import NodeIndex
from dra_solver.model.pools import DeviceParseCache

GroupPath = Literal["auto", "aggregated", "joint"]
"""``aggregated``: per node class, which sets of pods fit one node, then a small master model
(exact when per-pod devices are node-local and the shared claims use other pools, see
``model.group``); ``joint``: one CP-SAT model over nodes, pods and devices; ``auto`` picks
``aggregated`` when it is exact."""

GROUP_PATHS: tuple[GroupPath, ...] = ("auto", "aggregated", "joint")

MAX_GROUP_PODS = 1024
"""Pods per group (a PodGroup's minCount has no upstream limit; ours keeps the model bounded)."""


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """What a node has left for new pods; None = not limited."""

    cpu_millis: int | None = None
    memory_bytes: int | None = None
    pods: int | None = None


@dataclass(frozen=True, slots=True)
class GroupPod:
    name: str
    claims: tuple[o.ResourceClaim, ...] = ()
    """The pod's own claims to allocate (unallocated)."""
    shared: tuple[str, ...] = ()
    """``namespace/name`` of the group's shared claims this pod uses."""
    nodes: tuple[str, ...] | None = None
    """Candidate nodes (the caller's filter: selectors, affinity, taints); None = every node."""
    cpu_millis: int = 0
    memory_bytes: int = 0


@dataclass(frozen=True, slots=True)
class GroupRequest:
    name: str
    """``namespace/name`` of the PodGroup (messages, reservations)."""
    pods: tuple[GroupPod, ...]
    index: NodeIndex
    shared_claims: tuple[o.ResourceClaim, ...] = ()
    """Claims of the whole group: allocated once (or already allocated), usable by its pods."""
    min_count: int = 1
    topology_key: str = ""
    rooms: Mapping[str, NodeRoom] = field(default_factory=dict)
    in_flight: AllocatedState = field(default_factory=AllocatedState)
    """Devices held by allocations not yet in the snapshot (the service's reservations)."""
    gates: FeatureGates = field(default_factory=FeatureGates)
    policy: str = ""
    time_limit: float | None = 10.0
    path: GroupPath = "auto"
    device_cache: DeviceParseCache | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class PodPlacement:
    name: str
    node: str
    results: tuple[o.AllocationResult, ...]
    """One per claim of the pod, in the pod's claim order."""
    score: int = 0


@dataclass(frozen=True, slots=True, order=True)
class GroupObjective:
    """What the placement optimises, in order (the tuple tests compare with brute force):
    pods placed and the FirstAvailable score are maximised; the placement levels (policy
    ``pack``: idle units left in the domain, idle nodes opened, nodes used, idle units left
    on the nodes used; ``spread``: the same, negated) are minimised."""

    pods: int
    score: int
    levels: tuple[int, ...] = ()

    def key(self) -> tuple[int, ...]:
        """Larger is better."""
        return (self.pods, self.score, *(-v for v in self.levels))


@dataclass
class GroupStats:
    path: str = ""
    status: str = ""
    """OPTIMAL, FEASIBLE (anytime: ``gap`` says how far from proven), INFEASIBLE."""
    gap: float = 0.0
    domains_total: int = 0
    domains_evaluated: int = 0
    domains_feasible: int = 0
    node_classes: int = 0
    pod_classes: int = 0
    patterns: int = 0
    solves: int = 0
    variables: int = 0
    constraints: int = 0
    wall_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class GroupReason:
    kind: str
    """pods, shared-claim, room, min-count, domain, nodes."""
    message: str
    claim: str = ""


@dataclass(frozen=True, slots=True)
class DomainVerdict:
    value: str
    nodes: int
    pods_placeable: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class GroupExplanation:
    summary: str
    closest: str | None = None
    """The domain value that came closest (None without a topology key)."""
    pods_placeable: int = 0
    min_count: int = 0
    reasons: tuple[GroupReason, ...] = ()
    domains: tuple[DomainVerdict, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    placed: bool
    domain: str | None
    """The topology domain's label value (None without a topology key)."""
    pods: tuple[PodPlacement, ...]
    """Placed pods, in name order."""
    shared: tuple[o.AllocationResult, ...]
    """One per shared claim of the request, in request order (an already allocated claim's own)."""
    score: int
    objective: GroupObjective
    stats: GroupStats
    reason: str = ""
    explanation: GroupExplanation | None = None

    @property
    def pods_placed(self) -> int:
        return len(self.pods)
