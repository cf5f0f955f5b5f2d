"""The decoder's limits: no input reaches a RecursionError, an alias bomb or an unbounded
object list; each is invalid input with a message saying which limit, and where."""

from __future__ import annotations

import io
import json
import sys
import tracemalloc
from pathlib import Path

import pytest

from dra_solver.model.decode import DEFAULT_LIMITS, DecodeLimits, decode_text, parse_documents
from dra_solver.model.errors import InvalidInput
from dra_solver.model.quantity import QuantityError, parse_quantity_field
from dra_solver.service.files import read_text
from tests.model._docs import device, resource_slice

# The classic "billion laughs": 9 levels of 9 aliases, 9^9 values once expanded.
ALIAS_BOMB = "\n".join(
    [f'a0: &a0 [{", ".join(["lol"] * 9)}]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
) + "\n"


def _error(text: str, *, limits: DecodeLimits = DEFAULT_LIMITS) -> str:
    with pytest.raises(InvalidInput) as info:
        parse_documents(text, source="in", limits=limits)
    return str(info.value)


@pytest.mark.parametrize("depth", [101, 500, 100_000])
def test_deep_yaml_nesting_is_refused_before_python_recurses(depth: int) -> None:
    flow = "a: " + "[" * depth + "]" * depth
    block = "".join(f"{'  ' * i}k:\n" for i in range(min(depth, 2_000))) + "  " * 2_000 + "v: 1\n"
    # Ours at 100 levels; libyaml's own guard (1000) may speak first on absurd input.
    assert _error(flow) in (
        "in: cannot parse YAML: line 1, column 103: nesting is deeper than 100 levels",
        "in: cannot parse YAML: line 1, column 1003: exceeded maximum nesting depth",
    )
    assert "nesting is deeper than 100 levels" in _error(block)


@pytest.mark.parametrize("depth", [101, 500, 100_000])
def test_deep_json_nesting_is_refused_before_python_recurses(depth: int) -> None:
    text = '{"kind": ' + "[" * depth + "]" * depth + "}"
    assert _error(text) == "in: cannot parse JSON: nesting is deeper than 100 levels"


def test_brackets_inside_json_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"kind": "DeviceClass", "metadata": {"name": "x", "annotations": {"a": "[" * 500}}})
    [doc] = parse_documents(text)
    assert doc["metadata"]["annotations"]["a"] == "[" * 500


@pytest.mark.parametrize("inside", ["plain", '\\"', '\\\\', '\\"' + "[" * 200, "{[" * 200 + '\\"'])
def test_escaped_quotes_and_brackets_inside_json_strings_are_measured_as_text(inside: str) -> None:
    """The depth is measured in C on the text without its strings: an escaped quote must not
    end a string early, brackets in a string are text, and real nesting around it still counts."""
    shallow = '{"kind": "DeviceClass", "a": [["' + inside + '"]]}'
    assert parse_documents(shallow)[0]["a"][0][0] == json.loads(shallow)["a"][0][0]
    deep = '{"kind": ' + "[" * 100 + '"' + inside + '"' + "]" * 100 + "}"
    assert _error(deep) == "in: cannot parse JSON: nesting is deeper than 100 levels"
    assert parse_documents(deep, limits=DecodeLimits(max_depth=101))


def test_nesting_up_to_the_limit_is_fine() -> None:
    value = "[" * 99 + "]" * 99
    assert parse_documents(f"a: {value}") == [{"a": json.loads(value)}]


@pytest.mark.parametrize("depth", [100, 101])
def test_json_exactly_at_and_one_past_the_limit(depth: int) -> None:
    """No more opening brackets than the limit cannot nest deeper: the count decides alone;
    one more and the brackets are measured."""
    text = '{"kind": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    if depth <= 100:
        assert parse_documents(text) == [json.loads(text)]
    else:
        assert _error(text) == "in: cannot parse JSON: nesting is deeper than 100 levels"


def test_the_alias_bomb_is_refused_while_parsing_not_after_expanding() -> None:
    assert len(ALIAS_BOMB) < 500
    # Refused at the line where the expansion passes the limit (9^6 > 100,000): nothing after
    # it was even parsed.
    assert _error(ALIAS_BOMB) == "in: cannot parse YAML: line 6, column 10: aliases expand to more than 100000 values"


def test_aliases_within_the_limit_work_and_are_counted() -> None:
    text = "base: &b {x: 1, y: [1, 2]}\none: *b\ntwo: *b\n"
    assert parse_documents(text) == [{"base": {"x": 1, "y": [1, 2]}, "one": {"x": 1, "y": [1, 2]}, "two": {"x": 1, "y": [1, 2]}}]
    # base is 7 values (the mapping, its two keys, 1, the list and its two items): the two
    # aliases add 14.
    assert "aliases expand to more than 13 values" in _error(text, limits=DecodeLimits(max_alias_values=13))
    parse_documents(text, limits=DecodeLimits(max_alias_values=14))


def test_an_alias_cannot_nest_past_the_depth_limit() -> None:
    text = "deep: &d " + "[" * 60 + "]" * 60 + "\nagain: [[*d]]\n"
    assert "nesting is deeper than 62 levels" in _error(text, limits=DecodeLimits(max_depth=62))
    parse_documents(text, limits=DecodeLimits(max_depth=63))


def test_merge_keys_still_work() -> None:
    text = "base: &b {x: 1, y: 2}\nuse: {<<: *b, y: 3}\n"
    assert parse_documents(text)[0]["use"] == {"x": 1, "y": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("? {a: 1}\n: b\n", "line 1, column 3: a mapping or list cannot be a mapping key"),
        ("? [a]\n: b\n", "line 1, column 3: a mapping or list cannot be a mapping key"),
        ("1: b\n", "line 1, column 1: mapping keys must be strings, not a number"),
        ("null: b\n", "line 1, column 1: mapping keys must be strings, not null"),
        ("a: *nowhere\n", "line 1, column 4: unknown anchor 'nowhere'"),
        ("a: !!binary aGVsbG8=\n", "line 1, column 4: unsupported tag tag:yaml.org,2002:binary"),
        ("a: !!python/object:os.system {}\n", "line 1, column 4: unsupported tag tag:yaml.org,2002:python/object:os.system"),
        ("a: " + "9" * 5000 + "\n", f"line 1, column 4: a number has more than {sys.get_int_max_str_digits()} digits"),
    ],
    ids=["mapping-key", "list-key", "number-key", "null-key", "unknown-anchor", "binary", "python-tag", "huge-int"],
)
def test_structures_json_cannot_hold_are_clean_yaml_errors(text: str, message: str) -> None:
    assert _error(text) == f"in: cannot parse YAML: {message}"


def test_lone_surrogates_are_refused() -> None:
    assert _error('{"kind": "DeviceClass", "metadata": {"name": "\\ud800"}}') == (
        'in: cannot parse JSON: string "\\ud800" holds a lone surrogate, which is not valid Unicode'
    )
    assert _error('{"kind": "DeviceClass", "metadata": {"\\udfff": 1}}').startswith("in: cannot parse JSON: string")
    assert _error("kind: DeviceClass\nname: \ud800\n") == "in: invalid Unicode at character 24: lone surrogate"
    # A correctly paired surrogate escape is one character and fine.
    [doc] = parse_documents('{"kind": "DeviceClass", "metadata": {"name": "\\ud83d\\ude00"}}')
    assert doc["metadata"]["name"] == "\U0001f600"


def test_huge_json_integers_are_clean_errors() -> None:
    assert "a number has more than" in _error('{"a": ' + "9" * 5000 + "}")


def test_input_size_and_object_count_are_bounded() -> None:
    docs = "---\n".join(json.dumps({"kind": "DeviceClass", "metadata": {"name": f"c{i}"}}) + "\n" for i in range(3))
    assert _error(docs, limits=DecodeLimits(max_objects=2)) == "in: more than 2 objects in one input"
    assert _error(docs, limits=DecodeLimits(max_chars=10)) == f"in: input is {len(docs)} characters: must be at most 10"
    listed = json.dumps({"kind": "List", "items": [{"kind": "DeviceClass", "metadata": {"name": f"c{i}"}} for i in range(3)]})
    assert _error(listed, limits=DecodeLimits(max_objects=2)) == "in: more than 2 objects in one input"


def test_reading_a_small_file_costs_little_memory(tmp_path: Path) -> None:
    """Reading is bounded by the size limit without setting that much aside first (one read
    of the whole 64 Mi limit cost 64 MiB for every file, however small: the CLI fuzz
    campaign's memory bound found it)."""
    path = tmp_path / "small.yaml"
    path.write_text("kind: DeviceClass\n")
    tracemalloc.start()
    try:
        text = read_text(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text == "kind: DeviceClass\n"
    assert peak < 1 << 20, f"{peak / (1 << 20):.1f} MiB to read 18 bytes"
    # The limit still holds, for files and for stdin.
    big = tmp_path / "big.yaml"
    big.write_text("#" * 300_000)
    with pytest.raises(InvalidInput, match="larger than 200000 characters"):
        read_text(str(big), limits=DecodeLimits(max_chars=200_000))
    with pytest.raises(InvalidInput, match="larger than 200000 characters"):
        read_text("-", stdin=io.StringIO("#" * 300_000), limits=DecodeLimits(max_chars=200_000))
    assert read_text("-", stdin=io.StringIO("#" * 200_000), limits=DecodeLimits(max_chars=200_000)) == "#" * 200_000


@pytest.mark.parametrize(
    ("written", "accepted"),
    [("7", "7"), (" 7 ", "7"), ("7\u00a0", "7"), ("\u30007Gi", "7Gi")],
)
def test_quantities_trim_the_blanks_the_api_server_trims(written: str, accepted: str) -> None:
    [obj] = decode_text(json.dumps(resource_slice([device(capacity={"memory": {"value": written}})])))
    assert obj.to_api()["spec"]["devices"][0]["capacity"]["memory"]["value"] == accepted


@pytest.mark.parametrize("written", ["7\n", "\t7", "7\r\n", "7\u2028", "7 Gi"])
def test_quantities_with_blanks_json_escapes_are_rejected_as_the_api_server_does(written: str) -> None:
    # The API server trims the raw JSON text, where a newline is the two characters "\n".
    with pytest.raises(InvalidInput, match=r"capacity\[memory\]\.value: Invalid value: .*quantities must match"):
        decode_text(json.dumps(resource_slice([device(capacity={"memory": {"value": written}})])))
    with pytest.raises(QuantityError):
        parse_quantity_field(written)


def test_one_quantity_parser_for_fields_validation_and_the_kubelet_plugin() -> None:
    from dra_solver.kubeletplugin.simconfig import parse_int_quantity
    from dra_solver.model.validation import parse_quantity_value

    for text in ("7\n", "x"):
        assert parse_int_quantity(text) is None
        with pytest.raises(ValueError, match="quantities must match"):
            parse_quantity_value(text)
    q = parse_int_quantity(" 80Gi ")
    assert q is not None and str(q) == "80Gi"
    assert parse_quantity_value(" 80Gi ") == 80 * 2**30
