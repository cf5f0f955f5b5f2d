"""What the dra-solver scheduler decides, as pure functions over objects.

One scheduling attempt for a pod follows the scheduler's phases:

1. :func:`gather_claims` (PreFilter): resolve the pod's claims; a claim not created yet, not
   found, being deleted or generated for another pod makes the pod wait;
2. :func:`filter_nodes` (Filter, minus devices): nodeSelector, required node affinity, node
   taints, ``spec.unschedulable``, room for CPU/memory/pod count, and the node selectors of
   claims that are already allocated; the survivors are the candidates the solver scores;
3. the solver service picks the node and the devices (``Schedule`` with ``reserve``);
4. :func:`write_step` (PreBind): the next write that records allocation and reservation on a
   claim (finalizer first, then status), recomputed from a fresh copy after each conflict;
5. binding, or :func:`rollback_status` for every claim written when anything failed.

Messages follow the scheduler's ("0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had
untolerated taint {gpu: broken}."). Nothing here does I/O or mutates its arguments.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from operator import itemgetter
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers.objects import Obj
from dra_solver.model import QuantityError, parse_quantity
from dra_solver.service.api import nodefilter

# The checks kube-scheduler's NodeUnschedulable, NodeAffinity and TaintToleration make are the
# service's (``dra-solver explain pod/NAME`` asks them too); this module adds node resources.
NodeFilter = nodefilter.NodeFilter
nodes_summary = nodefilter.nodes_summary
tolerates_node_taint = nodefilter.tolerates_node_taint

# --- which pods ---------------------------------------------------------------------------------


def is_pending(pod: Mapping[str, Any], scheduler_name: str = ob.SCHEDULER_NAME) -> bool:
    """A pod this scheduler should place: ours, not on a node, not deleted, not finished, and
    without scheduling gates (whoever set them removes them when the pod may be scheduled)."""
    return (
        ob.spec(pod).get("schedulerName") == scheduler_name
        and not ob.pod_node(pod)
        and not ob.deleting(pod)
        and not ob.pod_terminal(pod)
        and not ob.spec(pod).get("schedulingGates")
    )


def scheduling_inputs_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether a pod update can change the scheduling outcome (not our own condition writes)."""
    if old is None:
        return True
    return bool(
        ob.spec(old) != ob.spec(new)
        or ob.status(old).get("resourceClaimStatuses") != ob.status(new).get("resourceClaimStatuses")
        or ob.meta(old).get("labels") != ob.meta(new).get("labels")
    )


def node_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a node update can let a pod fit that did not before: labels (selectors,
    affinity), spec (taints, unschedulable) or allocatable resources; heartbeats and
    condition updates cannot."""
    return bool(
        ob.meta(old).get("labels") != ob.meta(new).get("labels")
        or ob.spec(old) != ob.spec(new)
        or ob.status(old).get("allocatable") != ob.status(new).get("allocatable")
    )


# --- claims (PreFilter) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodClaim:
    key: str
    """``namespace/name`` of the ResourceClaim."""
    claim: Obj
    reserved: bool
    """Already reserved for this pod (a previous attempt got that far)."""

    @property
    def allocated(self) -> bool:
        return ob.allocation(self.claim) is not None


@dataclass(frozen=True, slots=True)
class Gathered:
    claims: tuple[PodClaim, ...] = ()
    wait: str = ""
    """Why the pod cannot be scheduled yet (empty when it can be tried)."""
    being_created: bool = False
    """The wait is for the claim controller to create a claim from its template: a matter of
    moments that needs no PodScheduled condition or Event (upstream's PreEnqueue gate)."""

    @property
    def to_allocate(self) -> tuple[PodClaim, ...]:
        return tuple(c for c in self.claims if not c.allocated)

    @property
    def allocated(self) -> tuple[PodClaim, ...]:
        return tuple(c for c in self.claims if c.allocated)


def gather_claims(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> Gathered:
    """The pod's claims in spec order, or why the pod must wait for them."""
    ns = ob.namespace(pod)
    out: list[PodClaim] = []
    seen: set[str] = set()
    for pod_claim in ob.pod_claims(pod):
        try:
            resolved = ob.claim_name(pod, pod_claim)
        except ob.ClaimNotCreated:
            return Gathered(wait=f'waiting for resourceclaim for pod claim "{pod_claim.get("name")}" to be created', being_created=True)
        except ob.ClaimNameError as err:
            return Gathered(wait=str(err))
        if resolved.name is None:
            continue
        k = f"{ns}/{resolved.name}"
        claim = claims.get(k)
        if claim is None:
            return Gathered(wait=f'resourceclaim "{resolved.name}" not found')
        if ob.deleting(claim):
            return Gathered(wait=f'resourceclaim "{resolved.name}" is being deleted')
        if resolved.check_owner and (why := ob.is_for_pod(pod, claim)) is not None:
            return Gathered(wait=why)
        if k in seen:
            continue
        seen.add(k)
        out.append(PodClaim(k, dict(claim), ob.is_reserved_for_pod(pod, claim)))
    return Gathered(tuple(out))


# --- nodes (Filter) -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU (cores), memory (bytes) and pod count; None in an allocatable = not limited.

    ``scalars`` are the other countable resources by name, sorted: extended resources
    (``example.com/gpu``, served by device plugins or, through a DeviceClass, by DRA) and
    hugepages; a scalar missing from an allocatable is 0, as the scheduler counts it.
    """

    cpu: Fraction | None = Fraction(0)
    memory: Fraction | None = Fraction(0)
    pods: int | None = 0
    scalars: tuple[tuple[str, Fraction], ...] = ()

    def plus(self, other: Resources) -> Resources:
        return Resources(
            _add(self.cpu, other.cpu), _add(self.memory, other.memory), None if self.pods is None or other.pods is None else self.pods + other.pods,
            _merge(self.scalars, other.scalars),
        )

    def minus(self, other: Resources) -> Resources:
        """Undo :meth:`plus` (exact: the amounts are fractions; a scalar that returns to zero is dropped)."""
        undone = self.plus(Resources(None if other.cpu is None else -other.cpu, None if other.memory is None else -other.memory,
                                     None if other.pods is None else -other.pods,
                                     tuple((name, -value) for name, value in other.scalars)))
        return replace(undone, scalars=tuple((name, value) for name, value in undone.scalars if value))

    def scalar(self, name: str) -> Fraction:
        return dict(self.scalars).get(name, Fraction(0))


def _merge(a: tuple[tuple[str, Fraction], ...], b: tuple[tuple[str, Fraction], ...]) -> tuple[tuple[str, Fraction], ...]:
    if not b:
        return a
    if not a:
        return b
    out = dict(a)
    for name, value in b:
        out[name] = out.get(name, Fraction(0)) + value
    return tuple(sorted(out.items()))


def is_scalar_resource(name: str) -> bool:
    """Resources NodeResourcesFit counts by name beyond cpu/memory: extended resources
    (anything with a ``/``, the DRA-backed ``deviceclass.resource.kubernetes.io/...`` included)
    and hugepages."""
    return "/" in name or name.startswith("hugepages-")


def _add(a: Fraction | None, b: Fraction | None) -> Fraction | None:
    return None if a is None or b is None else a + b


def _quantity(text: Any) -> Fraction | None:
    return _parsed_quantity(str(text))


@functools.lru_cache(maxsize=4096)
def _parsed_quantity(text: str) -> Fraction | None:
    # Pods and nodes repeat a handful of quantities ("1", "100m", "8Gi"): parsed once each, not
    # on every pod event and attempt (a few percent of the scheduler's Python in a backlog).
    try:
        return parse_quantity(text).to_fraction()
    except (QuantityError, ValueError):
        return None


def _requests(containers: Iterable[Mapping[str, Any]]) -> list[dict[str, Fraction]]:
    out = []
    for c in containers:
        req = ((c.get("resources") or {}).get("requests")) or {}
        amounts = {"cpu": _quantity(req.get("cpu", "0")) or Fraction(0), "memory": _quantity(req.get("memory", "0")) or Fraction(0)}
        for name in sorted(req):
            if is_scalar_resource(str(name)):
                amounts[str(name)] = _quantity(req[name]) or Fraction(0)
        out.append(amounts)
    return out


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the pod takes from a node: per resource, the larger of its containers' sum and any
    init container, plus the pod overhead (as the scheduler's NodeResourcesFit computes it).
    Extended resources count here whoever serves them; the node filter decides whether a
    device plugin (the node's allocatable) or DRA (a DeviceClass) does."""
    sp = ob.spec(pod)
    total: dict[str, Fraction] = {}
    for amounts in _requests(sp.get("containers") or []):
        for name, value in amounts.items():
            total[name] = total.get(name, Fraction(0)) + value
    for amounts in _requests(sp.get("initContainers") or []):
        for name, value in amounts.items():
            total[name] = max(total.get(name, Fraction(0)), value)
    overhead = sp.get("overhead") or {}
    for name in sorted(overhead):
        if name in ("cpu", "memory") or is_scalar_resource(str(name)):
            total[str(name)] = total.get(str(name), Fraction(0)) + (_quantity(overhead[name]) or Fraction(0))
    cpu = total.pop("cpu", Fraction(0))
    memory = total.pop("memory", Fraction(0))
    return Resources(cpu, memory, 1, tuple(sorted((n, v) for n, v in total.items() if v)))


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    st = ob.status(node)
    alloc = st.get("allocatable") or st.get("capacity") or {}
    pods = alloc.get("pods")
    pod_count = _quantity(pods) if pods is not None else None
    scalars = []
    for name in sorted(alloc):
        if is_scalar_resource(str(name)):
            scalars.append((str(name), _quantity(alloc[name]) or Fraction(0)))
    return Resources(
        _quantity(alloc["cpu"]) if "cpu" in alloc else None,
        _quantity(alloc["memory"]) if "memory" in alloc else None,
        int(pod_count) if pod_count is not None else None,
        tuple(scalars),
    )


NO_USE = Resources()
"""What a node with no pods counts as used."""


@dataclass(frozen=True, slots=True)
class PlacementPass:
    """One placement's verdicts over every node of a nodes mapping: the nodes that pass (by
    name), why the others do not, how many pods each passing node takes (those that say),
    and the fewest of those (None: none says)."""

    passing: tuple[str, ...]
    reasons: Mapping[str, str]
    rooms: Mapping[str, int | Fraction]
    least_room: int | Fraction | None


class PlacementVerdicts:
    """Placement verdicts (node unschedulable, affinity and selector, taints) kept per pod
    placement and node, for a caller that filters many pods: pods made from one template
    place alike, and nodes change rarely, so most nodes are not looked at again. A verdict
    holds while the node is the same object (an informer replaces a node it sees change).
    Owned by its caller (the scheduler); at most ``max_placements`` placements are kept."""

    def __init__(self, max_placements: int = 256) -> None:
        self.max_placements = max_placements
        self._by_placement: dict[str, dict[str, tuple[Mapping[str, Any], str]]] = {}
        self._passes: dict[int, tuple[dict[str, tuple[Mapping[str, Any], str]], Mapping[str, Mapping[str, Any]], PlacementPass]] = {}
        """id of a placement's verdicts -> (those verdicts, the nodes mapping, its pass)."""

    def placement_pass(self, kept: dict[str, tuple[Mapping[str, Any], str]], nodes: Mapping[str, Mapping[str, Any]]) -> PlacementPass | None:
        """The pass of the placement ``kept`` belongs to over ``nodes``, when it was made over
        this very mapping (a cache hands out the same one until a node changes)."""
        hit = self._passes.get(id(kept))
        if hit is not None and hit[0] is kept and hit[1] is nodes:
            return hit[2]
        return None

    def remember_pass(self, kept: dict[str, tuple[Mapping[str, Any], str]], nodes: Mapping[str, Mapping[str, Any]], made: PlacementPass) -> None:
        if len(self._passes) >= self.max_placements:
            self._passes.clear()
        self._passes[id(kept)] = (kept, nodes, made)  # holding ``kept`` keeps its id unique

    def for_pod(self, pod: Mapping[str, Any]) -> dict[str, tuple[Mapping[str, Any], str]]:
        """node name -> (the node, its verdict), for the pods that place like ``pod``."""
        sp = ob.spec(pod)
        required = ((sp.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        key = json.dumps([sp.get("tolerations"), sp.get("nodeSelector"), required], sort_keys=True, separators=(",", ":"))
        verdicts = self._by_placement.get(key)
        if verdicts is None:
            if len(self._by_placement) >= self.max_placements:
                self._by_placement.clear()
            verdicts = self._by_placement[key] = {}
        return verdicts


class PodFit:
    """:func:`node_verdict` for one pod over many nodes: the placement side read once
    (``nodefilter.PlacementCheck``) and the pod's requests parsed once. ``placements``: the
    caller's kept verdicts (:class:`PlacementVerdicts`)."""

    def __init__(
        self,
        pod: Mapping[str, Any],
        *,
        claim_selectors: Sequence[Mapping[str, Any]] = (),
        dra_backed: frozenset[str] = frozenset(),
        need: Resources | None = None,
        placements: PlacementVerdicts | None = None,
    ) -> None:
        self.check = nodefilter.PlacementCheck(pod, claim_selectors)
        self.dra_backed = dra_backed
        self.need = pod_requests(pod) if need is None else need
        self._kept = placements.for_pod(pod) if placements is not None else None

    def _placement(self, node: Mapping[str, Any], name: str | None) -> str:
        kept = self._kept
        if kept is None:
            return self.check.placement(node)
        name = ob.name(node) if name is None else name
        hit = kept.get(name)
        if hit is not None and hit[0] is node:
            return hit[1]
        why = self.check.placement(node)
        kept[name] = (node, why)
        return why

    def verdict(self, node: Mapping[str, Any], used: Resources = NO_USE, have: Resources | None = None, *, name: str | None = None) -> str:
        """Why the pod cannot go to ``node`` ("" when it can); ``have``: the node's
        allocatable when the caller keeps it parsed; ``name``: the node's, when known."""
        why = self._placement(node, name)
        if why:
            return why
        need = self.need
        have = node_allocatable(node) if have is None else have
        if have.pods is not None and (used.pods or 0) + 1 > have.pods:
            return "Too many pods"
        if have.cpu is not None and need.cpu and (used.cpu or 0) + need.cpu > have.cpu:
            return "Insufficient cpu"
        if have.memory is not None and need.memory and (used.memory or 0) + need.memory > have.memory:
            return "Insufficient memory"
        for name, amount in need.scalars:
            capacity = have.scalar(name)
            if capacity <= 0 and name in self.dra_backed:
                continue  # served by DRA on this node: the solver decides
            if used.scalar(name) + amount > capacity:
                return f"Insufficient {name}"
        return self.check.claims(node)


def node_verdict(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    *,
    used: Resources = NO_USE,
    claim_selectors: Sequence[Mapping[str, Any]] = (),
    dra_backed: frozenset[str] = frozenset(),
    need: Resources | None = None,
) -> str:
    """Why ``pod`` cannot go to ``node`` ("" when it can), in the scheduler's words. ``need``:
    :func:`pod_requests` of ``pod``, when the caller has it.

    ``dra_backed`` names the extended resources some DeviceClass serves: on a node whose
    allocatable has none of such a resource, DRA decides (the special claim), not the node's
    capacity (upstream's ``shouldDelegateResourceToDRA``)."""
    return PodFit(pod, claim_selectors=claim_selectors, dra_backed=dra_backed, need=need).verdict(node, used)


def filter_nodes(
    pod: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
    *,
    used: Mapping[str, Resources],
    claims: Sequence[PodClaim] = (),
    dra_backed: frozenset[str] = frozenset(),
    allocatable: Callable[[Mapping[str, Any]], Resources] | None = None,
    placements: PlacementVerdicts | None = None,
    need: Resources | None = None,
) -> NodeFilter:
    """Candidate nodes for ``pod`` (everything but devices, which the solver decides).
    ``nodes``: the nodes, or the nodes by name; ``allocatable``: a node's allocatable
    resources, when the caller keeps them parsed; ``placements``: placement verdicts the
    caller keeps across pods; ``need``: :func:`pod_requests` of ``pod``, when the caller has it."""
    selectors = [ob.allocation(c.claim).get("nodeSelector") for c in claims if c.allocated]  # type: ignore[union-attr]
    fit = PodFit(pod, claim_selectors=[s for s in selectors if s], dra_backed=dra_backed, need=need, placements=placements)
    parse = allocatable or node_allocatable
    candidates: list[str] = []
    reasons: dict[str, str] = {}
    need, kept = fit.need, fit._kept
    if need.cpu or need.memory or need.scalars or kept is None or fit.check.has_claim_selectors:
        for name, node in _by_name(nodes):
            why = fit.verdict(node, used.get(name, NO_USE), parse(node), name=name)
            if why:
                reasons[name] = why
            else:
                candidates.append(name)
        return NodeFilter(tuple(candidates), reasons)
    # The common pod: placement verdicts kept per node object and nothing to count but the
    # pod itself, so :meth:`PodFit.verdict` inlined (the calls were half the filter's time).
    # Pods that place alike over the same nodes mapping (no node changed) reuse the last pass.
    made = placements.placement_pass(kept, nodes) if placements is not None and isinstance(nodes, Mapping) else None
    if made is None:
        made = _placement_pass(fit, kept, _by_name(nodes), parse)
        if placements is not None and isinstance(nodes, Mapping):
            placements.remember_pass(kept, nodes, made)
    reasons = dict(made.reasons)
    busiest = max((u.pods or 0 for u in used.values()), default=0)
    if made.least_room is None or busiest + 1 <= made.least_room:
        return NodeFilter(made.passing, reasons)  # no node near its pod limit: none looked at
    for name in made.passing:
        room, u = made.rooms.get(name), used.get(name)
        if room is not None and (0 if u is None else u.pods or 0) + 1 > room:
            reasons[name] = "Too many pods"
        else:
            candidates.append(name)
    return NodeFilter(tuple(candidates), reasons)


def _by_name(nodes: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    named = list(nodes.items()) if isinstance(nodes, Mapping) else [(ob.name(node), node) for node in nodes]
    named.sort(key=itemgetter(0))
    return named


def _placement_pass(fit: PodFit, kept: dict[str, tuple[Mapping[str, Any], str]], named: Sequence[tuple[str, Mapping[str, Any]]],
                    parse: Callable[[Mapping[str, Any]], Resources]) -> PlacementPass:
    passing: list[str] = []
    reasons: dict[str, str] = {}
    rooms: dict[str, int | Fraction] = {}
    for name, node in named:
        hit = kept.get(name)
        why = hit[1] if hit is not None and hit[0] is node else fit._placement(node, name)
        if why:
            reasons[name] = why
            continue
        passing.append(name)
        room = parse(node).pods
        if room is not None:
            rooms[name] = room
    return PlacementPass(tuple(passing), reasons, rooms, min(rooms.values(), default=None))


def least_allocated(candidates: Sequence[str], nodes: Mapping[str, Mapping[str, Any]], used: Mapping[str, Resources]) -> str:
    """The candidate with the most free CPU and memory (NodeResourcesFit's default score),
    ties broken by name; used when the solver has nothing to decide."""

    def free(name: str) -> tuple[Fraction, str]:
        have = node_allocatable(nodes.get(name) or {})
        u = used.get(name, Resources())
        shares = []
        if have.cpu:
            shares.append(1 - (u.cpu or 0) / have.cpu)
        if have.memory:
            shares.append(1 - (u.memory or 0) / have.memory)
        score = sum(shares, Fraction(0)) / len(shares) if shares else Fraction(1)
        return (-score, name)

    return min(candidates, key=free)


def used_resources(pods: Iterable[Mapping[str, Any]]) -> dict[str, Resources]:
    """What the pods bound to each node take (finished pods take nothing)."""
    out: dict[str, Resources] = {}
    for pod in pods:
        usage = pod_usage(pod)
        if usage is not None:
            out[usage[0]] = out.get(usage[0], Resources()).plus(usage[1])
    return out


def pod_usage(pod: Mapping[str, Any] | None) -> tuple[str, Resources] | None:
    """The node a pod takes resources on and what it takes there; None when it takes nothing
    (not bound, or finished)."""
    if pod is None:
        return None
    node = ob.pod_node(pod)
    if not node or ob.pod_terminal(pod):
        return None
    return node, pod_requests(pod)


class NodeUsage:
    """:func:`used_resources` kept up to date from pod events instead of recomputed from every
    pod for every attempt (parsing each pod's quantities on every attempt was a seventh of the
    scheduler's time with a thousand pods). Not thread-safe: the caller locks."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[str, Resources]] = {}
        self._nodes: dict[str, Resources] = {}

    def update(self, key: str, pod: Mapping[str, Any] | None) -> None:
        """The pod ``key`` is now ``pod`` (None: gone)."""
        self.put(key, pod_usage(pod))

    def put(self, key: str, new: tuple[str, Resources] | None) -> None:
        """The pod ``key`` takes ``new`` (node, requests) now (None: nothing): how a pod the
        scheduler assumed on a node is counted before the API shows it bound."""
        old = self._pods.pop(key, None)
        if old is not None:
            left = self._nodes[old[0]].minus(old[1])
            if left.pods == 0:
                del self._nodes[old[0]]
            else:
                self._nodes[old[0]] = left
        if new is not None:
            self._pods[key] = new
            self._nodes[new[0]] = self._nodes.get(new[0], Resources()).plus(new[1])

    def used(self) -> dict[str, Resources]:
        return dict(self._nodes)


# --- writing claims (PreBind) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteStep:
    kind: str
    """"done", "finalizer" (metadata update), "status" (status update) or "error"."""
    body: Obj | None = None
    """The object to send (finalizer) or the new status (status)."""
    message: str = ""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def write_step(claim: Mapping[str, Any], pod: Mapping[str, Any], allocation: Mapping[str, Any] | None, *,
               reference: Mapping[str, Any] | None = None) -> WriteStep:
    """The next write recording ``allocation`` (None: the claim was allocated before) and the
    pod's reservation on ``claim``, judged from the claim as it is now.

    The finalizer goes first in a metadata update of its own, so a claim is never allocated
    without protection from deletion; the allocation and the reservation then go together in
    one status update. An allocation found on the claim that is not ours means someone else
    won the race; the caller must give up and roll back. ``reference``: the ``reservedFor``
    entry to add when the consumer is not the pod itself (a PodGroup, for the group's claims).
    """
    if ob.deleting(claim):
        return WriteStep("error", message=f"claim {ob.key(claim)} got deleted in the meantime")
    current = ob.allocation(claim)
    if allocation is not None and current is not None and _canonical(current) != _canonical(allocation):
        return WriteStep("error", message=f"claim {ob.key(claim)} got allocated elsewhere in the meantime")
    if allocation is None and current is None:
        return WriteStep("error", message=f"claim {ob.key(claim)} is no longer allocated")
    if ob.is_reserved_for_pod(pod, claim) and (allocation is None or current is not None):
        return WriteStep("done")
    if allocation is not None and current is None and ob.DELETE_PROTECTION_FINALIZER not in ob.finalizers(claim):
        body = ob.deep_copy(dict(claim))
        body["metadata"]["finalizers"] = [*ob.finalizers(claim), ob.DELETE_PROTECTION_FINALIZER]
        return WriteStep("finalizer", body)
    status = ob.deep_copy(dict(ob.status(claim)))
    if allocation is not None:
        status["allocation"] = ob.deep_copy(dict(allocation))
    if not ob.is_reserved_for_pod(pod, claim):
        status["reservedFor"] = [*ob.reserved_for(claim), dict(reference) if reference is not None else ob.pod_reference(pod)]
    return WriteStep("status", status)


def rollback_status(claim: Mapping[str, Any], pod: Mapping[str, Any], *, clear_allocation: bool) -> Obj | None:
    """The claim's status without the pod's reservation and, if we allocated it and nobody
    else uses it now, without the allocation; None when there is nothing to undo."""
    entries = ob.reserved_for(claim)
    remaining = [dict(r) for r in entries if r.get("uid") != ob.uid(pod)]
    drop_allocation = clear_allocation and not remaining and ob.allocation(claim) is not None
    if len(remaining) == len(entries) and not drop_allocation:
        return None
    status = ob.deep_copy(dict(ob.status(claim)))
    if remaining:
        status["reservedFor"] = remaining
    else:
        status.pop("reservedFor", None)
    if drop_allocation:
        status.pop("allocation", None)
        status.pop("devices", None)
    return status


def _exclusive(result: Mapping[str, Any]) -> bool:
    """Admin access and shared (``shareID``) results never conflict."""
    return not result.get("adminAccess") and not result.get("shareID")


def device_name(device: tuple[str, str, str]) -> str:
    """``driver/pool/device``: unambiguous, as neither a driver nor a device name has a slash."""
    return "/".join(device)


def exclusive_devices(allocation: Mapping[str, Any]) -> list[str]:
    """The devices an allocation holds exclusively, as :func:`device_name`."""
    devices = allocation.get("devices")
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return [device_name(ob.device_id(r)) for r in results or [] if isinstance(r, Mapping) and _exclusive(r)]


def claim_devices(claim: Mapping[str, Any]) -> list[str]:
    """The index function of claims by the devices they hold exclusively."""
    return [device_name(ob.device_id(r)) for r in ob.allocated_devices(claim) if _exclusive(r)]


def conflicts_with(new: Mapping[str, Mapping[str, Any]], holders: Callable[[str], Iterable[str]]) -> list[str]:
    """Devices of the new allocations (claim key -> allocation) that another claim already
    holds exclusively, ``holders(device)`` naming the claims that hold a device; the claims in
    ``new`` themselves do not count (they are being written).

    The service's reservations already prevent this; checking our own view too means a
    service with a stale or file-based inventory can never make us write a double allocation.
    """
    out: list[str] = []
    mine: dict[str, str] = {}
    for k in sorted(new):
        for device in exclusive_devices(new[k]):
            holder = next((h for h in sorted(holders(device)) if h not in new), None) or mine.get(device)
            if holder is not None:
                out.append(f"device {device} of claim {k} is already allocated to claim {holder}")
            mine[device] = k
    return out


class DeviceHolders:
    """Device -> (pod, claim) for allocations in flight (written by no one yet), kept with
    them so the last check before assuming a pod costs what the pod asks for, not what the
    cluster holds. Not thread-safe: the caller locks."""

    def __init__(self) -> None:
        self._holders: dict[str, tuple[str, str]] = {}

    def add(self, pod: str, allocations: Mapping[str, Mapping[str, Any]]) -> None:
        for claim, allocation in allocations.items():
            for device in exclusive_devices(allocation):
                self._holders[device] = (pod, claim)

    def remove(self, allocations: Mapping[str, Mapping[str, Any]]) -> None:
        for claim, allocation in allocations.items():
            for device in exclusive_devices(allocation):
                if self._holders.get(device, ("", ""))[1] == claim:
                    del self._holders[device]

    def holder(self, device: str) -> tuple[str, str] | None:
        """(pod, claim) holding ``device`` in flight, if any."""
        return self._holders.get(device)


# --- pod status -----------------------------------------------------------------------------------


def unschedulable_patch(pod: Mapping[str, Any], message: str, *, now: float) -> Obj | None:
    """Strategic-merge patch setting PodScheduled=False/Unschedulable with ``message``; None
    when the pod already says exactly that (no write, no event storm)."""
    for cond in ob.status(pod).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            if cond.get("status") == "False" and cond.get("reason") == "Unschedulable" and cond.get("message") == message:
                return None
            break
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": ob.format_time(now),
    }
    return {"metadata": {"uid": ob.uid(pod)}, "status": {"conditions": [condition]}}


def binding(pod: Mapping[str, Any], node: str) -> Obj:
    """The Binding the pods/binding subresource takes (with the pod's UID as precondition)."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": ob.name(pod), "namespace": ob.namespace(pod), "uid": ob.uid(pod)},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
