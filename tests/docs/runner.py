"""Runs the ``console`` examples of one docs file the way a reader would, in a scratch directory.

The scratch directory holds symlinks to the repository's top-level entries, so examples use
paths like ``examples/...`` and ``deploy/...`` unchanged while anything they write (reports,
output files) lands outside the checkout. ``dra-solver`` resolves to the running virtualenv.
``grpcurl`` resolves to the real one when installed, else to tests/docs/grpcurl.py, which
speaks the same command line over server reflection.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs import cluster_check
from tests.docs.mdblocks import Block, Command, shown_matches

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TIMEOUT = 60.0
# Commands that run this suite (a docs test running them would recurse) or install into the
# virtualenv the suite is running from: they must be marked skip.
_RECURSIVE = re.compile(
    r"(^|[\s/])(scripts/test\.sh|scripts/demo\.sh|\.ci/run|pytest|pip install)(\s|$)"
)


class DocExampleFailed(AssertionError):
    """An example did not do what its docs say."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_sandbox(directory: Path) -> Path:
    """A working directory whose entries are the repository's own (as symlinks)."""
    work = directory / "work"
    work.mkdir()
    for entry in sorted(ROOT.iterdir()):
        if entry.name in {".git", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}:
            continue
        (work / entry.name).symlink_to(entry)
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    if not _which("grpcurl"):
        shim = bin_dir / "grpcurl"
        shim.write_text(
            f"#!/bin/sh\nexec {sys.executable} -m tests.docs.grpcurl \"$@\"\n", encoding="utf-8"
        )
        shim.chmod(0o755)
    return work


def _which(name: str) -> str | None:
    for part in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(part) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


@dataclass
class _Background:
    proc: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@dataclass
class FileRun:
    """The state shared by the blocks of one docs file: port map and background servers."""

    sandbox: Path
    env: dict[str, str]
    ports: dict[str, str] = field(default_factory=dict)
    servers: list[_Background] = field(default_factory=list)

    def substitute(self, text: str) -> str:
        for old, new in self.ports.items():
            text = re.sub(rf"(?<!\d){old}(?!\d)", new, text)
        return text

    def close(self) -> None:
        for server in reversed(self.servers):
            server.stop()

    def run_block(self, block: Block) -> None:
        opts = block.options
        if "skip" in opts:
            return
        if "ports" in opts:
            for port in opts["ports"].split(","):
                self.ports.setdefault(port.strip(), str(free_port()))
        if "cluster" in opts:
            for command in block.commands:
                problem = cluster_check.check(command.text)
                if problem:
                    raise DocExampleFailed(f"{block.ident}: $ {command.text}\n  {problem}")
            return
        for command in block.commands:
            if _RECURSIVE.search(command.text):
                raise DocExampleFailed(
                    f"{block.ident}: $ {command.text}\n  runs the test suite or installs into its "
                    'virtualenv; mark the block <!-- doctest: skip="why" -->'
                )
        timeout = float(opts.get("timeout", DEFAULT_TIMEOUT))
        if "background" in opts:
            if len(block.commands) != 1:
                raise DocExampleFailed(f"{block.ident}: a background block has one command")
            self._start(block, block.commands[0], timeout)
            return
        deadline = time.monotonic() + timeout
        last = len(block.commands) - 1
        for i, command in enumerate(block.commands):
            want = int(opts.get("exit", "0")) if i == last else 0
            self._run(block, command, want, max(1.0, deadline - time.monotonic()))

    def _run(self, block: Block, command: Command, want_exit: int, timeout: float) -> None:
        text = self.substitute(command.text)
        try:
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", text],
                cwd=self.sandbox,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise DocExampleFailed(f"{block.ident}: $ {text}\n  timed out after {timeout:.0f}s") from err
        output = done.stdout
        if done.returncode != want_exit:
            raise DocExampleFailed(
                f"{block.ident}: $ {text}\n  exit status {done.returncode}, the docs expect "
                f"{want_exit}\n--- output ---\n{output[-4000:]}"
            )
        shown = tuple(self.substitute(s) for s in command.shown)
        missing = shown_matches(shown, output)
        if missing is not None:
            raise DocExampleFailed(
                f"{block.ident}: $ {text}\n  shown line not in the output: {missing!r}"
                f"\n--- output ---\n{output[-4000:]}"
            )

    def _start(self, block: Block, command: Command, timeout: float) -> None:
        text = self.substitute(command.text)
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {text}"],
            cwd=self.sandbox,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        server = _Background(proc)
        self.servers.append(server)
        first = threading.Event()

        def drain() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                server.output.append(line)
                first.set()
            first.set()

        threading.Thread(target=drain, daemon=True).start()
        if not first.wait(timeout) or not server.output:
            raise DocExampleFailed(
                f"{block.ident}: $ {text}\n  no output within {timeout:.0f}s "
                f"(exit status {proc.poll()})"
            )
        # Servers print their first line once listening; give it a moment to settle.
        time.sleep(0.2)
        if proc.poll() is not None:
            raise DocExampleFailed(
                f"{block.ident}: $ {text}\n  exited with {proc.returncode}:\n{''.join(server.output)}"
            )
        shown = tuple(self.substitute(s) for s in command.shown[:1])
        missing = shown_matches(shown, server.output[0])
        if missing is not None:
            raise DocExampleFailed(
                f"{block.ident}: $ {text}\n  first line {server.output[0]!r} does not show {missing!r}"
            )


def environment(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(scratch / "bin"), venv_bin, env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTEST_XDIST_WORKER", None)
    return env
