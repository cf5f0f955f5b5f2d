"""Command-line flags: values that parse but make no sense, flags that do not go together, and
TLS files that cannot work are one line naming the flag and exit 2, before anything runs (no
C-core abort, no internal error, no hang, no silently different value).

Every command runs as a real process (as ``dra-solver`` does). Nothing here needs a service
but the one test that checks the bounds themselves are accepted: the client checks come before
any connection, so the commands are pointed at a port nothing listens on.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_solver.service.bench import serve_process
from dra_solver.service.client import Client
from tests.service.conftest import DEMO, ROOT
from tests.service.conftest import run_cli as _cli

CLUSTER = str(DEMO / "cluster.yaml")
NOTEBOOK = str(DEMO / "claims" / "notebook.yaml")
SCENARIO = str(ROOT / "examples" / "compare" / "agree.yaml")
REPLAY_CLUSTER = str(ROOT / "examples" / "replay" / "gpu8-cluster.yaml")
REPLAY_WORKLOAD = str(ROOT / "examples" / "replay" / "gpu8-workload.yaml")
NOBODY = "127.0.0.1:1"
"""Nothing listens here: a check that is missing shows as UNAVAILABLE (exit 4), not exit 2."""


def _refused(r: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 2 and exactly one line on stderr, ``error: ...``, containing ``message``."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-2000:]
    assert message in lines[0], lines[0]
    assert "internal error" not in lines[0] and r.stdout == ""


# --- --timeout and the other float flags of the client commands --------------------------------

COMMANDS = {
    "allocate": ("allocate", "--node", "node-a", CLUSTER, NOTEBOOK),
    "explain": ("explain", "--node", "node-a", CLUSTER, NOTEBOOK),
    "explain --server": ("explain", "--server", NOBODY, "--node", "node-a", NOTEBOOK),
    "schedule": ("schedule", "--server", NOBODY, NOTEBOOK),
    "schedule --group": ("schedule", "--group", "default/train", CLUSTER),
    "compare": ("compare", "--quiet", "--upstream", "off", SCENARIO),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_timeout_must_be_a_finite_positive_number_of_seconds(command: str) -> None:
    _refused(_cli(*COMMANDS[command], "--timeout", "nan"), "error: --timeout: must be a positive number of seconds: nan")


@pytest.mark.parametrize(("command", "value", "message"), [
    ("schedule", "1e10", "--timeout: must be at most 86400 seconds: 10000000000.0"),
    ("allocate", "1e10", "--timeout: must be at most 86400 seconds: 10000000000.0"),
    ("compare", "inf", "--timeout: must be a positive number of seconds: inf"),
    ("schedule", "0", "--timeout: Invalid value: 0.0: must be greater than zero"),
    ("explain --server", "-1", "--timeout: Invalid value: -1.0: must be greater than zero"),
])
def test_timeout_refuses_inf_huge_zero_and_negative(command: str, value: str, message: str) -> None:
    _refused(_cli(*COMMANDS[command], "--timeout", value), message)


@pytest.mark.parametrize(("args", "message"), [
    (("schedule", "--server", NOBODY, "--reserve", "--ttl", "-5", NOTEBOOK), "--ttl: must be a number of seconds, 0 or more: -5.0"),
    (("schedule", "--server", NOBODY, "--reserve", "--ttl", "nan", NOTEBOOK), "--ttl: must be a number of seconds, 0 or more: nan"),
    (("schedule", "--server", NOBODY, "--feasible-nodes", "3000000000", NOTEBOOK), "--feasible-nodes: must be at most 100000: 3000000000"),
    (("compare", "--schedulers", "mixed", "--run-timeout", "-1"), "--run-timeout: Invalid value: -1.0: must be greater than zero"),
    (("compare", "--schedulers", "mixed", "--nodes", "1000000"), "--nodes: must be at most 10000: 1000000"),
    (("demo", "--backtracking-timeout", "nan"), "--backtracking-timeout: must be a positive number of seconds: nan"),
])
def test_other_number_flags_of_the_clients(args: tuple[str, ...], message: str) -> None:
    _refused(_cli(*args), message)


# --- serve -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--port", "-1", "--port: must be a port from 0 to 65535 (0: any free port): -1"),
    ("--port", "70000", "--port: must be a port from 0 to 65535"),
    ("--metrics-port", "70000", "--metrics-port: must be a port from 0 to 65535 (0: any free port; -1: off): 70000"),
    ("--metrics-port", "-2", "--metrics-port: must be a port"),
    ("--max-message-bytes", "100000000000", "--max-message-bytes: must be at most 2147483647: 100000000000"),
    ("--poll-interval", "0", "--poll-interval: must be a number of seconds of at least 0.05: 0.0"),
    ("--reservation-ttl", "nan", "--reservation-ttl: must be a positive number of seconds: nan"),
    ("--grace", "-1", "--grace: must be a number of seconds, 0 or more: -1.0"),
    ("--solve-timeout", "0", "--solve-timeout: Invalid value: 0.0: must be greater than zero"),
    ("--max-solve-seconds", "-1", "--max-solve-seconds: Invalid value: -1.0: must be greater than zero"),
    ("--workers", "0", "--workers: must be at least 1: 0"),
    ("--max-streams", "-1", "--max-streams: must be at least 0: -1"),
    ("--max-message-bytes", "10", "--max-message-bytes: must be at least 1024: 10"),
    ("--max-concurrent", "0", "--max-concurrent: must be at least 1: 0"),
])
def test_serve_refuses_numbers_out_of_range(flag: str, value: str, message: str) -> None:
    # A flag let through would start a server that runs until the timeout: the test fails.
    _refused(_cli("serve", "--inventory", CLUSTER, "--port", "0", "--metrics-port", "-1", flag, value, timeout=30), message)


def test_serve_says_which_port_it_cannot_listen_on() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        grpc_port = _cli("serve", "--inventory", CLUSTER, "--port", port, "--metrics-port", "-1", timeout=30)
        # gRPC's own log line comes first (it writes it itself); ours names the flag.
        assert grpc_port.returncode == 2 and grpc_port.stderr.splitlines()[-1] == (
            f"error: --port: cannot listen on 127.0.0.1:{port}: the port is in use, or the host is not an address of this machine"), grpc_port.stderr
        _refused(_cli("serve", "--inventory", CLUSTER, "--port", "0", "--metrics-port", port, timeout=30),
                 f"error: --metrics-port: cannot listen on 127.0.0.1:{port}: Address already in use")


@pytest.mark.parametrize(("flags", "message"), [
    (("--tls-cert", "/nonexistent/cert.pem"), "--tls-cert and --tls-key go together"),
    (("--client-ca", "/nonexistent/ca.pem"), "--client-ca needs --tls-cert and --tls-key"),
    # Each open stream holds a serving thread: as many streams as threads would starve calls.
    (("--workers", "4", "--max-streams", "4"), "--max-streams: must be less than --workers (4): 4"),
    (("--python-cpu", "4096"), "--python-cpu: CPU 4096 is not one this process may run on"),
    (("--python-cpu", "fast"), "--python-cpu: not none, auto or a CPU number: 'fast'"),
])
def test_serve_refuses_flags_that_do_not_go_together(flags: tuple[str, ...], message: str) -> None:
    _refused(_cli("serve", "--inventory", CLUSTER, "--port", "0", "--metrics-port", "-1", *flags, timeout=30), message)


def test_serve_names_the_metrics_address_it_cannot_listen_on() -> None:
    r = _cli("serve", "--inventory", CLUSTER, "--port", "0", "--metrics-port", "0", "--metrics-address", "no-such-host.invalid", timeout=30)
    # The gRPC port was open when the metrics endpoint failed: C-core may log; the error is ours.
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode == 2 and len(errors) == 1, r.stderr
    assert errors[0].startswith("error: --metrics-address: cannot listen on no-such-host.invalid:0: "), errors


# --- client TLS files and --server -----------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    pytest.importorskip("cryptography")
    from tests.service.pki import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


def test_a_client_certificate_needs_its_key_and_a_key_its_certificate(pki) -> None:  # type: ignore[no-untyped-def]
    # Before: gRPC's C core aborted the process (SIGABRT, exit 134) on a certificate without
    # its key, and a key alone was silently ignored (plaintext).
    _refused(_cli(*COMMANDS["schedule"], "--tls-cert", str(pki.client_cert)), "error: --tls-cert and --tls-key go together")
    _refused(_cli(*COMMANDS["explain --server"], "--tls-key", str(pki.client_key)), "error: --tls-cert and --tls-key go together")


def test_serve_checks_its_tls_files_as_the_clients_do(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from cryptography.hazmat.primitives import serialization

    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(os.urandom(300))
    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), None)
    encrypted = tmp_path / "encrypted-key.pem"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    serve = ("serve", "--inventory", CLUSTER, "--port", "0", "--metrics-port", "-1")
    _refused(_cli(*serve, "--tls-cert", str(garbage), "--tls-key", str(pki.server_key), timeout=30),
             f"error: --tls-cert: {garbage} is not a PEM certificate file")
    # Before: OpenSSL asked for the key's password on the terminal.
    _refused(_cli(*serve, "--tls-cert", str(pki.server_cert), "--tls-key", str(encrypted), timeout=30), "the key is encrypted")
    _refused(_cli(*serve, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key), "--client-ca", str(garbage), timeout=30),
             f"error: --client-ca: {garbage} is not a PEM certificate file")


def test_client_tls_files_are_checked_before_dialing(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(os.urandom(300))
    schedule = COMMANDS["schedule"]
    _refused(_cli(*schedule, "--tls-ca", "/nonexistent/ca.pem"), "error: --tls-ca: cannot read /nonexistent/ca.pem: No such file or directory")
    _refused(_cli(*schedule, "--tls-ca", str(garbage)), "error: --tls-ca: ")
    _refused(_cli(*schedule, "--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.rogue_key)),
             "error: --tls-key: does not match --tls-cert")
    # Good files pass the checks: the call is tried, and nothing listens (4, not 2).
    r = _cli(*schedule, "--timeout", "5", "--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key))
    assert r.returncode == 4 and "UNAVAILABLE" in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["schedule", "explain --server"])
def test_an_empty_server_is_refused(command: str) -> None:
    args = [("" if a == NOBODY else a) for a in COMMANDS[command]]
    _refused(_cli(*args), 'error: --server: must be HOST:PORT or unix:PATH: ""')


def test_explain_refuses_tls_flags_without_a_server(pki) -> None:  # type: ignore[no-untyped-def]
    _refused(_cli(*COMMANDS["explain"], "--tls-ca", str(pki.ca)), "error: --tls-ca: Forbidden: only with --server")


# --- bench -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (("--shape", ""), "--shape: Required value"),
    (("--nodes", ""), "--nodes: Required value"),
    (("--nodes", "1000000000"), "--nodes: must be at most 100000: 1000000000"),
    (("--pods", "1000000000000"), "--pods: must be at most 1000000: 1000000000000"),
    (("--concurrency", "100000000"), "--concurrency: must be at most 256: 100000000"),
    (("--batch", "5000"), "--batch: must be at most 1024: 5000"),
    (("--batch", "0,stream"), "--batch: not a list of positive integers (or stream): 0,stream"),
    (("--batch", "0"), "--batch: not a list of positive integers (or stream): 0"),
    (("--pods", "0"), "--pods: must be positive: 0"),
    (("--concurrency", "-1"), "--concurrency: must be positive: -1"),
    (("--nodes", "0"), "--nodes: must be positive: 0"),
    (("--nodes", "a\nb"), "--nodes: not a list of integers: a b"),  # quoted back on one line
    (("--shape", "tpu"), "--shape: unknown shape in tpu (gpu, mig)"),
    (("--shape", "x" * 5000), "... (4936 more characters) (gpu, mig)"),  # and clipped
    (("--window", "2"), "--window: messages in flight on a stream: only with --batch stream: 1"),
    (("--window", "0", "--batch", "stream"), "--window: must be positive: 0"),
    (("--window", "65", "--batch", "stream"), "--window: must be at most 64: 65"),
])
def test_bench_refuses_empty_lists_and_sizes_beyond_its_bounds(args: tuple[str, ...], message: str) -> None:
    # Let through, these would run (an empty table, exit 0) or grow without bound: the timeout fails the test.
    _refused(_cli("bench", *args, timeout=30), message)


def test_bench_refuses_an_unknown_pinning() -> None:
    r = _cli("bench", "--pin", "fast", timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("dra-solver bench: error: argument --pin: invalid choice: 'fast' (choose from 'python', 'serve', 'none') "
                                "(see dra-solver bench --help)")


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_during_bench_stops_its_serve_and_removes_its_directory(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "dra_solver.cli", "bench", "--nodes", "20", "--shape", "gpu", "--pods", "1000000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        # Until the child serve runs on the generated cluster (its path is under TMPDIR).
        while not [p for p in _processes_naming(str(tmp_path)) if p != proc.pid]:
            assert proc.poll() is None and time.monotonic() < deadline, "bench never started its serve"
            time.sleep(0.1)
        assert list(tmp_path.glob("dra-bench-*"))
        time.sleep(1.0)  # into the run: the service loads, the client waits for it or schedules
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=45)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0, "terminated, not finished"
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
    assert list(tmp_path.glob("dra-bench-*")) == [], "the generated cluster is removed"
    assert _processes_naming(str(tmp_path)) == [], "the child serve is stopped"


# --- demo ------------------------------------------------------------------------------------


def test_demo_fails_fast_with_the_services_own_error() -> None:
    # Before: about 32 s of waiting for a service that had exited, then "internal error".
    started = time.monotonic()
    r = _cli("demo", "--cluster", "/nonexistent/cluster.yaml", timeout=25)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1] == "error: /nonexistent/cluster.yaml: no such file or directory", r.stderr
    assert "internal error" not in r.stderr and time.monotonic() - started < 20


# --- long values quoted back -----------------------------------------------------------------

LONG = "n" * 100_000


@pytest.mark.parametrize("args", [
    ("allocate", "--node", LONG, CLUSTER, NOTEBOOK),
    ("compare", "--quiet", "--upstream", "off", "--node", LONG, SCENARIO),
    ("schedule", "--group", f"{LONG}/x", CLUSTER),
    ("schedule", "--group", f"x/{LONG}", CLUSTER),
], ids=["allocate", "compare", "group-namespace", "group-name"])
def test_long_node_and_group_names_are_clipped_in_errors(args: tuple[str, ...]) -> None:
    r = _cli(*args)
    assert r.returncode == 2 and len(r.stderr) < 400, r.stderr[:400]
    assert r.stderr.startswith("error: ") and "n" * 65 not in r.stderr, r.stderr[:400]
    assert "(100000 characters)" in r.stderr or "more characters)" in r.stderr, r.stderr


# --- compare: nothing given is ignored ---------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (("--replay", REPLAY_CLUSTER, "--workload", REPLAY_WORKLOAD, SCENARIO),
     f"error: {SCENARIO}: Forbidden: a scenario FILE is not read with --replay"),
    (("--nodes", "5", SCENARIO), "error: --nodes: Forbidden: only with --schedulers"),
    (("--node-choice", "score", SCENARIO), "error: --node-choice: Forbidden: only with --replay"),
    (("--replay", REPLAY_CLUSTER, "--workload", REPLAY_WORKLOAD, "--node", "node-0"), "error: --node: Forbidden: only with scenario FILEs"),
    (("--schedulers", "mixed", "--timeout", "5"), "error: --timeout: Forbidden: "),
    (("--schedulers", "mixed", SCENARIO), "Forbidden: a scenario FILE is not read with --schedulers"),
    (("--backlog", SCENARIO), "error: --backlog: Forbidden: only with --schedulers"),
    (("--schedulers", "mixed,steady-state", "--backlog"),
     "error: --backlog: Forbidden: steady-state deletes pods as others arrive"),
])
def test_compare_refuses_what_its_mode_would_ignore(args: tuple[str, ...], message: str) -> None:
    _refused(_cli("compare", "--quiet", *args), message)


# --- the bounds themselves are accepted ----------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve_process(DEMO / "cluster.yaml") as (_, target):
        with Client(target, timeout=10) as client:
            client.wait_ready(timeout=60)
        yield target


def test_the_largest_and_smallest_values_allowed_work(server: str) -> None:
    r = _cli("schedule", "--server", server, "--timeout", "86400", "--reserve", "--ttl", "0", "--feasible-nodes", "100000", NOTEBOOK)
    assert r.returncode == 0 and r.stdout.startswith("node: "), r.stderr
    assert "reserved as " in r.stdout and "for 30s" in r.stdout, r.stdout  # ttl 0: the service's default
    r = _cli("explain", "--server", server, "--timeout", "86400", "--node", "node-a", NOTEBOOK)
    assert r.returncode in (0, 1), r.stderr
