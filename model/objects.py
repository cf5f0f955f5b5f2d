"""resource.k8s.io/v1 objects as pydantic models.

These models read what ``kubectl get -o yaml|json`` prints (camelCase field names) and write
results back in the same form. Every field of the v1.37 API is declared, so that strict field
validation (``model.decode``) knows exactly which fields are unknown; fields we do not
interpret are typed ``Any`` (opaque), and with ``--validate=ignore`` unknown fields are kept
(``extra="allow"``) so a claim we allocate round-trips without losing anything. Structural decoding only happens here;
the API server's semantic rules and limits live in ``model.validation``, and the API server's
defaults are applied by :func:`apply_defaults` so that objects look as if they had been created
through the API.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from dra_solver.model.quantity import QuantityError, parse_quantity, trim_quantity_field

FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE = 8
"""``resourceapi.FirstAvailableDeviceRequestMaxSize``: subrequests per request, and the base of
the scheduler's FirstAvailable score (subrequest ``i`` scores ``8 - i``; ``model.score``)."""


def _quantity_text(value: Any) -> Any:
    """A quantity field as the API server's decoder reads it: blanks trimmed the same way and
    the value parsed, so a bad quantity is a decoding error (whatever ``--validate`` says) and
    every later parser sees clean text."""
    if isinstance(value, bool):
        return value  # let pydantic reject it as "not a string"
    if isinstance(value, int | float):
        # Quantities are strings in the API, but YAML authors often write bare numbers.
        try:
            value = str(value)
        except ValueError:  # an integer with more digits than Python prints
            raise PydanticCustomError("quantity", "quantity has too many digits") from None
    if isinstance(value, str):
        trimmed, problem = _checked_quantity(value)
        if problem:
            raise PydanticCustomError("quantity", "{reason}", {"reason": problem})
        return trimmed
    return value


@functools.lru_cache(maxsize=16_384)
def _checked_quantity(text: str) -> tuple[str, str]:
    """The trimmed text and why it is not a quantity ("" if it is), once per distinct text
    (an inventory repeats a few quantities on every device)."""
    trimmed = trim_quantity_field(text)
    try:
        parse_quantity(trimmed)
    except QuantityError as err:
        return trimmed, str(err)
    return trimmed, ""


QuantityText = Annotated[str, BeforeValidator(_quantity_text)]
"""A Kubernetes quantity exactly as written; ``model.quantity`` parses it."""

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
"""Every integer of the objects we type is an ``int64`` in the Go types: a larger number is an
error of the API server's decoder (``cannot unmarshal number ... of type int64``), not a value."""


class K8sModel(BaseModel):
    """Base for every API struct: camelCase aliases, unknown fields preserved."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        strict=False,
    )

    def to_api(self) -> dict[str, Any]:
        """The API (JSON) form: camelCase, unset fields omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's shallow copy, made in a few steps where ``update`` names declared fields
        only: a Schedule answer copies a handful of objects (a reused answer renamed for its
        node, a claim given its own metadata), and pydantic's general path for models that
        keep unknown fields took 3 µs each. Anything else takes pydantic's path."""
        cls = type(self)
        private = self.__pydantic_private__
        if deep or private is not None or (update and not cls.__pydantic_fields__.keys() >= update.keys()):
            return super().model_copy(update=update, deep=deep)
        copied = cls.__new__(cls)
        values = self.__dict__.copy()
        fields_set = set(self.__pydantic_fields_set__)
        if update:
            values.update(update)
            fields_set.update(update)
        extra = self.__pydantic_extra__
        _setattr(copied, "__dict__", values)
        _setattr(copied, "__pydantic_extra__", None if extra is None else dict(extra))
        _setattr(copied, "__pydantic_fields_set__", fields_set)
        _setattr(copied, "__pydantic_private__", None)
        return copied


_setattr = object.__setattr__


# --- metadata -------------------------------------------------------------------------------


class OwnerReference(K8sModel):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(K8sModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: Int64 | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    deletion_timestamp: str | None = None
    creation_timestamp: str | None = None
    # Declared for strict field validation; never interpreted.
    self_link: Any = None
    deletion_grace_period_seconds: Any = None
    managed_fields: Any = None


class TypedObject(K8sModel):
    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""

    @property
    def ref(self) -> str:
        """``namespace/name`` for namespaced objects, ``name`` otherwise."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def describe(self) -> str:
        """``ResourceClaim default/c1``: how error messages name this object."""
        return f"{self.kind or type(self).__name__} {self.ref}".strip()


# --- core/v1 bits used by DRA -----------------------------------------------------------------


class NodeSelectorRequirement(K8sModel):
    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class NodeSelectorTerm(K8sModel):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(K8sModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)


class Node(TypedObject):
    """Only the fields node selectors read (name, labels); spec and status are opaque."""

    kind: str = "Node"
    spec: Any = None
    status: Any = None


# --- DeviceClass ----------------------------------------------------------------------------


class CELDeviceSelector(K8sModel):
    expression: str = ""


class DeviceSelector(K8sModel):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(K8sModel):
    driver: str = ""
    parameters: Any = None


class DeviceClassConfiguration(K8sModel):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(K8sModel):
    selectors: list[DeviceSelector] | None = None
    config: list[DeviceClassConfiguration] | None = None
    extended_resource_name: str | None = None
    suitable_nodes: Any = None  # alpha, not interpreted


class DeviceClass(TypedObject):
    kind: str = "DeviceClass"
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# --- ResourceSlice --------------------------------------------------------------------------


class DeviceAttribute(K8sModel):
    """Exactly one of the scalar (or, with ListTypeAttributes, list) fields is set."""

    int_: Int64 | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None
    ints: list[Int64] | None = None
    bools: list[bool] | None = None
    strings: list[str] | None = None
    versions: list[str] | None = None

    def set_fields(self) -> list[str]:
        """API names of the value fields that are set (validation wants exactly one)."""
        names = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
        return [n for n in names if getattr(self, _ATTR_FIELD[n]) is not None]


_ATTR_FIELD = {
    "int": "int_",
    "bool": "bool_",
    "string": "string",
    "version": "version",
    "ints": "ints",
    "bools": "bools",
    "strings": "strings",
    "versions": "versions",
}


class CapacityRequestPolicyRange(K8sModel):
    min: QuantityText | None = None
    max: QuantityText | None = None
    step: QuantityText | None = None


class CapacityRequestPolicy(K8sModel):
    default: QuantityText | None = None
    valid_values: list[QuantityText] | None = None
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(K8sModel):
    value: QuantityText = "0"
    request_policy: CapacityRequestPolicy | None = None


class Counter(K8sModel):
    value: QuantityText = "0"


class CounterSet(K8sModel):
    name: str = ""
    counters: dict[str, Counter] = Field(default_factory=dict)


class DeviceCounterConsumption(K8sModel):
    counter_set: str = ""
    counters: dict[str, Counter] = Field(default_factory=dict)
    compatibility_groups: Any = None  # alpha, not interpreted


class DeviceTaint(K8sModel):
    key: str = ""
    value: str | None = None
    effect: str = ""
    time_added: str | None = None


class Device(K8sModel):
    name: str = ""
    attributes: dict[str, DeviceAttribute] | None = None
    capacity: dict[str, DeviceCapacity] | None = None
    consumes_counters: list[DeviceCounterConsumption] | None = None
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: list[DeviceTaint] | None = None
    binds_to_node: bool | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    allow_multiple_allocations: bool | None = None
    node_allocatable_resources: Any = None  # alpha, not interpreted
    node_allocatable_resource_mappings: Any = None  # alpha, not interpreted


class ResourcePool(K8sModel):
    name: str = ""
    generation: Int64 = 0
    resource_slice_count: Int64 = 0


class ResourceSliceSpec(K8sModel):
    driver: str = ""
    pool: ResourcePool = Field(default_factory=ResourcePool)
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] | None = None
    shared_counters: list[CounterSet] | None = None
    skip_node_operations: Any = None  # alpha, not interpreted
    partition_type_attribute: Any = None  # alpha, not interpreted


class ResourceSlice(TypedObject):
    kind: str = "ResourceSlice"
    spec: ResourceSliceSpec = Field(default_factory=ResourceSliceSpec)


# --- ResourceClaim --------------------------------------------------------------------------


class DeviceToleration(K8sModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: Int64 | None = None


class CapacityRequirements(K8sModel):
    requests: dict[str, QuantityText] | None = None


class DeviceSubRequest(K8sModel):
    name: str = ""
    device_class_name: str = ""
    selectors: list[DeviceSelector] | None = None
    allocation_mode: str | None = None
    count: Int64 | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None
    derived_attributes: Any = None  # alpha, not interpreted


class ExactDeviceRequest(K8sModel):
    device_class_name: str = ""
    selectors: list[DeviceSelector] | None = None
    allocation_mode: str | None = None
    count: Int64 | None = None
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None
    derived_attributes: Any = None  # alpha, not interpreted


class DeviceRequest(K8sModel):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = None


class DeviceConstraint(K8sModel):
    requests: list[str] | None = None
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaimConfiguration(K8sModel):
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(K8sModel):
    requests: list[DeviceRequest] | None = None
    constraints: list[DeviceConstraint] | None = None
    config: list[DeviceClaimConfiguration] | None = None


class ResourceClaimSpec(K8sModel):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)
    controller: Any = None  # alpha, not interpreted


class DeviceRequestAllocationResult(K8sModel):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[str, QuantityText] | None = None
    skip_node_operations: Any = None  # alpha, not interpreted


class DeviceAllocationConfiguration(K8sModel):
    source: str = ""
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(K8sModel):
    results: list[DeviceRequestAllocationResult] | None = None
    config: list[DeviceAllocationConfiguration] | None = None


class AllocationResult(K8sModel):
    devices: DeviceAllocationResult | None = None
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None
    controller: Any = None  # alpha, not interpreted


class ResourceClaimConsumerReference(K8sModel):
    api_group: str | None = None
    resource: str = ""
    name: str = ""
    uid: str = ""


class ResourceClaimStatus(K8sModel):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] | None = None
    devices: list[dict[str, Any]] | None = None
    deallocation_requested: Any = None  # alpha, not interpreted


class ResourceClaim(TypedObject):
    kind: str = "ResourceClaim"
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus | None = None

    @property
    def allocated(self) -> bool:
        return self.status is not None and self.status.allocation is not None


class ResourceClaimTemplateSpec(K8sModel):
    metadata: ObjectMeta | None = None
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(TypedObject):
    kind: str = "ResourceClaimTemplate"
    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)


# --- DeviceTaintRule ------------------------------------------------------------------------


class DeviceTaintSelector(K8sModel):
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    device_class_name: str | None = None
    selectors: list[DeviceSelector] | None = None


class DeviceTaintRuleSpec(K8sModel):
    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint = Field(default_factory=DeviceTaint)


class DeviceTaintRule(TypedObject):
    kind: str = "DeviceTaintRule"
    spec: DeviceTaintRuleSpec = Field(default_factory=DeviceTaintRuleSpec)
    status: Any = None


KubeObject = DeviceClass | ResourceSlice | ResourceClaim | ResourceClaimTemplate | DeviceTaintRule | Node

KIND_MODELS: dict[str, type[TypedObject]] = {
    "DeviceClass": DeviceClass,
    "ResourceSlice": ResourceSlice,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "DeviceTaintRule": DeviceTaintRule,
    "Node": Node,
}

RESOURCE_API_VERSIONS = (
    "resource.k8s.io/v1",
    "resource.k8s.io/v1beta2",
    "resource.k8s.io/v1alpha3",
)
"""API versions whose shape equals v1 for the kinds we read (DeviceTaintRule is alpha)."""

AllocationMode = Literal["ExactCount", "All"]
