"""The public face of the DRA CEL layer: device input, features, errors, compiled selectors.

Everything the allocators, the validator and the service need from CEL is declared here, so
they never depend on which engine evaluates expressions (see ``model.cel.environment``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from dra_solver.model.errors import DraSolverError
from dra_solver.model.quantity import Quantity
from dra_solver.model.semver import Semver

__all__ = [
    "CEL_COST_LIMIT_EXCEEDED",
    "CEL_SELECTOR_EXPRESSION_MAX_COST",
    "NO_SUCH_KEY_HINT",
    "AttrValue",
    "CacheStats",
    "CelCompileError",
    "CelDevice",
    "CelError",
    "CelFeatures",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceKey",
    "enhance_runtime_error",
    "split_qualified_name",
]

CEL_SELECTOR_EXPRESSION_MAX_COST: Final = 1_000_000
"""``resourceapi.CELSelectorExpressionMaxCost``: the runtime cost limit of one evaluation."""

CEL_COST_LIMIT_EXCEEDED: Final = "operation cancelled: actual cost limit exceeded"
"""cel-go's runtime error text when an evaluation exceeds its cost limit."""

NO_SUCH_KEY_HINT: Final = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
    "with has() for optional fields"
)
"""What upstream's ``cel.EnhanceRuntimeError`` appends to a "no such key" error."""

AttrValue = (
    bool
    | int
    | str
    | Semver
    | tuple[bool, ...]
    | tuple[int, ...]
    | tuple[str, ...]
    | tuple[Semver, ...]
)
"""A device attribute value as CEL sees it (lists need the ListTypeAttributes gate)."""

DeviceKey = tuple[object, ...]


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    """``"domain/id"`` into its parts; a bare id belongs to the driver's domain."""
    domain, sep, ident = name.partition("/")
    if not sep:
        return driver, name
    return domain, ident


def _value_key(value: AttrValue) -> tuple[object, ...]:
    # bool is an int in Python: tag every value with its CEL type so True and 1 stay distinct.
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, Semver):
        return ("v", value.precedence_key())
    return ("l", tuple(_value_key(v) for v in value))


@dataclass(frozen=True, slots=True)
class CelDevice:
    """One device as a CEL selector sees it.

    ``attributes`` and ``capacity`` are keyed by the qualified names the driver published:
    a bare ``model`` (the driver's own domain) or ``domain/name``.
    """

    driver: str
    attributes: Mapping[str, AttrValue]
    capacity: Mapping[str, Quantity]
    allow_multiple_allocations: bool | None = None
    _key: DeviceKey = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Computed once: the match cache asks for it for every (selector, device) pair.
        key: DeviceKey = (
            self.driver,
            tuple(sorted((name, _value_key(v)) for name, v in self.attributes.items())),
            tuple(sorted((name, q.identity()) for name, q in self.capacity.items())),
            self.allow_multiple_allocations,
        )
        object.__setattr__(self, "_key", key)

    def key(self) -> DeviceKey:
        """Equal for devices that no selector can tell apart (used by the match cache)."""
        return self._key


@dataclass(frozen=True, slots=True)
class CelFeatures:
    """The feature gates that change the CEL environment.

    With a gate off, expressions that need it fail to compile, as when a cluster with that
    gate off validates a new object (upstream's ``NewExpressions`` environment):
    ``device.allowMultipleAllocations`` needs ConsumableCapacity; ``includes()`` and macros
    over attribute values need ListTypeAttributes. Upstream's allocator itself compiles with
    ``StoredExpressions`` (every field and function available whatever the gates), which is
    what the default, all gates on, reproduces.
    """

    consumable_capacity: bool = True
    list_type_attributes: bool = True


class CelError(DraSolverError):
    """Base of CEL errors; ``detail`` is upstream's message and ``str(err) == detail``."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


class CelCompileError(CelError):
    """The expression does not compile in the DRA environment (syntax, types, features)."""


class CelRuntimeError(CelError):
    """Evaluating against a device failed (missing key, overflow, cost limit, ...)."""


def enhance_runtime_error(detail: str) -> str:
    """Upstream's ``cel.EnhanceRuntimeError``: a hint appended to "no such key" errors."""
    if "no such key:" in detail and NO_SUCH_KEY_HINT not in detail:
        return detail + NO_SUCH_KEY_HINT
    return detail


class CompiledSelector(Protocol):
    """A compiled CEL selector bound to the environment that compiled it."""

    @property
    def expression(self) -> str: ...

    @property
    def max_cost(self) -> int:
        """Worst-case cost estimate, as the API server computes it when validating."""
        ...

    @property
    def reads(self) -> frozenset[tuple[str, str]] | None:
        """The ``(domain, name)`` attributes the expression can read, or None: any of them
        (``model.cel.reads``)."""
        ...

    def matches(self, device: CelDevice) -> bool:
        """Evaluate against ``device`` (cached); raises :class:`CelRuntimeError`."""
        ...


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Hit and miss counters of the compile and match caches (for metrics)."""

    compile_hits: int = 0
    compile_misses: int = 0
    match_hits: int = 0
    match_misses: int = 0
    compile_entries: int = 0
    match_entries: int = 0

    @property
    def compile_hit_ratio(self) -> float:
        total = self.compile_hits + self.compile_misses
        return self.compile_hits / total if total else 0.0

    @property
    def match_hit_ratio(self) -> float:
        total = self.match_hits + self.match_misses
        return self.match_hits / total if total else 0.0
