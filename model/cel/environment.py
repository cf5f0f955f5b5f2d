"""``CelEnvironment``: compile DRA selectors once, evaluate each distinct device once.

The allocators evaluate the same few selectors against many devices, and devices of one
model usually carry identical attributes. The environment therefore keeps two caches, both
owned by the instance (nothing is shared between environments):

* compile cache: expression -> compiled selector or its compile error;
* match cache: (expression, device key) -> result or runtime error, where the key of a
  device is its driver, attributes, capacities and ``allowMultipleAllocations`` (names of
  devices and pools do not matter to a selector).

Errors are cached like results: compiling and evaluating are deterministic.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Protocol

from dra_solver.model.cel.api import (
    CEL_SELECTOR_EXPRESSION_MAX_COST,
    CacheStats,
    CelCompileError,
    CelDevice,
    CelError,
    CelFeatures,
    CelRuntimeError,
    CompiledSelector,
    DeviceKey,
)
from dra_solver.model.cel.ast import CheckedAst
from dra_solver.model.cel.cpp_engine import CppEngine
from dra_solver.model.cel.reads import AttributeReads, attribute_reads

__all__ = ["DEFAULT_ENGINE", "ENGINES", "CelEnvironment"]

DEFAULT_ENGINE: Final = "cel-expr-python"
ENGINES: Final = ("cel-expr-python",)
"""Engines this build knows (see docs/cel.md for the comparison with cel-python)."""

_DEFAULT_COMPILE_CACHE: Final = 1024
_DEFAULT_MATCH_CACHE: Final = 65536


class _Program(Protocol):
    @property
    def max_cost(self) -> int: ...

    @property
    def ast(self) -> CheckedAst: ...


class _Engine(Protocol):
    name: str

    def compile(self, expression: str) -> _Program: ...

    def evaluate(self, program: _Program, device: CelDevice) -> bool: ...


def _make_engine(name: str, features: CelFeatures, cost_limit: int) -> _Engine:
    if name == "cel-expr-python":
        engine: _Engine = CppEngine(features=features, cost_limit=cost_limit)  # type: ignore[assignment]
        return engine
    raise ValueError(f"unknown CEL engine {name!r} (known: {', '.join(ENGINES)})")


@dataclass(frozen=True, eq=False)
class _Selector:
    """What :meth:`CelEnvironment.compile` returns (implements ``CompiledSelector``)."""

    expression: str
    max_cost: int
    program: _Program
    environment: CelEnvironment
    reads: AttributeReads

    def matches(self, device: CelDevice) -> bool:
        return self.environment.matches(self, device)


class _LRU:
    """A bounded mapping that forgets the least recently used entry."""

    def __init__(self, size: int) -> None:
        self.size = max(size, 1)
        self.entries: OrderedDict[object, object] = OrderedDict()

    def get(self, key: object) -> tuple[bool, object]:
        if key in self.entries:
            self.entries.move_to_end(key)
            return True, self.entries[key]
        return False, None

    def put(self, key: object, value: object) -> None:
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


class CelEnvironment:
    """The DRA CEL environment with its caches; safe to share between threads."""

    def __init__(
        self,
        *,
        engine: str = DEFAULT_ENGINE,
        features: CelFeatures = CelFeatures(),  # noqa: B008 - frozen, so a safe default
        cost_limit: int = CEL_SELECTOR_EXPRESSION_MAX_COST,
        cache_size: int = _DEFAULT_COMPILE_CACHE,
        match_cache_size: int = _DEFAULT_MATCH_CACHE,
    ) -> None:
        self.features = features
        self.cost_limit = cost_limit
        self._engine = _make_engine(engine, features, cost_limit)
        self._compiled = _LRU(cache_size)
        self._matches = _LRU(match_cache_size)
        self._lock = threading.Lock()
        self._compile_hits = self._compile_misses = 0
        self._match_hits = self._match_misses = 0

    @property
    def engine(self) -> str:
        return self._engine.name

    def compile(self, expression: str) -> CompiledSelector:
        """Compile (or fetch from the cache); raises :class:`CelCompileError`."""
        if not isinstance(expression, str):
            raise CelCompileError("CEL expression must be a string")
        with self._lock:
            found, cached = self._compiled.get(expression)
            if found:
                self._compile_hits += 1
        if found:
            if isinstance(cached, CelCompileError):
                raise CelCompileError(cached.detail)
            assert isinstance(cached, _Selector)
            return cached
        result: _Selector | CelCompileError
        try:
            program = self._engine.compile(expression)
            result = _Selector(expression, program.max_cost, program, self, attribute_reads(program.ast))
        except CelCompileError as err:
            result = err
        with self._lock:
            self._compile_misses += 1
            self._compiled.put(expression, result)
        if isinstance(result, CelCompileError):
            raise CelCompileError(result.detail)
        return result

    def matches(self, selector: CompiledSelector, device: CelDevice) -> bool:
        """Whether ``device`` satisfies ``selector``; raises :class:`CelRuntimeError`."""
        if not isinstance(selector, _Selector) or selector.environment is not self:
            selector = self.compile(selector.expression)
            assert isinstance(selector, _Selector)
        key: tuple[str, DeviceKey] = (selector.expression, device.key())
        with self._lock:
            found, cached = self._matches.get(key)
            if found:
                self._match_hits += 1
        if found:
            if isinstance(cached, CelRuntimeError):
                raise CelRuntimeError(cached.detail)
            return bool(cached)
        outcome: bool | CelRuntimeError
        try:
            outcome = self._engine.evaluate(selector.program, device)
        except CelRuntimeError as err:
            outcome = err
        except CelError as err:  # an engine problem surfaces as a runtime error, never a crash
            outcome = CelRuntimeError(err.detail)
        with self._lock:
            self._match_misses += 1
            self._matches.put(key, outcome)
        if isinstance(outcome, CelRuntimeError):
            raise CelRuntimeError(outcome.detail)
        return outcome

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                compile_hits=self._compile_hits,
                compile_misses=self._compile_misses,
                match_hits=self._match_hits,
                match_misses=self._match_misses,
                compile_entries=len(self._compiled.entries),
                match_entries=len(self._matches.entries),
            )
