from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ClaimStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLAIM_STATUS_UNSPECIFIED: _ClassVar[ClaimStatus]
    CLAIM_STATUS_ALLOCATED: _ClassVar[ClaimStatus]
    CLAIM_STATUS_UNSATISFIABLE: _ClassVar[ClaimStatus]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_FEASIBLE: _ClassVar[Verdict]
    VERDICT_UNSCHEDULABLE: _ClassVar[Verdict]
    VERDICT_NOT_EVALUATED: _ClassVar[Verdict]
CLAIM_STATUS_UNSPECIFIED: ClaimStatus
CLAIM_STATUS_ALLOCATED: ClaimStatus
CLAIM_STATUS_UNSATISFIABLE: ClaimStatus
VERDICT_UNSPECIFIED: Verdict
VERDICT_FEASIBLE: Verdict
VERDICT_UNSCHEDULABLE: Verdict
VERDICT_NOT_EVALUATED: Verdict

class SolveOptions(_message.Message):
    __slots__ = ("allocator", "policy", "feature_gates", "validate")
    ALLOCATOR_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    FEATURE_GATES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_FIELD_NUMBER: _ClassVar[int]
    allocator: str
    policy: str
    feature_gates: str
    validate: str
    def __init__(self, allocator: _Optional[str] = ..., policy: _Optional[str] = ..., feature_gates: _Optional[str] = ..., validate: _Optional[str] = ...) -> None: ...

class AllocateRequest(_message.Message):
    __slots__ = ("claims", "node", "objects", "options", "reserve", "reservation_ttl_seconds", "in_flight", "in_flight_complete")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedScalarFieldContainer[bytes]
    node: str
    objects: _containers.RepeatedScalarFieldContainer[bytes]
    options: SolveOptions
    reserve: bool
    reservation_ttl_seconds: float
    in_flight: _containers.RepeatedScalarFieldContainer[bytes]
    in_flight_complete: bool
    def __init__(self, claims: _Optional[_Iterable[bytes]] = ..., node: _Optional[str] = ..., objects: _Optional[_Iterable[bytes]] = ..., options: _Optional[_Union[SolveOptions, _Mapping]] = ..., reserve: _Optional[bool] = ..., reservation_ttl_seconds: _Optional[float] = ..., in_flight: _Optional[_Iterable[bytes]] = ..., in_flight_complete: _Optional[bool] = ...) -> None: ...

class ClaimAllocation(_message.Message):
    __slots__ = ("claim", "uid", "status", "allocation")
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    claim: str
    uid: str
    status: ClaimStatus
    allocation: bytes
    def __init__(self, claim: _Optional[str] = ..., uid: _Optional[str] = ..., status: _Optional[_Union[ClaimStatus, str]] = ..., allocation: _Optional[bytes] = ...) -> None: ...

class SolverStats(_message.Message):
    __slots__ = ("allocator", "status", "wall_seconds", "variables", "constraints", "steps", "objective", "best_bound", "gap", "policy", "parameters", "reused")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ALLOCATOR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    BEST_BOUND_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    REUSED_FIELD_NUMBER: _ClassVar[int]
    allocator: str
    status: str
    wall_seconds: float
    variables: int
    constraints: int
    steps: int
    objective: float
    best_bound: float
    gap: float
    policy: str
    parameters: _containers.ScalarMap[str, str]
    reused: bool
    def __init__(self, allocator: _Optional[str] = ..., status: _Optional[str] = ..., wall_seconds: _Optional[float] = ..., variables: _Optional[int] = ..., constraints: _Optional[int] = ..., steps: _Optional[int] = ..., objective: _Optional[float] = ..., best_bound: _Optional[float] = ..., gap: _Optional[float] = ..., policy: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ..., reused: _Optional[bool] = ...) -> None: ...

class AllocateResponse(_message.Message):
    __slots__ = ("allocated", "claims", "score", "reason", "stats", "node", "reservation", "inventory_generation")
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    allocated: bool
    claims: _containers.RepeatedCompositeFieldContainer[ClaimAllocation]
    score: int
    reason: str
    stats: SolverStats
    node: str
    reservation: Reservation
    inventory_generation: int
    def __init__(self, allocated: _Optional[bool] = ..., claims: _Optional[_Iterable[_Union[ClaimAllocation, _Mapping]]] = ..., score: _Optional[int] = ..., reason: _Optional[str] = ..., stats: _Optional[_Union[SolverStats, _Mapping]] = ..., node: _Optional[str] = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., inventory_generation: _Optional[int] = ...) -> None: ...

class ScheduleRequest(_message.Message):
    __slots__ = ("claims", "nodes", "options", "reserve", "reservation_ttl_seconds", "feasible_nodes_wanted", "pod", "in_flight", "in_flight_complete", "chosen_verdict_only")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_NODES_WANTED_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_VERDICT_ONLY_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedScalarFieldContainer[bytes]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    options: SolveOptions
    reserve: bool
    reservation_ttl_seconds: float
    feasible_nodes_wanted: int
    pod: str
    in_flight: _containers.RepeatedScalarFieldContainer[bytes]
    in_flight_complete: bool
    chosen_verdict_only: bool
    def __init__(self, claims: _Optional[_Iterable[bytes]] = ..., nodes: _Optional[_Iterable[str]] = ..., options: _Optional[_Union[SolveOptions, _Mapping]] = ..., reserve: _Optional[bool] = ..., reservation_ttl_seconds: _Optional[float] = ..., feasible_nodes_wanted: _Optional[int] = ..., pod: _Optional[str] = ..., in_flight: _Optional[_Iterable[bytes]] = ..., in_flight_complete: _Optional[bool] = ..., chosen_verdict_only: _Optional[bool] = ...) -> None: ...

class NodeVerdict(_message.Message):
    __slots__ = ("node", "verdict", "score", "reason")
    NODE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node: str
    verdict: Verdict
    score: int
    reason: str
    def __init__(self, node: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., score: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ScheduleStats(_message.Message):
    __slots__ = ("nodes_total", "nodes_evaluated", "nodes_pruned", "nodes_feasible", "groups", "solves", "cache_hits", "wall_seconds")
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NODES_EVALUATED_FIELD_NUMBER: _ClassVar[int]
    NODES_PRUNED_FIELD_NUMBER: _ClassVar[int]
    NODES_FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    SOLVES_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    nodes_total: int
    nodes_evaluated: int
    nodes_pruned: int
    nodes_feasible: int
    groups: int
    solves: int
    cache_hits: int
    wall_seconds: float
    def __init__(self, nodes_total: _Optional[int] = ..., nodes_evaluated: _Optional[int] = ..., nodes_pruned: _Optional[int] = ..., nodes_feasible: _Optional[int] = ..., groups: _Optional[int] = ..., solves: _Optional[int] = ..., cache_hits: _Optional[int] = ..., wall_seconds: _Optional[float] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ("node", "claims", "score", "nodes", "schedule_stats", "stats", "reservation", "reason", "inventory_generation")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_STATS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    node: str
    claims: _containers.RepeatedCompositeFieldContainer[ClaimAllocation]
    score: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeVerdict]
    schedule_stats: ScheduleStats
    stats: SolverStats
    reservation: Reservation
    reason: str
    inventory_generation: int
    def __init__(self, node: _Optional[str] = ..., claims: _Optional[_Iterable[_Union[ClaimAllocation, _Mapping]]] = ..., score: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeVerdict, _Mapping]]] = ..., schedule_stats: _Optional[_Union[ScheduleStats, _Mapping]] = ..., stats: _Optional[_Union[SolverStats, _Mapping]] = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., reason: _Optional[str] = ..., inventory_generation: _Optional[int] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ("id", "node", "claims", "expires_in_seconds", "pod", "nodes", "pod_group")
    ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    POD_GROUP_FIELD_NUMBER: _ClassVar[int]
    id: str
    node: str
    claims: _containers.RepeatedScalarFieldContainer[str]
    expires_in_seconds: float
    pod: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    pod_group: str
    def __init__(self, id: _Optional[str] = ..., node: _Optional[str] = ..., claims: _Optional[_Iterable[str]] = ..., expires_in_seconds: _Optional[float] = ..., pod: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., pod_group: _Optional[str] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ("claims", "node", "ttl_seconds", "pod", "in_flight", "in_flight_complete")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedScalarFieldContainer[bytes]
    node: str
    ttl_seconds: float
    pod: str
    in_flight: _containers.RepeatedScalarFieldContainer[bytes]
    in_flight_complete: bool
    def __init__(self, claims: _Optional[_Iterable[bytes]] = ..., node: _Optional[str] = ..., ttl_seconds: _Optional[float] = ..., pod: _Optional[str] = ..., in_flight: _Optional[_Iterable[bytes]] = ..., in_flight_complete: _Optional[bool] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("reservation",)
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    reservation: Reservation
    def __init__(self, reservation: _Optional[_Union[Reservation, _Mapping]] = ...) -> None: ...

class UnreserveRequest(_message.Message):
    __slots__ = ("reservation_id", "claims")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    claims: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reservation_id: _Optional[str] = ..., claims: _Optional[_Iterable[str]] = ...) -> None: ...

class UnreserveResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: int
    def __init__(self, released: _Optional[int] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("claims", "node", "objects", "options", "in_flight", "in_flight_complete")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedScalarFieldContainer[bytes]
    node: str
    objects: _containers.RepeatedScalarFieldContainer[bytes]
    options: SolveOptions
    in_flight: _containers.RepeatedScalarFieldContainer[bytes]
    in_flight_complete: bool
    def __init__(self, claims: _Optional[_Iterable[bytes]] = ..., node: _Optional[str] = ..., objects: _Optional[_Iterable[bytes]] = ..., options: _Optional[_Union[SolveOptions, _Mapping]] = ..., in_flight: _Optional[_Iterable[bytes]] = ..., in_flight_complete: _Optional[bool] = ...) -> None: ...

class Reason(_message.Message):
    __slots__ = ("kind", "claim", "request", "devices", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    claim: str
    request: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    message: str
    def __init__(self, kind: _Optional[str] = ..., claim: _Optional[str] = ..., request: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ..., message: _Optional[str] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("allocatable", "reasons", "fixes", "summary", "node", "minimal", "stats", "no_fix", "limit")
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    FIXES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    MINIMAL_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    NO_FIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    allocatable: bool
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    fixes: _containers.RepeatedCompositeFieldContainer[Reason]
    summary: str
    node: str
    minimal: bool
    stats: SolverStats
    no_fix: bool
    limit: str
    def __init__(self, allocatable: _Optional[bool] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., fixes: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., summary: _Optional[str] = ..., node: _Optional[str] = ..., minimal: _Optional[bool] = ..., stats: _Optional[_Union[SolverStats, _Mapping]] = ..., no_fix: _Optional[bool] = ..., limit: _Optional[str] = ...) -> None: ...

class GetInventoryRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInventoryResponse(_message.Message):
    __slots__ = ("source", "ready", "generation", "objects", "nodes", "reservations", "invalid_pools", "problems", "problem_count")
    class ObjectsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    INVALID_POOLS_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    source: str
    ready: bool
    generation: int
    objects: _containers.ScalarMap[str, int]
    nodes: int
    reservations: int
    invalid_pools: _containers.RepeatedCompositeFieldContainer[InvalidPool]
    problems: _containers.RepeatedCompositeFieldContainer[InventoryProblem]
    problem_count: int
    def __init__(self, source: _Optional[str] = ..., ready: _Optional[bool] = ..., generation: _Optional[int] = ..., objects: _Optional[_Mapping[str, int]] = ..., nodes: _Optional[int] = ..., reservations: _Optional[int] = ..., invalid_pools: _Optional[_Iterable[_Union[InvalidPool, _Mapping]]] = ..., problems: _Optional[_Iterable[_Union[InventoryProblem, _Mapping]]] = ..., problem_count: _Optional[int] = ...) -> None: ...

class InvalidPool(_message.Message):
    __slots__ = ("driver", "pool", "reason")
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    driver: str
    pool: str
    reason: str
    def __init__(self, driver: _Optional[str] = ..., pool: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class InventoryProblem(_message.Message):
    __slots__ = ("source", "kind", "name", "detail", "invalid_pool")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    INVALID_POOL_FIELD_NUMBER: _ClassVar[int]
    source: str
    kind: str
    name: str
    detail: str
    invalid_pool: str
    def __init__(self, source: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., detail: _Optional[str] = ..., invalid_pool: _Optional[str] = ...) -> None: ...

class GroupPod(_message.Message):
    __slots__ = ("name", "claims", "shared_claims", "nodes", "cpu_millis", "memory_bytes", "nodes_given")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    SHARED_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NODES_GIVEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    claims: _containers.RepeatedScalarFieldContainer[bytes]
    shared_claims: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    cpu_millis: int
    memory_bytes: int
    nodes_given: bool
    def __init__(self, name: _Optional[str] = ..., claims: _Optional[_Iterable[bytes]] = ..., shared_claims: _Optional[_Iterable[str]] = ..., nodes: _Optional[_Iterable[str]] = ..., cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., nodes_given: _Optional[bool] = ...) -> None: ...

class NodeRoom(_message.Message):
    __slots__ = ("node", "cpu_millis", "memory_bytes", "pods")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    node: str
    cpu_millis: int
    memory_bytes: int
    pods: int
    def __init__(self, node: _Optional[str] = ..., cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., pods: _Optional[int] = ...) -> None: ...

class TopologyDomain(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ScheduleGroupRequest(_message.Message):
    __slots__ = ("pod_group", "pods", "shared_claims", "min_count", "topology_key", "nodes", "options", "reserve", "reservation_ttl_seconds", "objects", "path")
    POD_GROUP_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    SHARED_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    MIN_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_KEY_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    pod_group: str
    pods: _containers.RepeatedCompositeFieldContainer[GroupPod]
    shared_claims: _containers.RepeatedScalarFieldContainer[bytes]
    min_count: int
    topology_key: str
    nodes: _containers.RepeatedCompositeFieldContainer[NodeRoom]
    options: SolveOptions
    reserve: bool
    reservation_ttl_seconds: float
    objects: _containers.RepeatedScalarFieldContainer[bytes]
    path: str
    def __init__(self, pod_group: _Optional[str] = ..., pods: _Optional[_Iterable[_Union[GroupPod, _Mapping]]] = ..., shared_claims: _Optional[_Iterable[bytes]] = ..., min_count: _Optional[int] = ..., topology_key: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[NodeRoom, _Mapping]]] = ..., options: _Optional[_Union[SolveOptions, _Mapping]] = ..., reserve: _Optional[bool] = ..., reservation_ttl_seconds: _Optional[float] = ..., objects: _Optional[_Iterable[bytes]] = ..., path: _Optional[str] = ...) -> None: ...

class PodPlacement(_message.Message):
    __slots__ = ("name", "node", "claims", "score")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    name: str
    node: str
    claims: _containers.RepeatedCompositeFieldContainer[ClaimAllocation]
    score: int
    def __init__(self, name: _Optional[str] = ..., node: _Optional[str] = ..., claims: _Optional[_Iterable[_Union[ClaimAllocation, _Mapping]]] = ..., score: _Optional[int] = ...) -> None: ...

class DomainVerdict(_message.Message):
    __slots__ = ("value", "nodes", "pods_placeable", "reason")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    PODS_PLACEABLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    value: str
    nodes: int
    pods_placeable: int
    reason: str
    def __init__(self, value: _Optional[str] = ..., nodes: _Optional[int] = ..., pods_placeable: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class GroupExplanation(_message.Message):
    __slots__ = ("closest", "pods_placeable", "min_count", "reasons", "domains", "summary", "minimal")
    CLOSEST_FIELD_NUMBER: _ClassVar[int]
    PODS_PLACEABLE_FIELD_NUMBER: _ClassVar[int]
    MIN_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MINIMAL_FIELD_NUMBER: _ClassVar[int]
    closest: TopologyDomain
    pods_placeable: int
    min_count: int
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    domains: _containers.RepeatedCompositeFieldContainer[DomainVerdict]
    summary: str
    minimal: bool
    def __init__(self, closest: _Optional[_Union[TopologyDomain, _Mapping]] = ..., pods_placeable: _Optional[int] = ..., min_count: _Optional[int] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., domains: _Optional[_Iterable[_Union[DomainVerdict, _Mapping]]] = ..., summary: _Optional[str] = ..., minimal: _Optional[bool] = ...) -> None: ...

class ScheduleGroupStats(_message.Message):
    __slots__ = ("domains_total", "domains_evaluated", "domains_feasible", "node_classes", "pod_classes", "patterns", "path", "solves", "wall_seconds")
    DOMAINS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_EVALUATED_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    NODE_CLASSES_FIELD_NUMBER: _ClassVar[int]
    POD_CLASSES_FIELD_NUMBER: _ClassVar[int]
    PATTERNS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SOLVES_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    domains_total: int
    domains_evaluated: int
    domains_feasible: int
    node_classes: int
    pod_classes: int
    patterns: int
    path: str
    solves: int
    wall_seconds: float
    def __init__(self, domains_total: _Optional[int] = ..., domains_evaluated: _Optional[int] = ..., domains_feasible: _Optional[int] = ..., node_classes: _Optional[int] = ..., pod_classes: _Optional[int] = ..., patterns: _Optional[int] = ..., path: _Optional[str] = ..., solves: _Optional[int] = ..., wall_seconds: _Optional[float] = ...) -> None: ...

class ScheduleGroupResponse(_message.Message):
    __slots__ = ("placed", "domain", "pods", "shared_claims", "score", "pods_placed", "stats", "group_stats", "reservation", "explanation", "reason", "inventory_generation")
    PLACED_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    SHARED_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PODS_PLACED_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    GROUP_STATS_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    placed: bool
    domain: TopologyDomain
    pods: _containers.RepeatedCompositeFieldContainer[PodPlacement]
    shared_claims: _containers.RepeatedCompositeFieldContainer[ClaimAllocation]
    score: int
    pods_placed: int
    stats: SolverStats
    group_stats: ScheduleGroupStats
    reservation: Reservation
    explanation: GroupExplanation
    reason: str
    inventory_generation: int
    def __init__(self, placed: _Optional[bool] = ..., domain: _Optional[_Union[TopologyDomain, _Mapping]] = ..., pods: _Optional[_Iterable[_Union[PodPlacement, _Mapping]]] = ..., shared_claims: _Optional[_Iterable[_Union[ClaimAllocation, _Mapping]]] = ..., score: _Optional[int] = ..., pods_placed: _Optional[int] = ..., stats: _Optional[_Union[SolverStats, _Mapping]] = ..., group_stats: _Optional[_Union[ScheduleGroupStats, _Mapping]] = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., explanation: _Optional[_Union[GroupExplanation, _Mapping]] = ..., reason: _Optional[str] = ..., inventory_generation: _Optional[int] = ...) -> None: ...

class ScheduleBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[ScheduleRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[ScheduleRequest, _Mapping]]] = ...) -> None: ...

class ScheduleBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScheduleBatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ScheduleBatchResult, _Mapping]]] = ...) -> None: ...

class ScheduleBatchResult(_message.Message):
    __slots__ = ("status", "response", "warnings")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    status: _status_pb2.Status
    response: ScheduleResponse
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., response: _Optional[_Union[ScheduleResponse, _Mapping]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...
