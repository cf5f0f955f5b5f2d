"""A large YAML text parsed in two parts at once (``iter_documents(parallel=...)``, issue 16):
the objects, their order and every error must be those of a single parse, wherever the split
falls. The other side is played here in-process (the shell's worker process has tests of its
own in tests/service/test_parse_worker.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import dra_solver.model.decode as decode
from dra_solver.model import (
    DEFAULT_LIMITS,
    DecodeLimits,
    InvalidInput,
    PartParse,
    YamlCounts,
    iter_documents,
    parse_yaml_part,
    yaml_split_point,
)


class InProcessPart:
    """``PartParse`` played here: parses its part when asked for the result."""

    def __init__(self, text: str, limits: DecodeLimits, *, fail: bool = False) -> None:
        self.text, self.limits, self.fail = text, limits, fail
        self.closed = False

    def result(self) -> tuple[int, Iterator[tuple[Any, int]]] | None:
        if self.fail:
            return None
        counts = YamlCounts()
        try:
            docs = list(parse_yaml_part(self.text, limits=self.limits, counts=counts))
        except Exception:
            return None
        return counts.alias_values, iter(docs)

    def close(self) -> None:
        self.closed = True


class Starter:
    def __init__(self, *, fail: bool = False) -> None:
        self.parts: list[InProcessPart] = []
        self.fail = fail

    def __call__(self, text: str, limits: DecodeLimits) -> PartParse:
        self.parts.append(InProcessPart(text, limits, fail=self.fail))
        return self.parts[-1]


def _doc(i: int) -> str:
    return f"kind: Node\nmetadata:\n  name: node-{i}\n  labels: {{zone: z{i % 3}}}\n"


# Documents a split must not cut or misread: block scalars holding "---" (indented), a "---"
# not followed by a blank, comments, empty documents, "..." markers, anchors and aliases,
# duplicate keys, a List, and documents started without "---".
TRICKY = "".join([
    "# a comment first\n",
    _doc(0),
    "---\n",
    "kind: Node\nmetadata:\n  name: block\n  annotations:\n    text: |\n      ---\n      not a document\n    folded: >-\n      ---x\n",
    "--- # a comment after the marker\n",
    _doc(1),
    "---\n---\n",  # an empty document
    "kind: Node\nmetadata: &m\n  name: anchored\nspec: {}\n",
    "...\n---\n",
    "kind: Node\nmetadata:\n  name: dup\n  name: dup2\n",
    "---\n",
    "---x: not a marker\nkind: Node\nmetadata: {name: odd}\n",
    "---\n",
    "kind: List\napiVersion: v1\nitems:\n- kind: Node\n  metadata: {name: in-list-0}\n- kind: Node\n  metadata: {name: in-list-1}\n",
    *(f"---\n{_doc(i)}" for i in range(2, 12)),
])


def _single(text: str, limits: DecodeLimits = DEFAULT_LIMITS) -> list[tuple[Any, ...]]:
    return [(repr(d), d) for d in iter_documents(text, source="in", limits=limits)]


def _split(text: str, start: Starter, limits: DecodeLimits = DEFAULT_LIMITS) -> list[tuple[Any, ...]]:
    return [(repr(d), d) for d in iter_documents(text, source="in", limits=limits, parallel=start)]


def _split_points(text: str) -> list[int]:
    return sorted({yaml_split_point(text, share / 20) for share in range(1, 20)} - {0})


def test_every_split_point_gives_the_same_documents_in_the_same_order(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _single(TRICKY)
    assert len(expected) == 18 and any("_Duplicated" in r for r, _ in expected)
    points = _split_points(TRICKY)
    assert len(points) >= 10, points
    for point in points:
        assert TRICKY[point : point + 3] == "---" and TRICKY[point - 1] == "\n"
        monkeypatch.setattr(decode, "PARALLEL_SHARE", point / len(TRICKY) - 1e-9)
        start = Starter()
        assert _split(TRICKY, start) == expected, point
        (part,) = start.parts
        assert part.text == TRICKY[point:] and part.closed


def test_progress_positions_count_from_the_start_of_the_whole_text() -> None:
    seen: list[int] = []
    list(iter_documents(TRICKY, progress=seen.append, parallel=Starter()))
    assert seen == sorted(seen) and seen[-1] == len(TRICKY) and len(seen) == 17


def test_a_lost_or_misnumbered_document_of_the_second_part_shows() -> None:
    # A scalar document in the second part: its index counts every document of the first part.
    docs = [_doc(i) for i in range(10)]
    docs[7] = "just text\n"
    text = "---\n".join(docs)
    start = Starter()
    with pytest.raises(InvalidInput) as split:
        list(iter_documents(text, source="in", parallel=start))
    assert start.parts and start.parts[0].text.count("node-") < 5, "the bad document is in the second part"
    assert str(split.value) == "in: document 7: expected an object, got a string"


@pytest.mark.parametrize("where", ["first", "second"])
@pytest.mark.parametrize(
    "broken",
    [
        "kind: Node\nmetadata: [unclosed\n",  # runs into the split's "---" in a single parse
        "kind: Node\nmetadata:\n  name: 'unterminated\n",
        "kind: Node\nmetadata: {name: x}\n bad: indent\n",
        "kind: Node\nmetadata: !!python/object {name: x}\n",
    ],
)
def test_a_yaml_error_in_either_part_is_the_single_parse_error(where: str, broken: str) -> None:
    docs = [_doc(i) for i in range(10)]
    docs[2 if where == "first" else 6] = broken
    text = "---\n".join(docs)
    with pytest.raises(InvalidInput) as single:
        list(iter_documents(text, source="in"))
    start = Starter()
    with pytest.raises(InvalidInput) as split:
        list(iter_documents(text, source="in", parallel=start))
    assert start.parts, "the text was split"
    assert str(split.value) == str(single.value)
    assert "line" in str(single.value) or "tag" in str(single.value)


def test_aliases_are_limited_across_both_parts() -> None:
    doc = "kind: Node\nmetadata: &m {name: a, labels: {x: y}}\nspec: [*m, *m, *m]\n"
    text = "---\n".join([doc] * 10)
    per_doc = 21  # three aliases of a mapping of seven values (keys and the mapping count)
    limits = DecodeLimits(max_alias_values=per_doc * 7)  # each part alone is within it
    with pytest.raises(InvalidInput) as single:
        list(iter_documents(text, source="in", limits=limits))
    with pytest.raises(InvalidInput) as split:
        list(iter_documents(text, source="in", limits=limits, parallel=Starter()))
    assert str(split.value) == str(single.value)
    assert f"aliases expand to more than {per_doc * 7} values" in str(single.value)
    fits = DecodeLimits(max_alias_values=per_doc * 10)
    assert _split(text, Starter(), fits) == _single(text, fits)


def test_a_part_that_failed_elsewhere_is_parsed_here() -> None:
    start = Starter(fail=True)
    assert _split(TRICKY, start) == _single(TRICKY)
    assert start.parts and start.parts[0].closed


def test_json_and_texts_without_a_document_start_are_not_split() -> None:
    assert yaml_split_point('[{"kind": "Node"}]\n---\n') == 0
    assert yaml_split_point(_doc(1) * 3) == 0
    assert yaml_split_point(_doc(1) + "---x\n" + _doc(2)) == 0
    start = Starter()
    assert list(iter_documents('{"kind": "Node"}', parallel=start)) == [{"kind": "Node"}]
    assert not start.parts
