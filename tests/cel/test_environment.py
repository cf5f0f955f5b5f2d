"""``CelEnvironment``: caches, statistics, error objects, and every real-world selector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.model.cel import (
    CelCompileError,
    CelDevice,
    CelEnvironment,
    CelFeatures,
    CelRuntimeError,
    enhance_runtime_error,
    split_qualified_name,
)
from dra_solver.model.errors import DraSolverError
from dra_solver.model.quantity import parse_quantity
from dra_solver.model.semver import parse_semver
from tests.conftest import DATA_DIR


def _expressions(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "cel" and isinstance(value, dict) and isinstance(value.get("expression"), str):
                found.add(value["expression"])
            else:
                _expressions(value, found)
    elif isinstance(node, list):
        for value in node:
            _expressions(value, found)


def _realworld_expressions() -> list[str]:
    found: set[str] = set()
    for path in sorted((DATA_DIR / "realworld").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            _expressions(doc, found)
    return sorted(found)


def _conformance_expressions() -> list[str]:
    found: set[str] = set()
    for path in sorted((DATA_DIR / "conformance" / "cases").glob("*.json")):
        case = json.loads(Path(path).read_text())
        _expressions([case["classes"], case["claims"]], found)
    return sorted(found)


def test_every_realworld_selector_compiles() -> None:
    expressions = _realworld_expressions()
    assert len(expressions) >= 90
    env = CelEnvironment()
    for expression in expressions:
        env.compile(expression)


def test_every_conformance_selector_compiles_except_the_broken_one() -> None:
    env = CelEnvironment()
    expressions = _conformance_expressions()
    assert "noSuchVar" in expressions
    for expression in expressions:
        if expression == "noSuchVar":
            with pytest.raises(CelCompileError, match="undeclared reference"):
                env.compile(expression)
        else:
            env.compile(expression)


def test_errors_carry_upstream_detail() -> None:
    env = CelEnvironment()
    with pytest.raises(CelCompileError) as compile_error:
        env.compile("noSuchVar")
    assert compile_error.value.detail == str(compile_error.value) == (
        "compilation failed: ERROR: <input>:1:1: undeclared reference to 'noSuchVar' (in container '')\n"
        " | noSuchVar\n | ^"
    )
    assert isinstance(compile_error.value, DraSolverError)
    device = CelDevice("gpu.example.com", {"model": "x"}, {})
    with pytest.raises(CelRuntimeError) as runtime_error:
        env.compile('device.attributes["gpu.example.com"].index == 0').matches(device)
    assert str(runtime_error.value) == runtime_error.value.detail == "no such key: index"
    assert enhance_runtime_error(runtime_error.value.detail) == (
        "no such key: index. consider using CEL optional chaining (.? followed by orValue()) "
        "or guarding the check with has() for optional fields"
    )
    assert enhance_runtime_error("division by zero") == "division by zero"


def test_caches_and_stats() -> None:
    env = CelEnvironment()
    selector = env.compile('device.attributes["gpu.example.com"].model == "a"')
    assert env.compile('device.attributes["gpu.example.com"].model == "a"') is selector
    for _ in range(2):
        with pytest.raises(CelCompileError):
            env.compile("1 +")
    a1 = CelDevice("gpu.example.com", {"model": "a"}, {"memory": parse_quantity("1Gi")})
    a2 = CelDevice("gpu.example.com", {"model": "a"}, {"memory": parse_quantity("1073741824000m")})
    b = CelDevice("gpu.example.com", {"model": "b"}, {})
    assert a1.key() != a2.key()  # equal values, different forms: CEL can tell them apart
    assert a1.key() == CelDevice("gpu.example.com", {"model": "a"}, {"memory": parse_quantity("1024Mi")}).key()
    assert env.matches(selector, a1) and env.matches(selector, a1) and env.matches(selector, a2)
    assert not selector.matches(b)
    missing = env.compile('device.attributes["gpu.example.com"].missing')
    for _ in range(2):
        with pytest.raises(CelRuntimeError, match="no such key: missing"):
            missing.matches(b)
    stats = env.stats
    assert (stats.compile_hits, stats.compile_misses) == (2, 3)
    assert (stats.match_hits, stats.match_misses) == (2, 4)
    assert stats.compile_entries == 3 and stats.match_entries == 4
    assert 0 < stats.match_hit_ratio < 1 and 0 < stats.compile_hit_ratio < 1


def test_caches_are_bounded_and_per_environment() -> None:
    env = CelEnvironment(cache_size=2, match_cache_size=3)
    other = CelEnvironment()
    device = CelDevice("d", {}, {})
    for i in range(5):
        assert env.compile(f"{i} == {i}").matches(device)
    assert env.stats.compile_entries == 2 and env.stats.match_entries == 3
    assert other.stats.compile_entries == 0
    # a selector from another environment is recompiled here, not trusted
    assert other.matches(env.compile("1 == 1"), device)
    assert other.stats.compile_misses == 1


def test_device_key_distinguishes_cel_types() -> None:
    assert CelDevice("d", {"a": True}, {}).key() != CelDevice("d", {"a": 1}, {}).key()
    assert CelDevice("d", {"a": (1,)}, {}).key() != CelDevice("d", {"a": 1}, {}).key()
    assert CelDevice("d", {"a": 1, "b": 2}, {}).key() == CelDevice("d", {"b": 2, "a": 1}, {}).key()
    assert CelDevice("d", {"v": parse_semver("1.0.0+a")}, {}).key() == CelDevice("d", {"v": parse_semver("1.0.0+b")}, {}).key()
    assert CelDevice("d", {}, {}, True).key() != CelDevice("d", {}, {}, None).key()
    assert hash(CelDevice("d", {"a": 1}, {}).key())


def test_split_qualified_name() -> None:
    assert split_qualified_name("model", "gpu.example.com") == ("gpu.example.com", "model")
    assert split_qualified_name("dra.net/rdma", "gpu.example.com") == ("dra.net", "rdma")


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown CEL engine 'nope'"):
        CelEnvironment(engine="nope")


def test_features_are_per_environment() -> None:
    off = CelEnvironment(features=CelFeatures(consumable_capacity=False, list_type_attributes=False))
    on = CelEnvironment()
    for expression in ("device.allowMultipleAllocations", 'device.attributes["d"].x.includes(1)'):
        on.compile(expression)
        with pytest.raises(CelCompileError):
            off.compile(expression)
    assert on.features == CelFeatures() and off.cost_limit == 1_000_000 and on.engine == "cel-expr-python"


def test_non_string_expression() -> None:
    with pytest.raises(CelCompileError, match="must be a string"):
        CelEnvironment().compile(None)  # type: ignore[arg-type]
