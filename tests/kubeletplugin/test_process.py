"""The plugin as a real process: lifecycle, signals, and crash injection at every step.

The crash tests kill the plugin (``os._exit``, as abrupt as SIGKILL for the files on disk) right
after each step of prepare and unprepare, restart it, and check the node invariant: no claim is
half-prepared, no CDI spec is orphaned, no device is left prepared without a record, and a
retried call succeeds. The same scenarios with rollback disabled must break the invariant,
which proves the tests would catch a missing rollback.
"""

from __future__ import annotations

import json
import signal
import stat
import time

import grpc
import pytest

from dra_solver.kubeletplugin.state import (
    CRASH_ENV,
    CRASH_EXIT_CODE,
    PREPARE_STEPS,
    SKIP_ROLLBACK_ENV,
    UNPREPARE_STEPS,
)
from tests import builders as b
from tests.kubeletplugin.helpers import (
    DRIVER,
    PluginDirs,
    PluginProcess,
    invariant_violations,
    uid_of,
    write_claims,
)

CLAIM = b.SIM_GPU.named("crashy").request("gpus", count=None).allocated("gpu-0", "gpu-1").obj()


def _spec_exists(dirs: PluginDirs) -> bool:
    return (dirs.cdi / f"{DRIVER}-device_{uid_of(CLAIM)}.json").exists()


def _crash_during(dirs: PluginDirs, step: str, *, skip_rollback: bool = False) -> None:
    """Run the step's operation in a plugin told to die right after ``step``."""
    env = {CRASH_ENV: step}
    if skip_rollback:
        env[SKIP_ROLLBACK_ENV] = "1"
    if step.startswith("unprepare"):
        setup = PluginProcess(dirs).start()
        kubelet = setup.kubelet()
        assert kubelet.prepare(CLAIM).claims[uid_of(CLAIM)].error == ""
        kubelet.close()
        assert setup.terminate() == 0
    doomed = PluginProcess(dirs, env=env).start()
    kubelet = doomed.kubelet()
    with pytest.raises(grpc.RpcError):
        if step.startswith("prepare"):
            kubelet.prepare(CLAIM)
        else:
            kubelet.unprepare(CLAIM)
    kubelet.close()
    assert doomed.wait() == CRASH_EXIT_CODE, doomed.log()
    assert f"crashing at {step}" in doomed.log()


@pytest.mark.parametrize("step", PREPARE_STEPS)
def test_crash_during_prepare(dirs: PluginDirs, step: str) -> None:
    write_claims(dirs.claims, CLAIM)
    _crash_during(dirs, step)
    restarted = PluginProcess(dirs).start()
    try:
        assert invariant_violations(dirs) == [], restarted.log()
        kubelet = restarted.kubelet()
        retried = kubelet.prepare(CLAIM).claims[uid_of(CLAIM)]
        assert retried.error == ""
        assert [d.device_name for d in retried.devices] == ["gpu-0", "gpu-1"]
        assert _spec_exists(dirs)
        assert invariant_violations(dirs) == []
        kubelet.close()
    finally:
        restarted.terminate()


@pytest.mark.parametrize("step", UNPREPARE_STEPS)
def test_crash_during_unprepare(dirs: PluginDirs, step: str) -> None:
    write_claims(dirs.claims, CLAIM)
    _crash_during(dirs, step)
    restarted = PluginProcess(dirs).start()
    try:
        assert invariant_violations(dirs) == [], restarted.log()
        # Recovery finished the interrupted unprepare; the kubelet's retry is then a no-op.
        assert not _spec_exists(dirs)
        kubelet = restarted.kubelet()
        assert kubelet.unprepare(CLAIM).claims[uid_of(CLAIM)].error == ""
        assert kubelet.prepare(CLAIM).claims[uid_of(CLAIM)].error == ""
        assert invariant_violations(dirs) == []
        kubelet.close()
    finally:
        restarted.terminate()


@pytest.mark.parametrize(
    "step",
    ["prepare-started", "prepare-device", "prepare-cdi", "unprepare-device", "unprepare-cdi"],
)
def test_without_rollback_the_invariant_breaks(dirs: PluginDirs, step: str) -> None:
    """The control experiment: the crash tests above fail if rollback is removed."""
    write_claims(dirs.claims, CLAIM)
    _crash_during(dirs, step, skip_rollback=True)
    restarted = PluginProcess(dirs, env={SKIP_ROLLBACK_ENV: "1"}).start()
    try:
        assert "rollback disabled" in restarted.log()
        assert invariant_violations(dirs) != []
    finally:
        restarted.terminate()


def test_ready_line_and_clean_shutdown(dirs: PluginDirs) -> None:
    proc = PluginProcess(dirs).start()
    assert sum(1 for line in proc.lines if line.endswith("] ready")) == 1
    for sock in (dirs.dra_socket, dirs.registration_socket):
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert proc.terminate() == 0
    assert not dirs.dra_socket.exists()
    assert not dirs.registration_socket.exists()
    log = proc.log()
    assert "received SIGTERM" in log and "stopped; sockets removed" in log
    # What it is doing, in order.
    order = ["recovered", "serving the DRA API", "serving registration", "] ready"]
    positions = [next(i for i, line in enumerate(proc.lines) if word in line) for word in order]
    assert positions == sorted(positions)


def test_sigusr1_rereads_health_at_once(dirs: PluginDirs) -> None:
    config = dirs.root / "devices.yaml"
    config.write_text("gpus: {count: 2}\nhealth: {pollSeconds: 3600}\n")
    dirs.config = config
    proc = PluginProcess(dirs).start()
    try:
        (dirs.checkpoint / "health.yaml").write_text("gpu-1: {health: Unhealthy, message: fan}\n")
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not any("device gpu-1 is Unhealthy" in line for line in proc.lines):
            assert time.monotonic() < deadline, proc.log()
            time.sleep(0.05)
    finally:
        proc.terminate()


def test_bad_config_is_a_clean_error(dirs: PluginDirs) -> None:
    config = dirs.root / "devices.yaml"
    config.write_text("gpus: {count: -1}\n")
    dirs.config = config
    proc = PluginProcess(dirs)
    with pytest.raises(AssertionError):
        proc.start(timeout=20)
    assert proc.wait() == 2
    assert "gpus.count: Invalid value: -1" in proc.log()
    assert "Traceback" not in proc.log()


def test_corrupted_checkpoint_refuses_to_start(dirs: PluginDirs) -> None:
    dirs.checkpoint.mkdir(parents=True)
    good = {
        "apiVersion": "checkpoint.kubeletplugin.dra-solver.dev/v1",
        "kind": "DRAPluginCheckpoint",
        "claims": {},
        "checksum": "sha256:00",
    }
    (dirs.checkpoint / "checkpoint.json").write_text(json.dumps(good))
    proc = PluginProcess(dirs)
    with pytest.raises(AssertionError):
        proc.start(timeout=20)
    assert proc.wait() == 2
    assert "checksum: does not match the content" in proc.log()
    assert "Traceback" not in proc.log()
