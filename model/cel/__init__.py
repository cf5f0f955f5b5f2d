"""The DRA CEL environment behind one small interface.

Compile a selector with :meth:`CelEnvironment.compile` and evaluate it against a
:class:`CelDevice` with :meth:`CelEnvironment.matches`; errors are :class:`CelCompileError`
and :class:`CelRuntimeError` with upstream's messages. Which engine runs underneath is an
implementation detail (see ``docs/cel.md``).
"""

from dra_solver.model.cel.api import (
    CEL_COST_LIMIT_EXCEEDED,
    CEL_SELECTOR_EXPRESSION_MAX_COST,
    AttrValue,
    CacheStats,
    CelCompileError,
    CelDevice,
    CelError,
    CelFeatures,
    CelRuntimeError,
    CompiledSelector,
    DeviceKey,
    enhance_runtime_error,
    split_qualified_name,
)
from dra_solver.model.cel.environment import DEFAULT_ENGINE, ENGINES, CelEnvironment
from dra_solver.model.cel.reads import ALL, AttributeReads, attribute_reads

__all__ = [
    "ALL",
    "CEL_COST_LIMIT_EXCEEDED",
    "CEL_SELECTOR_EXPRESSION_MAX_COST",
    "DEFAULT_ENGINE",
    "ENGINES",
    "AttrValue",
    "AttributeReads",
    "CacheStats",
    "CelCompileError",
    "CelDevice",
    "CelEnvironment",
    "CelError",
    "CelFeatures",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceKey",
    "attribute_reads",
    "enhance_runtime_error",
    "split_qualified_name",
]
