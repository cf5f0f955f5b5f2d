"""Paths built from claims stay in their directories; leftovers are cleaned; modes are exact.

A claim UID, namespace, name, device or share ID reaches the plugin from the kubelet or from a
claim source, and several of them end up in file names (the CDI spec, the simulated backend's
per-claim markers). These tests send hostile values over the real unix socket and check that
each is refused as that claim's error while nothing is written outside the plugin's
directories, and that a plugin started with umask 000 still creates nothing group- or
world-writable.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_solver.kubeletplugin import fsutil
from dra_solver.kubeletplugin.cdi import CdiHandler
from dra_solver.kubeletplugin.discovery import SimulatedProfile
from dra_solver.kubeletplugin.simconfig import SimConfig
from dra_solver.kubeletplugin.state import ClaimRef, claim_ref_problem
from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from tests import builders as b
from tests.kubeletplugin.conftest import Running
from tests.kubeletplugin.helpers import (
    DRIVER,
    NODE,
    PluginDirs,
    PluginProcess,
    invariant_violations,
    uid_of,
    write_claims,
)

TRAVERSAL = "../../../ESCAPED"


def everything_under(root: Path) -> list[Path]:
    return sorted(Path(d) / n for d, dirs, files in os.walk(root) for n in [*dirs, *files])


def assert_nothing_escaped(dirs: PluginDirs) -> None:
    """No file named ESCAPED anywhere in the scratch tree or next to it."""
    assert not [p for p in everything_under(dirs.root) if "ESCAPED" in p.name]
    for level in (dirs.root, *dirs.root.parents[:2]):
        assert not (level / "ESCAPED").exists(), level


# --- the kubelet's view, over the real socket --------------------------------------------------


def test_traversal_uid_from_a_directory_source_is_refused_per_claim(
    start_plugin: Callable[..., Running],
) -> None:
    running = start_plugin()
    evil = b.SIM_GPU.named("evil").uid(TRAVERSAL).request("gpu", count=None).allocated("gpu-0").obj()
    good = b.SIM_GPU.named("good").request("gpu", count=None).allocated("gpu-1").obj()
    write_claims(running.dirs.claims, evil, good)

    resp = running.kubelet.prepare(evil, good)

    error = resp.claims[TRAVERSAL].error
    assert error.startswith('claim default/evil: uid: Invalid value: "../../../ESCAPED": ')
    assert "must start and end with an alphanumeric character" in error
    assert not resp.claims[TRAVERSAL].devices
    # One bad claim never fails the batch.
    assert resp.claims[uid_of(good)].error == ""
    assert [d.device_name for d in resp.claims[uid_of(good)].devices] == ["gpu-1"]
    assert_nothing_escaped(running.dirs)
    assert invariant_violations(running.dirs) == []

    unprepared = running.kubelet.unprepare(evil)
    assert "uid: Invalid value" in unprepared.claims[TRAVERSAL].error
    assert_nothing_escaped(running.dirs)


@pytest.mark.parametrize(
    ("namespace", "name", "uid", "expected"),
    [
        ("..", "c", "u-1", 'claim ../c: namespace: Invalid value: "..": a lowercase RFC 1123 label'),
        ("default", "a/b", "u-1", 'claim default/a/b: name: Invalid value: "a/b": a lowercase'),
        ("default", "c", "a/b", 'claim default/c: uid: Invalid value: "a/b": must consist of'),
        ("default", "c", ".hidden", 'uid: Invalid value: ".hidden": must consist of'),
        ("default", "c", "x" * 129, 'uid: Invalid value: "' + "x" * 64 + '"... (129 characters)'),
        ("default", "c", "", "claim default/c: uid: Required value"),
    ],
    ids=["namespace-dotdot", "name-slash", "uid-slash", "uid-dotfile", "uid-long", "uid-empty"],
)
def test_claim_references_are_checked_before_use(
    start_plugin: Callable[..., Running], namespace: str, name: str, uid: str, expected: str
) -> None:
    running = start_plugin()
    bad = b.SIM_GPU.named(name, ns=namespace).uid(uid or "unused").request("gpu", count=None).allocated("gpu-0").obj()
    bad["metadata"]["uid"] = uid
    resp = running.kubelet.prepare(bad)
    assert expected in resp.claims[uid].error
    assert not running.dirs.checkpoint.joinpath("simulated-devices").exists()
    assert not list(running.dirs.cdi.glob("*.json"))


def test_valid_references_pass() -> None:
    assert claim_ref_problem(ClaimRef("default", "gpu.claim-1", "3f1c0a52-1b7e-4f4e-9c43")) == ""
    assert claim_ref_problem(ClaimRef("", "", "uid-1"), need_name=False) == ""


def test_traversal_share_id_is_refused(start_plugin: Callable[..., Running]) -> None:
    running = start_plugin()
    evil = b.SIM_GPU.named("shared").request("net", count=None).allocated(b.result("net", "nic-0", driver=b.SIM_DRIVER, pool=b.NODE_1, share_id=TRAVERSAL)).obj()
    write_claims(running.dirs.claims, evil)
    error = running.kubelet.prepare(evil).claims[uid_of(evil)].error
    assert error.startswith(
        'claim default/shared: status.allocation.devices.results[0].shareID: Invalid value: '
        '"../../../ESCAPED"'
    ), error
    assert_nothing_escaped(running.dirs)
    assert invariant_violations(running.dirs) == []


# --- below the driver: every layer confines its own paths ---------------------------------------


def test_the_marker_path_is_confined(tmp_path: Path) -> None:
    profile = SimulatedProfile(
        SimConfig(), node=NODE, state_dir=tmp_path / "state", health_file=None
    )
    with pytest.raises(fsutil.UnsafePathError, match="must not contain '/'"):
        profile.prepare_device(TRAVERSAL, "gpu-0", share_id=None)
    with pytest.raises(fsutil.UnsafePathError, match=r"must not be '\.' or '\.\.'"):
        profile.prepare_device("..", "gpu-0", share_id=None)
    with pytest.raises(fsutil.UnsafePathError):
        profile.prepare_device("uid-1", "gpu-0", share_id="/../../ESCAPED")
    with pytest.raises(fsutil.UnsafePathError):
        profile.unprepare_device(TRAVERSAL, "gpu-0", share_id=None)
    assert not [p for p in everything_under(tmp_path) if "ESCAPED" in p.name]
    profile.prepare_device("uid-1", "gpu-0", share_id=None)
    assert profile.prepared_markers() == {"uid-1": {"gpu-0"}}


def test_a_claim_object_with_a_traversal_uid_fails_in_state_too(
    start_plugin: Callable[..., Running],
) -> None:
    """DeviceState checks the claim object's UID itself, not only what the kubelet sent."""
    running = start_plugin()
    obj = decode_object(b.SIM_GPU.named("evil").uid(TRAVERSAL).request("gpu", count=None).allocated("gpu-0").obj(), source="test")
    assert isinstance(obj, o.ResourceClaim)
    results = running.plugin.state.prepare([obj])
    assert results[TRAVERSAL].error.startswith("claim default/evil: metadata.uid: Invalid value")
    assert_nothing_escaped(running.dirs)
    errors = running.plugin.state.unprepare([ClaimRef("default", "evil", TRAVERSAL)])
    assert "uid: Invalid value" in errors[TRAVERSAL]


def test_cdi_spec_paths_stay_in_the_cdi_directory(tmp_path: Path) -> None:
    cdi = CdiHandler(tmp_path / "cdi", driver=DRIVER, cdi_class="device")
    assert cdi.spec_path(TRAVERSAL).parent == tmp_path / "cdi"
    (tmp_path / "cdi").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    link = tmp_path / "cdi" / f"{DRIVER}-device_linked.json"
    link.symlink_to(outside / "target.json")
    with pytest.raises(fsutil.UnsafePathError, match="outside"):
        cdi.spec_path("linked")


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\0b", "x" * 256])
def test_confined_refuses_anything_but_one_plain_component(tmp_path: Path, name: str) -> None:
    with pytest.raises(fsutil.UnsafePathError):
        fsutil.confined(tmp_path, "ok", name)


def test_confined_follows_symlinks_before_deciding(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "inside").mkdir()
    (base / "up").symlink_to(tmp_path)
    assert fsutil.confined(base, "inside", "file") == base / "inside" / "file"
    with pytest.raises(fsutil.UnsafePathError, match="outside"):
        fsutil.confined(base, "up", "file")


# --- leftovers from a crash mid-write ---------------------------------------------------------


def test_recovery_removes_leftover_temporary_files(
    start_plugin: Callable[..., Running], dirs: PluginDirs
) -> None:
    ours = [
        dirs.checkpoint / ".checkpoint.json.tmp",
        dirs.checkpoint / "simulated-devices" / "uid-1" / ".gpu-0.tmp",
        dirs.cdi / f".{DRIVER}-device_uid-1.json.tmp",
    ]
    theirs = [
        dirs.cdi / ".other.example.com-device_uid-1.json.tmp",  # another driver's, mid-write
        dirs.cdi / "vendor.json",
        dirs.checkpoint / "notes.tmp",  # not a name write_atomic uses
    ]
    for path in ours + theirs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("partial")
    running = start_plugin()
    assert [p for p in ours if p.exists()] == []
    assert [p for p in theirs if not p.exists()] == []
    # The plugin works normally afterwards.
    c = b.SIM_GPU.named("after").request("gpu", count=None).allocated("gpu-0").obj()
    write_claims(running.dirs.claims, c)
    assert running.kubelet.prepare(c).claims[uid_of(c)].error == ""


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()  # os.replace of a file onto a directory fails after the data is written
    with pytest.raises(IsADirectoryError):
        fsutil.write_atomic(target, b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_a_symlink_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / ".target.tmp").symlink_to(victim)
    with pytest.raises(OSError):
        fsutil.write_atomic(tmp_path / "target", b"data")
    assert victim.read_text() == "untouched"


# --- modes whatever the umask ------------------------------------------------------------------


def test_umask_000_still_gives_private_directories_and_exact_file_modes(
    dirs: PluginDirs,
) -> None:
    plugin = PluginProcess(dirs, umask=0).start()
    try:
        kubelet = plugin.kubelet()
        c = b.SIM_GPU.named("umask").request("gpu", count=None).allocated("gpu-0").obj()
        write_claims(dirs.claims, c)
        dirs.claims.chmod(0o755)
        assert kubelet.prepare(c).claims[uid_of(c)].error == ""
        kubelet.close()
        modes = {
            p: stat.S_IMODE(p.lstat().st_mode)
            for p in everything_under(dirs.root)
            if not p.is_relative_to(dirs.claims)  # written by this test, not the plugin
        }
        expected = {
            dirs.plugin.parent: 0o700,
            dirs.plugin: 0o700,
            dirs.dra_socket: 0o600,
            dirs.registry: 0o700,
            dirs.registration_socket: 0o600,
            dirs.checkpoint: 0o700,
            dirs.checkpoint / "checkpoint.json": 0o600,
            dirs.checkpoint / "plugin.lock": 0o600,
            dirs.checkpoint / "simulated-devices": 0o700,
            dirs.checkpoint / "simulated-devices" / uid_of(c): 0o700,
            dirs.checkpoint / "simulated-devices" / uid_of(c) / "gpu-0": 0o600,
            dirs.cdi: 0o755,
            dirs.cdi / f"{DRIVER}-device_{uid_of(c)}.json": 0o644,
            dirs.slices: 0o755,
        }
        assert {p: modes.get(p) for p in expected} == expected
        writable = {p: oct(m) for p, m in modes.items() if m & 0o022}
        assert writable == {}, "group- or world-writable"
        slices = [p for p in modes if p.parent == dirs.slices]
        assert slices and all(modes[p] == 0o644 for p in slices)
    finally:
        assert plugin.terminate() == 0, plugin.log()


def test_confined_refuses_a_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(OSError):  # UnsafePathError, or the OS's own ELOOP on Python >= 3.13
        fsutil.confined(tmp_path, "loop", "file")
