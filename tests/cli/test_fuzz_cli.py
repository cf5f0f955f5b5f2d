"""Fuzzing ``dra-solver allocate`` as a hostile or careless user would: the bundled cluster
with random edits (wrong types, nasty quantities, odd selectors, stray fields) or broken text,
under every ``--validate`` mode and both allocators.

Properties: the exit status is one of the documented ones (0 allocated, 1 does not fit,
2 invalid input, 3 deadline), stderr never holds a traceback or the dispatcher's "internal
error" line, an error exit prints one line per problem, and each input is answered within a
generous time bound (hypothesis' deadline) and a memory bound (``tests/fuzzbounds``: the
Python memory one input takes at its peak). In process (``main()``) for speed, plus a few real
subprocesses. Derandomized by default (tests/conftest.py); ``HYPOTHESIS_PROFILE=long`` for a
long campaign.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_solver import cli
from tests.decode.test_fuzz_decoder import mutated
from tests.fuzzbounds import bounded

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_DOCS: list[dict[str, Any]] = list(yaml.safe_load_all((ROOT / "examples" / "cluster.yaml").read_text()))

NASTY: list[Any] = [
    None, True, 0, -1, 1, 33, 2**63, 10**30, 1.5, "", "7\n", " 7 ", "1e999", "-1Gi", "0.5", "1Ki",
    "x" * 300, "\u00e9", "gpu.example.com", "worker-1", "All", "ExactCount", "Exists", "NoExecute",
    "device.driver == 'gpu.example.com'", "device.attributes['gpu.example.com'].nope", "device.capacity",
    "1 +", {}, [], [{}], {"value": "7"}, {"cel": {"expression": "true"}}, {"string": "a"}, {"int": 3},
    ["a", "b"], {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}},
]
KEYS = ["count", "cout", "value", "allocationMode", "deviceClassName", "name", "nodeName", "selectors",
        "expression", "capacity", "attributes", "requests", "constraints", "matchAttribute", "firstAvailable",
        "tolerations", "taints", "sharedCounters", "consumesCounters", "allNodes", "adminAccess", "status",
        "resourceSliceCount", "generation", "kind", "apiVersion", "metadata"]


def _containers(value: Any, out: list[Any]) -> list[Any]:
    if isinstance(value, dict):
        out.append(value)
        for v in value.values():
            _containers(v, out)
    elif isinstance(value, list):
        out.append(value)
        for v in value:
            _containers(v, out)
    return out


@st.composite
def edited_cluster(draw: st.DrawFn) -> str:
    docs = copy.deepcopy(CLUSTER_DOCS)
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    for _ in range(draw(st.integers(1, 4))):
        target = rnd.choice(_containers(docs, []))
        value = copy.deepcopy(rnd.choice(NASTY))
        if isinstance(target, dict):
            key = rnd.choice([*target.keys(), *KEYS]) if target else rnd.choice(KEYS)
            if rnd.random() < 0.15:
                target.pop(key, None)
            else:
                target[key] = value
        elif target:
            target[rnd.randrange(len(target))] = value
        else:
            target.append(value)
    return json.dumps(docs) if draw(st.booleans()) else yaml.safe_dump_all(docs)


MEMORY_CAP_MIB = 32
"""Per input (decoding, validation, building and solving the model), Python memory only."""

inputs = st.one_of(edited_cluster(), mutated())
modes = st.sampled_from(["strict", "warn", "ignore"])
allocators = st.sampled_from(["cpsat", "backtracking"])


def _check(code: int, err: str) -> None:
    assert code in (0, 1, 2, 3), (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and all(line.startswith(("error: ", "warning: ")) for line in lines), err
        assert any(line.startswith("error: ") for line in lines), err


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """One run before the campaign, outside the bound: the first one imports the allocators and
    builds the CEL environment, which is not the input's memory."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for allocator in ("cpsat", "backtracking"):
            cli.main(["allocate", "--allocator", allocator, "--node", "worker-1", str(ROOT / "examples" / "cluster.yaml")])


@settings(deadline=timedelta(seconds=30))
@given(text=inputs, mode=modes, allocator=allocators, node=st.sampled_from(["worker-1", "worker-2"]))
def test_allocate_answers_every_input_with_a_documented_exit_status(text: str, mode: str, allocator: str, node: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        out, err = io.StringIO(), io.StringIO()
        with bounded(MEMORY_CAP_MIB, campaign="cli"), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["allocate", f"--validate={mode}", "--allocator", allocator, "--timeout", "5",
                             "--node", node, "-o", "json", str(path)])
    _check(code, err.getvalue())
    if code == 0:
        json.loads(out.getvalue())


@settings(deadline=None, max_examples=4)
@given(text=inputs, mode=modes)
def test_the_real_process_too(text: str, mode: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        done = subprocess.run(
            [sys.executable, "-m", "dra_solver.cli", "allocate", f"--validate={mode}", "--timeout", "5",
             "--node", "worker-1", str(path)],
            capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120, check=False,
        )
    _check(done.returncode, done.stderr)
