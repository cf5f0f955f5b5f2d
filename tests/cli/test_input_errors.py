"""Every input problem the issue found is an answer, not a wrong result or a traceback:
exit 2 with one line that says what is wrong (1 only ever means "does not fit").

In process through ``dra_solver.cli.main`` (what the installed command runs); one subprocess
run checks the real process boundary.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_solver import cli
from tests.decode.test_bounded_decoding import ALIAS_BOMB
from tests.decode.test_strict_decoding import CONSTRAINT_TYPO, COUT

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.yaml")


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as done:  # argparse
        code = int(done.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err
    assert lines[0].startswith("error: ")
    return lines[0]


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_cout_is_an_error_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _file(tmp_path, "claims.yaml", COUT)
    code, out, err = _main(capsys, "allocate", "--node", "worker-1", CLUSTER, claims)
    assert code == 2 and out == ""
    assert _one_error(err) == (
        f'error: {claims}: ResourceClaim default/two-gpus: strict decoding error: '
        'unknown field "spec.devices.requests[0].exactly.cout"'
    )


def test_warn_reports_and_goes_on_ignore_is_silent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _file(tmp_path, "claims.yaml", COUT)
    code, _, err = _main(capsys, "allocate", "--validate=warn", "--node", "worker-1", CLUSTER, claims)
    assert err.startswith(
        f'warning: {claims}: ResourceClaim default/two-gpus: unknown field "spec.devices.requests[0].exactly.cout"\n'
    )
    assert code in (0, 1)
    warned = code
    code, _, err = _main(capsys, "allocate", "--validate=ignore", "--node", "worker-1", CLUSTER, claims)
    assert "warning" not in err and code == warned


def test_constraint_typo_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _file(tmp_path, "claims.yaml", CONSTRAINT_TYPO)
    code, _, err = _main(capsys, "allocate", "--node", "worker-1", CLUSTER, claims)
    assert code == 2
    assert _one_error(err).endswith('strict decoding error: unknown field "spec.devices.constraint"')


def test_unknown_node_is_an_error_not_an_empty_node(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "allocate", "--node", "worker-9", CLUSTER)
    assert code == 2
    assert _one_error(err) == 'error: --node: Not found: "worker-9": known nodes: worker-1, worker-2'


@pytest.mark.parametrize("content", ["", "# just a comment\n", "---\n---\n", "[]", "null", '{"kind": "List", "items": []}'])
def test_a_file_without_objects_is_an_error(content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = _file(tmp_path, "empty.yaml", content)
    code, out, err = _main(capsys, "allocate", "--node", "worker-1", CLUSTER, empty)
    assert code == 2 and out == ""
    assert _one_error(err).startswith(f"error: {empty}: no objects (expected DeviceClass, ")


def test_a_directory_without_objects_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("not an input")
    code, _, err = _main(capsys, "allocate", "--node", "worker-1", str(tmp_path))
    assert code == 2
    assert _one_error(err) == f"error: {tmp_path}: no .yaml, .yml or .json files in this directory"
    (tmp_path / "empty.yaml").write_text("")
    code, _, err = _main(capsys, "allocate", "--node", "worker-1", str(tmp_path))
    assert code == 2 and "no objects" in _one_error(err)


def test_the_same_file_twice_names_the_duplicate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _file(tmp_path, "claims.yaml", yaml.safe_dump(yaml.safe_load(COUT.replace("cout", "count"))))
    code, _, err = _main(capsys, "allocate", "--node", "worker-1", CLUSTER, claims, claims)
    assert code == 2
    assert _one_error(err) == (
        f'error: {claims}: ResourceClaim default/two-gpus: metadata.name: Duplicate value: "default/two-gpus": '
        f"already defined in {claims}"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: " + "[" * 600 + "]" * 600, "nesting"),
        ('{"kind": ' + "[" * 100_000 + "]" * 100_000 + "}", "cannot parse JSON: nesting is deeper than 100 levels"),
        ("? {a: 1}\n: b\n", "a mapping or list cannot be a mapping key"),
        (ALIAS_BOMB, "aliases expand to more than 100000 values"),
        ('{"kind": "DeviceClass", "metadata": {"name": "\\ud800"}}', "lone surrogate"),
    ],
    ids=["deep-yaml", "deep-json", "mapping-key", "alias-bomb", "lone-surrogate"],
)
def test_hostile_documents_are_invalid_input(text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _file(tmp_path, "bad.yaml", text)
    for mode in ("strict", "ignore"):
        code, _, err = _main(capsys, "allocate", f"--validate={mode}", "--node", "worker-1", CLUSTER, bad)
        assert code == 2
        line = _one_error(err)
        assert line.startswith(f"error: {bad}: ") and message in line


def test_a_counter_value_with_a_newline_is_invalid_even_with_validate_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = list(yaml.safe_load_all(Path(CLUSTER).read_text()))
    for doc in docs:
        if doc["kind"] == "ResourceSlice" and doc["spec"].get("sharedCounters"):
            counters = doc["spec"]["sharedCounters"][0]["counters"]
            counters[next(iter(counters))]["value"] = "7\n"
            break
    else:
        pytest.fail("the example cluster has no shared counters")
    poisoned = _file(tmp_path, "cluster.yaml", yaml.safe_dump_all(docs))
    for mode in ("strict", "ignore"):
        code, _, err = _main(capsys, "allocate", f"--validate={mode}", "--node", "worker-1", poisoned)
        assert code == 2
        assert 'Invalid value: "7\\n": quantities must match the regular expression' in _one_error(err)


def test_compare_refuses_an_unwritable_report_before_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "compare", "--report", "/nonexistent/dir/r.html", CLUSTER)
    assert code == 2 and out == ""
    # One line and no "comparing ..." progress: nothing ran.
    assert _one_error(err) == 'error: --report: Invalid value: "/nonexistent/dir/r.html": no such directory: "/nonexistent/dir"'


def test_compare_refuses_an_unknown_node(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "compare", "--node", "worker-9", CLUSTER)
    assert code == 2 and 'Not found: "worker-9"' in _one_error(err)


def test_long_values_are_quoted_by_their_first_64_characters_and_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/limits-and-errors.md: a value quoted in an error shows its first 64 characters and
    its length, wherever it appears (object name, field value, unknown field, CEL's echo)."""
    long_name, long_cel, long_key = "a" * 100_000, "x" * 5_000, "k" * 100_000
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": long_name, "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.example.com", "selectors": [{"cel": {"expression": long_cel}}]}}]}}}
    code, _, err = _main(capsys, "allocate", "--node", "worker-1", CLUSTER, _file(tmp_path, "long.yaml", yaml.safe_dump(claim)))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2, err[:2000]
    for line in lines:
        assert len(line) < 1000, line[:2000]
        assert "a" * 65 not in line and "x" * 130 not in line
    assert lines[0].endswith(f'metadata.name: Invalid value: "{"a" * 64}..." (100000 characters): must be no more than 253 characters')
    assert f"ResourceClaim default/{'a' * 56}... (100008 characters): " in lines[0]
    assert f'cel.expression: Invalid value: "{"x" * 64}..." (5000 characters): compilation failed: ' in lines[1]
    claim["metadata"]["name"] = "ok"
    claim["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu.example.com", long_key: 1}
    code, _, err = _main(capsys, "allocate", "--node", "worker-1", CLUSTER, _file(tmp_path, "key.yaml", yaml.safe_dump(claim)))
    assert code == 2
    line = _one_error(err)
    assert f'unknown field "spec.devices.requests[0].exactly.{"k" * 31}..." (100033 characters)' in line, line[:500]
    assert len(line) < 1000


CLAIMS_ONLY = str(ROOT / "examples" / "demo" / "claims" / "notebook.yaml")
SCENARIO = str(ROOT / "examples" / "compare" / "agree.yaml")


def test_compare_refuses_a_scenario_without_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    """A claims file alone (its cluster elsewhere) compared nothing and printed an empty table."""
    code, out, err = _main(capsys, "compare", "--quiet", "--upstream=off", CLAIMS_ONLY)
    assert (code, out) == (2, "")
    assert _one_error(err) == (f"error: {CLAIMS_ONLY}: no nodes (no Node and no node-local ResourceSlice): "
                               "a scenario file holds the cluster too, not only claims")


def test_compare_refuses_a_scenario_without_claims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = [d for d in yaml.safe_load_all(Path(SCENARIO).read_text()) if d["kind"] != "ResourceClaim"]
    cluster = _file(tmp_path, "cluster.yaml", yaml.safe_dump_all(docs))
    code, out, err = _main(capsys, "compare", "--quiet", "--upstream=off", cluster)
    assert (code, out) == (2, "")
    assert _one_error(err) == (f"error: {cluster}: no ResourceClaims: a scenario file holds the claims to "
                               "allocate and the cluster they go to")
    # Claims that are all allocated already leave nothing to compare either.
    allocated = str(ROOT / "examples" / "replay" / "gpu8-cluster.yaml")
    code, out, err = _main(capsys, "compare", "--quiet", "--upstream=off", allocated)
    assert (code, out) == (2, "")
    assert _one_error(err).endswith("no ResourceClaims to allocate: every claim in it is allocated already")


def test_compare_refuses_a_scenario_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "compare", "--quiet", "--upstream=off", SCENARIO, SCENARIO)
    assert (code, out) == (2, "")
    assert _one_error(err) == f"error: {SCENARIO}: given twice: each FILE is a scenario of its own"
    other_spelling = str(Path(SCENARIO).parent / ".." / "compare" / Path(SCENARIO).name)
    code, out, err = _main(capsys, "compare", "--quiet", "--upstream=off", SCENARIO, other_spelling)
    assert (code, out) == (2, "")
    assert _one_error(err) == (f"error: {other_spelling}: given twice (the same file as {SCENARIO}): "
                               "each FILE is a scenario of its own")


@pytest.mark.parametrize("command", ["schedule", "explain"])
def test_clients_check_their_input_before_calling_the_service(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No service is listening: the input error comes first, from the same decoder.
    claims = _file(tmp_path, "claims.yaml", COUT)
    node = ["--node", "worker-1"]
    code, _, err = _main(capsys, command, *node, "--server", "127.0.0.1:1", "--timeout", "2", claims)
    assert code == 2 and "strict decoding error" in _one_error(err)
    empty = _file(tmp_path, "empty.yaml", "")
    code, _, err = _main(capsys, command, *node, "--server", "127.0.0.1:1", "--timeout", "2", empty)
    assert code == 2 and "no objects" in _one_error(err)


def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "allocate", "--validate=Strict", "--node", "worker-1", CLUSTER)
    assert code == 2 and "invalid choice: 'Strict'" in err
    code, _, err = _main(capsys, "allocate", "--timeout", "0", "--node", "worker-1", CLUSTER)
    assert code == 2 and "--timeout: Invalid value" in _one_error(err)


def test_the_real_process_says_the_same(tmp_path: Path) -> None:
    claims = _file(tmp_path, "claims.yaml", COUT)
    done = subprocess.run(
        [sys.executable, "-m", "dra_solver.cli", "allocate", "--node", "worker-1", CLUSTER, claims],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert _one_error(done.stderr).endswith('unknown field "spec.devices.requests[0].exactly.cout"')
