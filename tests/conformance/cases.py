"""Load the shared allocator cases (upstream conformance and real-world) and compare answers.

API:
- ``case_paths(kind) -> list[Path]``: ``kind`` is ``"conformance"`` or ``"realworld"`` (the
  cases live in tests/data; never empty).
- ``load_case(path) -> Case``: the JSON as written (objects still raw).
- ``Case.to_request(allocator=...) -> AllocationRequest``: decoded objects with API defaults,
  feature gates, already-allocated devices/shares/capacity as ``Inventory.extra_allocated``.
  Raises ``InvalidInput`` for objects that do not decode (the real-world "invalid" outcome).
- ``compare_results(case, results) -> list[str]``: differences between our results and
  upstream's (empty = equal): devices of a claim in any order for ``matcher`` cases, in order
  for ``exact`` ones; shareIDs compared by presence; quantities canonically.
- ``matchers(case) -> list[str]``: ``matcher``/``exact`` per claim from ``index.tsv``.

Why a shared helper: the backtracking and CP-SAT suites and the differential tests all replay
the same cases, and must read them identically.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from dra_solver.model import objects as o
from dra_solver.model.allocation import (
    AllocatedState,
    AllocationRequest,
    AllocatorName,
    DeviceID,
    Inventory,
)
from dra_solver.model.decode import ValidationMode, decode_object
from dra_solver.model.features import FeatureGates
from dra_solver.model.validation import validate_object
from tests.conftest import DATA_DIR


def case_paths(kind: str) -> list[Path]:
    paths = sorted((DATA_DIR / kind / "cases").glob("*.json"))
    assert paths, f"no {kind} cases in {DATA_DIR / kind / 'cases'}"
    return paths


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    raw: dict[str, Any]

    @property
    def outcome(self) -> str:
        return str(self.raw["expect"]["outcome"])

    @property
    def error(self) -> str:
        return str(self.raw["expect"].get("error") or "")

    @property
    def expected_results(self) -> list[dict[str, Any]]:
        return list(self.raw["expect"].get("results") or [])

    @property
    def expected_steps(self) -> int | None:
        steps = self.raw.get("expectedAllocateOneInvocations")
        return int(steps) if steps is not None else None

    @property
    def gates(self) -> FeatureGates:
        return FeatureGates.from_mapping(self.raw.get("features") or {})

    def to_request(
        self, *, allocator: AllocatorName = "backtracking", time_limit: float | None = 10.0
    ) -> AllocationRequest:
        raw = self.raw
        source = f"{self.kind}/{self.name}"
        # Upstream's test objects come straight from Go structs, never through the API server,
        # and are not all valid: read them as --validate=ignore does. Real-world objects were
        # published by drivers (some still in older shapes, hence warn, not strict), and API
        # validation rejecting one is the "invalid" outcome.
        mode: ValidationMode = "ignore" if self.kind == "conformance" else "warn"
        node = decode_object(raw["node"], source=source, validate=mode)
        assert isinstance(node, o.Node)
        classes = tuple(_decode(raw.get("classes"), o.DeviceClass, source, mode))
        slices = tuple(_decode(raw.get("slices"), o.ResourceSlice, source, mode))
        claims = tuple(_decode(raw.get("claims"), o.ResourceClaim, source, mode))
        rules = tuple(_decode(raw.get("taintRules"), o.DeviceTaintRule, source, mode))
        if self.kind != "conformance":
            # A published slice the API server would refuse makes the case "invalid", unless the
            # claim is itself broken: the recorded answer is then upstream's error for the claim.
            problems = [p for s in slices for p in validate_object(s, selector_check=None)]
            claim_broken = any(validate_object(c, selector_check=None) for c in claims)
            if problems and not claim_broken:
                raise problems[0]
        inventory = Inventory(
            classes=classes,
            slices=slices,
            taint_rules=rules,
            nodes=(node,),
            extra_allocated=allocated_state(raw),
        )
        return AllocationRequest(
            claims=claims,
            node=node,
            inventory=inventory,
            gates=self.gates,
            allocator=allocator,
            time_limit=time_limit,
        )


def _decode(
    docs: Sequence[dict[str, Any]] | None, kind: type[o.TypedObject], source: str, mode: ValidationMode
) -> list[Any]:
    out = []
    for doc in docs or []:
        obj = decode_object(doc, source=source, validate=mode)
        assert isinstance(obj, kind), (
            f"{source}: expected {kind.__name__}, got {type(obj).__name__}"
        )
        out.append(obj)
    return out


def allocated_state(raw: dict[str, Any]) -> AllocatedState:
    from dra_solver.model.quantity import parse_quantity

    devices = frozenset(
        DeviceID(d["driver"], d["pool"], d["device"]) for d in raw.get("allocatedDevices") or []
    )
    shared = frozenset(
        (DeviceID(d["driver"], d["pool"], d["device"]), str(d.get("shareID") or ""))
        for d in raw.get("allocatedSharedDevices") or []
    )
    capacity: dict[DeviceID, dict[str, Any]] = {}
    for entry in raw.get("allocatedCapacity") or []:
        mine = capacity.setdefault(DeviceID(entry["driver"], entry["pool"], entry["device"]), {})
        for name, text in (entry.get("capacity") or {}).items():
            amount = parse_quantity(text)
            mine[name] = mine[name].add(amount) if name in mine else amount
    return AllocatedState(devices=devices, shared=shared, capacity=capacity)


def load_case(path: Path) -> Case:
    raw = json.loads(path.read_text())
    return Case(name=str(raw.get("name") or path.stem), kind=path.parent.parent.name, raw=raw)


@cache
def _index() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    lines = (DATA_DIR / "conformance" / "index.tsv").read_text().splitlines()
    for line in lines[1:]:
        cols = line.split("\t")
        if len(cols) >= 7 and cols[6] != "-":
            out[cols[0]] = cols[6].split(",")
    return out


def matchers(case: Case) -> list[str]:
    return _index().get(case.name, ["matcher"] * len(case.expected_results))


def error_substring(case: Case) -> str:
    if case.kind != "conformance":
        return ""
    for line in (DATA_DIR / "conformance" / "index.tsv").read_text().splitlines()[1:]:
        cols = line.split("\t")
        if cols[0] == case.name and len(cols) >= 6:
            return cols[5]
    return ""


def error_matches(case: Case, message: str) -> bool:
    """Whether our error says what upstream's did.

    Conformance cases: upstream's own assertion (the substring in ``index.tsv``; the full texts
    there come from upstream's fake class lister for the not-found cases). Real-world cases:
    the very same text.
    """
    if case.kind == "conformance":
        return error_substring(case) in message
    return message == case.error


# --- comparing ------------------------------------------------------------------------------


def compare_results(case: Case, results: Sequence[o.AllocationResult]) -> list[str]:
    expected = case.expected_results
    if len(expected) != len(results):
        return [f"expected {len(expected)} results, got {len(results)}"]
    modes = matchers(case)
    problems: list[str] = []
    for i, (want, got) in enumerate(zip(expected, results, strict=True)):
        unordered = (modes[i] if i < len(modes) else "matcher") != "exact"
        a = _normalize(want, unordered=unordered)
        b = _normalize(got.to_api(), unordered=unordered)
        if a != b:
            problems.append(
                f"claim #{i}:\n  want {json.dumps(a, sort_keys=True)}\n  got  {json.dumps(b, sort_keys=True)}"
            )
    return problems


def device_sets(results: Sequence[dict[str, Any]]) -> list[list[tuple[str, str, str, str]]]:
    """(request, driver, pool, device) per claim, sorted: what "the same devices" means."""
    out = []
    for result in results:
        items = ((result.get("devices") or {}).get("results")) or []
        out.append(sorted((r["request"], r["driver"], r["pool"], r["device"]) for r in items))
    return out


def _normalize(result: dict[str, Any], *, unordered: bool) -> dict[str, Any]:
    from dra_solver.model.quantity import parse_quantity

    result = json.loads(json.dumps(result))
    result.pop("allocationTimestamp", None)
    devices = result.get("devices") or {}
    items = []
    for item in devices.get("results") or []:
        item = {k: v for k, v in item.items() if v not in (None, [], {})}
        if "shareID" in item:
            item["shareID"] = "<present>"
        if "consumedCapacity" in item:
            item["consumedCapacity"] = {
                k: parse_quantity(v).canonical() for k, v in item["consumedCapacity"].items()
            }
        items.append(item)
    if unordered:
        items.sort(key=lambda r: json.dumps(r, sort_keys=True))
    normalized: dict[str, Any] = {"results": items}
    configs = devices.get("config") or []
    if configs:
        normalized["config"] = [
            {k: v for k, v in c.items() if v not in (None, [])} for c in configs
        ]
    selector = result.get("nodeSelector")
    if selector:
        terms = []
        for term in selector.get("nodeSelectorTerms") or []:
            norm_term = {}
            for key in ("matchExpressions", "matchFields"):
                reqs = [
                    {
                        "key": r.get("key"),
                        "operator": r.get("operator"),
                        "values": sorted(r.get("values") or []),
                    }
                    for r in term.get(key) or []
                ]
                if unordered:
                    reqs.sort(key=lambda r: json.dumps(r, sort_keys=True))
                if reqs:
                    norm_term[key] = reqs
            terms.append(norm_term)
        normalized["nodeSelector"] = terms
    return normalized


# --- CEL --------------------------------------------------------------------------------------


def cel_environment(gates: FeatureGates) -> Any:
    """A ``model.cel.CelEnvironment`` with the CEL features the gates imply (as upstream's test
    runner builds its cache: consumable capacity and list-type attributes follow the gates)."""
    import dataclasses

    from dra_solver.model import cel

    features_type: Any = getattr(cel, "CelFeatures", None)
    if features_type is None or not dataclasses.is_dataclass(features_type):
        return cel.CelEnvironment()
    wanted = {
        "consumable_capacity": gates.consumable_capacity,
        "list_type_attributes": gates.list_type_attributes,
    }
    names = {f.name for f in dataclasses.fields(features_type)}
    kwargs = {}
    for name in names:
        for key, value in wanted.items():
            if key in name:
                kwargs[name] = value
    factory: Any = features_type
    return cel.CelEnvironment(features=factory(**kwargs))
