"""The pure core of dra-solver: objects in, allocations out. No I/O, no clocks, no threads.

This is the package's front door: code outside ``dra_solver.model`` imports these names (and
the API types of ``dra_solver.model.objects``) and nothing else; every other module of the
package is internal (an import-linter contract in pyproject.toml enforces it, and the layers
inside the package; docs/architecture.md draws them).

Allocate on one node (``model.allocators``; the contract of upstream's ``Allocator``):
- ``allocate(request, *, cel=None, validate=True) -> AllocationOutcome``: allocated (one
  result per claim), or not allocated (``reason``: the claims do not fit on this node); raises
  ``InvalidInput(s)`` (an object fails API validation), ``NodeLocalError`` (fails on this node
  only, other nodes may fit), ``AllocationError`` (stops the attempt on every node) or
  ``SolveTimeout``.
- ``allocate_cpsat(request, *, cel, fast_path=True)``: the CP-SAT allocator alone, without
  API validation; ``default_cel(request)``; ``warm_up()``: import and set up OR-Tools now, so
  the first solve does not wait for it (reported solve times never include it either way).
- ``AllocationRequest``, ``AllocationOutcome``, ``SolveStats``, ``Inventory``,
  ``AllocatedState``, ``DeviceID``, ``FeatureGates``, ``AllocatorName``/``ALLOCATORS``,
  ``Policy``/``POLICIES``/``DEFAULT_POLICY``/``checked_policy``, ``DeviceParseCache``.
- ``check_allocation(request, outcome, *, cel, pools=None) -> list[Violation]``: the independent
  validator (``PoolCache``: pools gathered once for many checks on the same objects);
  ``first_available_score(claims, results)``.

Choose a node (``model.schedule``): ``choose_node(claims, candidates, *, index, options,
attempt, in_flight, ...) -> NodeChoice`` over a ``NodeIndex`` (``model.node_index``: per
snapshot, what each node reaches, fingerprints of equal nodes, pruning counts, node
preference); ``NodeChoiceOptions``, ``NodeAttempt``, ``NodeVerdict``, ``ScheduleStats``,
``GroupVerdict``, ``InFlight``, ``VerdictCache`` and ``AnswerCache`` of ``KnownAnswer``s
(what the caller provides), ``PoolKey``,
``NodeView``, ``state_key``, ``invalid_pools_error``; node load (``NodeUnits``, ``node_key``).
Node states up to names (``model.node_state``): ``claim_reads`` (the attributes claims can
read, ``ALL`` when unsure), ``NodeShape``, ``state_signature``, ``device_mapping`` and
``remap_results`` (an answer found on one node, written with another node's names).

Explain a node (``model.explain``): ``explain_node(request, *, cel, holders, solve=None) ->
ExplainAnswer`` with ``Restriction`` reasons and fixes, from the allocation model itself (one
encoding of the rules, a switch per rule instance); ``summarize``; ``headline`` (the first
blocking reason, one line, of ``Worded`` reasons); ``RESERVED_HOLDER``; ``NO_FIX``.

Place a PodGroup whole (``model.group``): ``schedule_group(request, *, cel=None,
solve=None) -> GroupOutcome`` over a ``GroupRequest`` (``GroupPod``, ``NodeRoom``,
``GroupPath``/``GROUP_PATHS``, ``MAX_GROUP_PODS``); the answer's ``PodPlacement``,
``GroupObjective``, ``GroupStats``, ``GroupExplanation`` (``GroupReason``, ``DomainVerdict``);
``check_group(request, outcome, *, cel)``: the validator for groups. Pods and nodes as JSON
(``model.podfit``): ``pod_requests``/``PodRequests``, ``node_room``, ``node_filter``, ``PlacementCheck``, ``tolerates_node_taint``,
``candidate_nodes``, ``fits_room``. PodGroups and their pods as JSON (``model.podgroup``):
``gang_min_count``, ``podgroup_problems``, ``podgroup_ref``, ``shared_entry``,
``generated_name``, ``resolve_group`` -> ``ResolvedGroup`` (``ResolvedPod``) and
``podgroup_request`` (the ``GroupRequest`` of a resolved group), ``PODGROUP_API_VERSION``,
``POD_CLAIM_ANNOTATION``, ``PODGROUP_CLAIM_ANNOTATION``.

Objects: decoding (``decode_object``, ``decode_metadata``, ``decode_all``, ``decode_text``, ``parse_documents``,
``iter_documents``, ``decode_document`` and ``DOCUMENT_API_VERSIONS`` (Pods and PodGroups from
users' files, read as documents), ``describe_document``, ``check_fields``, ``fields_clean``, ``without_devices``, ``check_mode``,
``ValidationMode``, ``VALIDATION_MODES``, ``DecodeLimits``, ``DEFAULT_LIMITS``); API validation (``validate_object``, ``validate_claim_metadata``, ``validate_objects``, ``validate_document``,
``ValidationMemo``, ``default_selector_check``, ``SelectorCheck``, ``dns1123_label_errors``,
``dns1123_subdomain_errors``); quantities (``Quantity``, ``Format``, ``parse_quantity``,
``parse_quantity_field``, ``QuantityError``); CEL (``CelEnvironment``, ``CelFeatures``,
``CelDevice``, ``CelCompileError``, ``CelRuntimeError``); taints (``tolerates``,
``BLOCKING_EFFECTS``); node selectors (``node_selector_matches``, ``NodeSelectorError``);
capacities (``CapacitySpec``).

Errors (``model.errors``): ``DraSolverError`` ⊃ ``InvalidInput`` (⊃ ``StrictDecodingError``),
``InvalidInputs``, ``AllocationError`` (⊃ ``NodeLocalError``), ``SolveTimeout``;
``FieldPath``, ``format_field_path``.
"""

from dra_solver.model.allocation import (
    ALLOCATORS,
    AllocationOutcome,
    AllocationRequest,
    AllocatorName,
)
from dra_solver.model.allocators import allocate, allocate_cpsat, default_cel, warm_up
from dra_solver.model.capacity import CapacitySpec
from dra_solver.model.cel import (
    CelCompileError,
    CelDevice,
    CelEnvironment,
    CelFeatures,
    CelRuntimeError,
    CompiledSelector,
)
from dra_solver.model.check import PoolCache, Violation, check_allocation, check_group
from dra_solver.model.cluster import AllocatedState, DeviceID, Inventory
from dra_solver.model.decode import (
    DEFAULT_LIMITS,
    DOCUMENT_API_VERSIONS,
    PODGROUP_API_VERSION,
    VALIDATION_MODES,
    DecodeLimits,
    ValidationMode,
    check_fields,
    check_mode,
    decode_all,
    decode_document,
    decode_metadata,
    decode_object,
    decode_text,
    describe_document,
    field_problems,
    fields_clean,
    iter_documents,
    json_value_at,
    parse_documents,
    without_devices,
)
from dra_solver.model.errors import (
    QUOTED_CHARS,
    AllocationError,
    DraSolverError,
    FieldPath,
    InvalidInput,
    InvalidInputs,
    NodeLocalError,
    SolveTimeout,
    StrictDecodingError,
    format_field_path,
    quote,
)
from dra_solver.model.explain import (
    NO_FIX,
    RESERVED_HOLDER,
    ExplainAnswer,
    Restriction,
    Worded,
    explain_node,
    headline,
    summarize,
)
from dra_solver.model.features import FeatureGates, gate_value
from dra_solver.model.flight_order import FlightOrder, with_changes
from dra_solver.model.group import schedule_group
from dra_solver.model.group_request import (
    GROUP_PATHS,
    MAX_GROUP_PODS,
    DomainVerdict,
    GroupExplanation,
    GroupObjective,
    GroupOutcome,
    GroupPath,
    GroupPod,
    GroupReason,
    GroupRequest,
    GroupStats,
    NodeRoom,
    PodPlacement,
)
from dra_solver.model.node_index import NodeIndex, NodeView, PoolKey, state_key
from dra_solver.model.node_load import NodeUnits, node_key
from dra_solver.model.node_state import (
    ALL,
    AttributeReads,
    NodeShape,
    claim_reads,
    device_mapping,
    remap_results,
    state_signature,
)
from dra_solver.model.podfit import (
    NOT_MATCHED,
    UNREACHABLE_DEVICES,
    PlacementCheck,
    PodRequests,
    candidate_nodes,
    fits_room,
    node_filter,
    node_room,
    pod_requests,
    tolerates_node_taint,
)
from dra_solver.model.podgroup import (
    POD_CLAIM_ANNOTATION,
    PODGROUP_CLAIM_ANNOTATION,
    ResolvedGroup,
    ResolvedPod,
    gang_min_count,
    generated_name,
    podgroup_problems,
    podgroup_ref,
    resolve_group,
    shared_entry,
)
from dra_solver.model.podgroup import group_request as podgroup_request
from dra_solver.model.policy import DEFAULT_POLICY, POLICIES, Policy, checked_policy
from dra_solver.model.pools import DeviceParseCache, NodeSelectorError, node_selector_matches
from dra_solver.model.quantity import (
    Format,
    Quantity,
    QuantityError,
    parse_quantity,
    parse_quantity_field,
)
from dra_solver.model.schedule import (
    AnswerCache,
    GroupVerdict,
    InFlight,
    KnownAnswer,
    NodeAttempt,
    NodeChoice,
    NodeChoiceOptions,
    NodeVerdict,
    ScheduleStats,
    VerdictCache,
    choose_node,
    claims_key,
    invalid_pools_error,
    is_too_few_free,
    too_few_free_reason,
)
from dra_solver.model.score import first_available_score
from dra_solver.model.stats import SolveStats
from dra_solver.model.taints import BLOCKING_EFFECTS, tolerates
from dra_solver.model.validation import (
    SelectorCheck,
    ValidationMemo,
    default_selector_check,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    qualified_name_errors,
    validate_claim_metadata,
    validate_document,
    validate_object,
    validate_objects,
)

__all__ = [
    "ALL",
    "ALLOCATORS",
    "BLOCKING_EFFECTS",
    "DEFAULT_LIMITS",
    "DEFAULT_POLICY",
    "DOCUMENT_API_VERSIONS",
    "GROUP_PATHS",
    "MAX_GROUP_PODS",
    "NOT_MATCHED",
    "NO_FIX",
    "PODGROUP_API_VERSION",
    "PODGROUP_CLAIM_ANNOTATION",
    "POD_CLAIM_ANNOTATION",
    "POLICIES",
    "QUOTED_CHARS",
    "RESERVED_HOLDER",
    "UNREACHABLE_DEVICES",
    "VALIDATION_MODES",
    "AllocatedState",
    "AllocationError",
    "AllocationOutcome",
    "AllocationRequest",
    "AllocatorName",
    "AnswerCache",
    "AttributeReads",
    "CapacitySpec",
    "CelCompileError",
    "CelDevice",
    "CelEnvironment",
    "CelFeatures",
    "CelRuntimeError",
    "CompiledSelector",
    "DecodeLimits",
    "DeviceID",
    "DeviceParseCache",
    "DomainVerdict",
    "DraSolverError",
    "ExplainAnswer",
    "FeatureGates",
    "FieldPath",
    "FlightOrder",
    "Format",
    "GroupExplanation",
    "GroupObjective",
    "GroupOutcome",
    "GroupPath",
    "GroupPod",
    "GroupReason",
    "GroupRequest",
    "GroupStats",
    "GroupVerdict",
    "InFlight",
    "InvalidInput",
    "InvalidInputs",
    "Inventory",
    "KnownAnswer",
    "NodeAttempt",
    "NodeChoice",
    "NodeChoiceOptions",
    "NodeIndex",
    "NodeLocalError",
    "NodeRoom",
    "NodeSelectorError",
    "NodeShape",
    "NodeUnits",
    "NodeVerdict",
    "NodeView",
    "PlacementCheck",
    "PodPlacement",
    "PodRequests",
    "Policy",
    "PoolCache",
    "PoolKey",
    "Quantity",
    "QuantityError",
    "ResolvedGroup",
    "ResolvedPod",
    "Restriction",
    "ScheduleStats",
    "SelectorCheck",
    "SolveStats",
    "SolveTimeout",
    "StrictDecodingError",
    "ValidationMemo",
    "ValidationMode",
    "VerdictCache",
    "Violation",
    "Worded",
    "allocate",
    "allocate_cpsat",
    "candidate_nodes",
    "check_allocation",
    "check_fields",
    "check_group",
    "check_mode",
    "checked_policy",
    "choose_node",
    "claim_reads",
    "claims_key",
    "decode_all",
    "decode_document",
    "decode_metadata",
    "decode_object",
    "decode_text",
    "default_cel",
    "default_selector_check",
    "describe_document",
    "device_mapping",
    "dns1123_label_errors",
    "dns1123_subdomain_errors",
    "explain_node",
    "field_problems",
    "fields_clean",
    "first_available_score",
    "fits_room",
    "format_field_path",
    "gang_min_count",
    "gate_value",
    "generated_name",
    "headline",
    "invalid_pools_error",
    "is_too_few_free",
    "iter_documents",
    "json_value_at",
    "node_filter",
    "node_key",
    "node_room",
    "node_selector_matches",
    "parse_documents",
    "parse_quantity",
    "parse_quantity_field",
    "pod_requests",
    "podgroup_problems",
    "podgroup_ref",
    "podgroup_request",
    "qualified_name_errors",
    "quote",
    "remap_results",
    "resolve_group",
    "schedule_group",
    "shared_entry",
    "state_key",
    "state_signature",
    "summarize",
    "tolerates",
    "tolerates_node_taint",
    "too_few_free_reason",
    "validate_claim_metadata",
    "validate_document",
    "validate_object",
    "validate_objects",
    "warm_up",
    "with_changes",
    "without_devices",
]
