"""A large YAML inventory file parsed on two cores (``service.parse_worker``, issue 16): the
worker process parses the file's second part while the loading thread parses the first. What
loads, and every problem and error, must be what one parse gives; the split logic itself is
tested in tests/decode/test_split_parse.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.model import DEFAULT_LIMITS, InvalidInput, ValidationMode
from dra_solver.service import files, parse_worker
from dra_solver.service.inventory import FileSource
from tests.builders import device_class, gpu_slice, node

NODES = 60
CPU_FREE = parse_worker.cpu_free


@pytest.fixture(autouse=True)
def _a_free_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker is used only when a CPU is free; these tests use it whatever the load."""
    monkeypatch.setattr(parse_worker, "cpu_free", lambda: True)


def _text(*, broken: int | None = None) -> str:
    docs: list[str] = [yaml.safe_dump(device_class())]
    for i in range(NODES):
        doc = gpu_slice(f"node-{i:03}", count=2)
        doc["spec"]["devices"][0]["attributes"]["uuid"] = {"string": f"GPU-{i}"}
        if i in (7, 45):  # one problem in each part
            doc["spec"]["devices"][1]["capacty"] = {"memory": {"value": "1"}}
        docs += [yaml.safe_dump(node(f"node-{i:03}")), yaml.safe_dump(doc)]
    if broken is not None:
        docs[broken] = "kind: Node\nmetadata: {name: [unclosed\n"
    return "---\n".join(docs)


class Spy:
    """Counts the worker parts started and the results they gave."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.results: list[bool] = []
        real = parse_worker.WorkerPart.result

        def result(part: parse_worker.WorkerPart) -> Any:
            got = real(part)
            self.results.append(got is not None)
            return got

        monkeypatch.setattr(parse_worker.WorkerPart, "result", result)


def _load(path: Path) -> tuple[list[Any], list[str]]:
    source = FileSource(str(path))
    snap = source.load()
    inv = snap.inventory
    objects = [x.to_api() for x in [*inv.classes, *inv.nodes, *inv.slices]]
    return objects, [str(p) for p in snap.problems]


def test_a_file_parsed_in_two_processes_loads_what_one_parse_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(_text())
    single = _load(path)
    assert len(single[1]) == 2, single[1]
    spy = Spy(monkeypatch)
    monkeypatch.setattr(parse_worker, "PARALLEL_MIN_CHARS", 0)
    assert _load(path) == single
    assert spy.results == [True], "the worker parsed the second part"
    assert any("node-045" in p for p in single[1]), "a problem in the second part names its object"


def test_a_yaml_error_in_the_worker_part_is_reported_as_by_one_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(_text(broken=2 * NODES - 10))
    with pytest.raises(InvalidInput) as single:
        FileSource(str(path)).load()
    spy = Spy(monkeypatch)
    monkeypatch.setattr(parse_worker, "PARALLEL_MIN_CHARS", 0)
    with pytest.raises(InvalidInput) as split:
        FileSource(str(path)).load()
    assert str(split.value) == str(single.value)
    assert f"{path}: cannot parse YAML: line " in str(single.value)
    assert spy.results == [False], "the worker's part did not parse: the whole text was parsed here"


def test_no_worker_means_one_parse_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(_text())
    single = _load(path)
    monkeypatch.setattr(parse_worker.sys, "executable", str(tmp_path / "no-such-python"))
    monkeypatch.setattr(parse_worker, "PARALLEL_MIN_CHARS", 0)
    assert _load(path) == single


def test_a_part_given_up_early_stops_its_worker() -> None:
    part = parse_worker.start_part("kind: Node\n" * 10, DEFAULT_LIMITS)
    proc = part._proc
    assert proc is not None
    part.close()
    assert proc.returncode is not None


@pytest.mark.parametrize("progress", [False, True])
def test_cli_inputs_parsed_in_two_processes_are_those_of_one_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, progress: bool) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(_text())
    lines: list[str] = []
    report = lines.append if progress else None
    monkeypatch.setattr(files, "PROGRESS_MIN_CHARS", 0 if progress else 10**9)  # decoded as parsed, or parsed first

    def outcome(validate: ValidationMode) -> object:
        try:
            return [x.to_api() for x in files.read_objects([str(path)], validate=validate, progress=report)]
        except InvalidInput as err:
            return str(err)

    single = [outcome("ignore"), outcome("strict")]
    assert 'unknown field "spec.devices[1].capacty"' in str(single[1])
    spy = Spy(monkeypatch)
    monkeypatch.setattr(parse_worker, "PARALLEL_MIN_CHARS", 0)
    assert [outcome("ignore"), outcome("strict")] == single
    # Decoded as parsed, the strict error (in the first part) ends the load before the worker's part is needed.
    assert spy.results == ([True] if progress else [True, True])
    assert bool(lines) == progress


def test_a_busy_machine_parses_on_one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parse_worker, "PARALLEL_MIN_CHARS", 10)
    assert parse_worker.parallel_for("x" * 10) is parse_worker.start_part
    assert parse_worker.parallel_for("x" * 9) is None
    monkeypatch.setattr(parse_worker, "cpu_free", lambda: False)
    assert parse_worker.parallel_for("x" * 10) is None


@pytest.mark.parametrize(
    ("cpus", "running", "pressure", "quota", "free"),
    [
        (2, 1, "0.00", None, True),  # an idle 2-core machine: only the loader runs
        (2, 2, "0.00", None, False),  # something else holds the other core
        (2, 1, "46.49", None, False),  # tasks have been waiting for a CPU
        (2, 1, None, None, True),  # no pressure information
        (8, 3, "1.00", "100000 100000", False),  # a quota of one CPU
        (8, 3, "1.00", "max 100000", True),
        (1, 1, "0.00", None, False),
    ],
)
def test_a_cpu_is_free_only_when_nothing_else_wants_it(
    tmp_path: Path, cpus: int, running: int, pressure: str | None, quota: str | None, free: bool
) -> None:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "pressure").mkdir(parents=True)
    cgroup.mkdir()
    (proc / "loadavg").write_text(f"2.49 3.71 3.85 {running}/106 28522\n")
    if pressure is not None:
        (proc / "pressure" / "cpu").write_text(f"some avg10={pressure} avg60=1.00 avg300=1.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    if quota is not None:
        (cgroup / "cpu.max").write_text(quota + "\n")
    assert CPU_FREE(proc=proc, cgroup=cgroup, cpus=cpus) is free
