"""A large YAML inventory parsed ahead in a child process (``service.parse_ahead``): the same
documents in the same order, the same error at the same point, as parsing in this process."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_solver.model import iter_documents
from dra_solver.service import parse_ahead
from dra_solver.service.inventory import load_inventory_files

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="parsing ahead needs two CPUs"
)


def _slice(i: int) -> str:
    return f"""apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: node-{i}-gpu
spec:
  driver: gpu.example.com
  nodeName: node-{i}
  pool: {{name: node-{i}, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: gpu-0
    attributes:
      model: {{string: "A100"}}
      enabled: {{bool: yes}}
      index: {{int: 0x10}}
"""


def _node(i: int) -> str:
    return f"apiVersion: v1\nkind: Node\nmetadata:\n  name: node-{i}\n  labels: {{zone: z{i % 3}}}\n"


def _text(nodes: int, *, extra: str = "", at: int = -1) -> str:
    docs = []
    for i in range(nodes):
        docs += [_node(i), _slice(i)]
        if i == at:
            docs.append(extra)
    docs.append("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: listed-0}}\n"
                "- {apiVersion: v1, kind: Node, metadata: {name: listed-1, name: twice}}\n")
    return "---\n".join(docs)


def _outcome(docs: Iterator[dict[str, Any]]) -> tuple[list[tuple[str, Any]], str]:
    got: list[tuple[str, Any]] = []
    try:
        for doc in docs:
            got.append((type(doc).__name__, repr(doc)))  # repr tells a mapping that named a key twice
    except Exception as err:  # the error itself is compared
        return got, f"{type(err).__name__}: {err}"
    return got, ""


def test_documents_parsed_ahead_are_those_parsed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _text(700)  # several batches, a List and a duplicated key
    here = _outcome(iter_documents(text, source="big.yaml"))

    parsed_here: list[int] = []  # a forked child appends to its own copy

    def counted(*args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        parsed_here.append(os.getpid())
        return iter_documents(*args, **kwargs)

    monkeypatch.setattr(parse_ahead, "iter_documents", counted)
    ahead = _outcome(parse_ahead.documents(text, source="big.yaml", min_chars=0))
    assert parsed_here == [], "parsed in the child"
    assert ahead == here
    assert here[1] == "" and len(here[0]) == 1402
    assert "_Duplicated" in here[0][-1][1], "the key named twice is kept for strict field validation"


@pytest.mark.parametrize("bad", [
    "kind: [unclosed\n",  # a YAML syntax error, with its line
    "- a list\n- not an object\n",  # a document that is not an object
    "a: &x [1]\nb: *y\n",  # an unknown alias
])
def test_an_error_in_the_text_is_raised_where_parsing_here_raises_it(bad: str) -> None:
    text = _text(600, extra=bad, at=400)
    here = _outcome(iter_documents(text, source="big.yaml"))
    assert here[1], "the text has an error"
    assert _outcome(parse_ahead.documents(text, source="big.yaml", min_chars=0)) == here


def test_a_child_that_stops_early_is_made_up_for_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that dies mid-way (killed, out of memory): a fault a test cannot cause on cue,
    so its stream is cut after the first batch."""
    text = _text(700)
    real_iter = parse_ahead._Batches.__iter__

    def first_batch_only(self: Any) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        for item in real_iter(self):
            yield item
            return

    monkeypatch.setattr(parse_ahead._Batches, "__iter__", first_batch_only)
    told: list[int] = []
    assert _outcome(parse_ahead.documents(text, source="big.yaml", progress=told.append, min_chars=0)) == _outcome(
        iter_documents(text, source="big.yaml")
    )
    assert told == sorted(told) and told[-1] == len(text), "progress never goes back, and reaches the end"


def test_a_child_that_hangs_is_killed_and_made_up_for_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child is forked after the patch: it really hangs, silent, until it is killed."""
    text = _text(300)

    def hang(out: Any, text: str, source: str) -> None:
        time.sleep(600)

    monkeypatch.setattr(parse_ahead, "_parse_into", hang)
    monkeypatch.setattr(parse_ahead, "SILENCE", 0.5)
    started = time.monotonic()
    assert _outcome(parse_ahead.documents(text, source="big.yaml", min_chars=0)) == _outcome(iter_documents(text, source="big.yaml"))
    assert time.monotonic() - started < 30


def test_a_fork_that_fails_parses_here_and_keeps_no_descriptor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of processes or memory: a fault a test cannot cause on cue, so fork is made to fail."""
    text = _text(300)

    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(parse_ahead.os, "fork", no_fork)
    before = len(os.listdir("/proc/self/fd"))
    assert _outcome(parse_ahead.documents(text, source="big.yaml", min_chars=0)) == _outcome(iter_documents(text, source="big.yaml"))
    assert len(os.listdir("/proc/self/fd")) == before, "the pipe's two ends are closed"


def test_a_process_holding_many_descriptors_parses_ahead_the_same() -> None:
    """A busy serve holds more than 1,024 descriptors (clients, watches), so the pipe's read
    end is numbered above what ``select.select`` can wait on."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"this process may open {soft} descriptors; the test needs 1,200")
    text = _text(300)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) > 1024
        assert _outcome(parse_ahead.documents(text, source="big.yaml", min_chars=0)) == _outcome(iter_documents(text, source="big.yaml"))
    finally:
        for fd in held:
            os.close(fd)


def test_progress_moves_forward_to_the_end() -> None:
    text = _text(700)
    here: list[int] = []
    list(iter_documents(text, source="big.yaml", progress=here.append))
    ahead: list[int] = []
    list(parse_ahead.documents(text, source="big.yaml", progress=ahead.append, min_chars=0))
    assert ahead == sorted(ahead) and len(ahead) >= 5
    assert ahead[-1] == here[-1]


def test_small_texts_and_json_are_parsed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_child(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a child was started")

    monkeypatch.setattr(parse_ahead.os, "fork", no_child)
    assert len(list(parse_ahead.documents(_text(3), source="small.yaml"))) == 8
    assert len(list(parse_ahead.documents('{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}', source="n.json", min_chars=0))) == 1


def test_an_inventory_loads_the_same_parsed_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(_text(300, extra=_slice(9999).replace("gpu-0", "GPU_0"), at=150))  # invalid: screened later
    here_objects, here_problems = load_inventory_files([str(path)])
    monkeypatch.setattr(parse_ahead, "MIN_CHARS", 0)
    ahead_objects, ahead_problems = load_inventory_files([str(path)])
    assert [o.model_dump() for o in ahead_objects] == [o.model_dump() for o in here_objects]
    assert ahead_problems == here_problems
    assert len(here_objects) == 602
    assert [p.detail for p, _ in here_problems] == ['strict decoding error: duplicate field "metadata.name"']
