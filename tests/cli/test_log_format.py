"""--log-format text|json: klog's text header by default, Kubernetes' JSON field names in every
long-running component (one setup module, service/logsetup.py)."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dra_solver import cli
from dra_solver.service import logsetup
from tests.kubeletplugin.helpers import PluginDirs, PluginProcess, short_tmpdir

ROOT = Path(__file__).resolve().parents[2]
KLOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] ")
JSON_KEYS = {"ts", "caller", "logger", "level", "msg"}


def _log_lines(log_format: str, emit: object) -> list[str]:
    stream = io.StringIO()
    logsetup.setup_logging(log_format=log_format, level="debug", stream=stream)
    try:
        assert callable(emit)
        emit()
    finally:
        logsetup.setup_logging(log_format="text", level="warning", stream=io.StringIO())
    return stream.getvalue().splitlines()


def _emit() -> None:
    log = logging.getLogger("dra_solver.test")
    log.debug("deep %d", 4)
    log.info("ready")
    log.warning("careful")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")


def test_text_is_klogs_header() -> None:
    lines = _log_lines("text", _emit)
    assert [line[0] for line in lines[:4]] == ["I", "I", "W", "E"]
    for line in lines[:4]:
        assert KLOG.match(line), line
    assert lines[1].endswith("test_log_format.py:41] ready")
    assert "ValueError: boom" in lines[-1], "the traceback follows the record"


def test_json_has_kubernetes_field_names() -> None:
    docs = [json.loads(line) for line in _log_lines("json", _emit)]
    assert [d["msg"] for d in docs] == ["deep 4", "ready", "careful", "failed"]
    for doc in docs:
        assert set(doc) >= JSON_KEYS, doc
        assert isinstance(doc["ts"], float) and doc["caller"].startswith("test_log_format.py:")
    assert [d.get("v") for d in docs] == [4, 0, None, None], "v only on info lines, as klog"
    assert [d["level"] for d in docs] == ["debug", "info", "warning", "error"]
    assert docs[-1]["err"] == "ValueError: boom" and "Traceback" in docs[-1]["stacktrace"]


@pytest.mark.parametrize("command", ["serve", "controllers", "kubelet-plugin", "local-cluster"])
def test_every_long_running_command_has_the_flags(command: str) -> None:
    parser = cli.build_parser([command])
    sub = next(a for a in parser._actions if a.dest == "command")
    flags = {o for a in sub.choices[command]._actions for o in a.option_strings}  # type: ignore[attr-defined]
    assert "--log-format" in flags
    if command != "local-cluster":
        assert "--log-level" in flags


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_serve_and_kubelet_plugin_log_the_same_json_fields() -> None:
    serve = subprocess.Popen(
        [sys.executable, "-m", "dra_solver", "serve", "--inventory", "examples/demo/cluster.yaml",
         "--port", "0", "--metrics-port", "-1", "--log-format", "json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert serve.stdout is not None
        assert serve.stdout.readline().startswith("grpc=")
    finally:
        serve.send_signal(signal.SIGTERM)
        _, serve_err = serve.communicate(timeout=30)
    root = short_tmpdir()
    try:
        plugin = PluginProcess(PluginDirs(root), extra_args=["--log-format", "json"]).start()
        assert plugin.terminate() == 0, plugin.log()
        plugin_lines = _json_lines(plugin.log())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    serve_lines = _json_lines(serve_err)
    assert serve_lines and plugin_lines, (serve_err, plugin_lines)
    assert not [line for line in serve_err.splitlines() if line and not line.startswith("{")]
    for doc in serve_lines + plugin_lines:
        assert set(doc) >= JSON_KEYS, doc
    assert any(d["msg"] == "ready" for d in plugin_lines)


def test_logs_follow_stderr_when_it_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread that outlives whoever replaced sys.stderr (a test's capture, an embedding
    program) must not write to the closed stream it found at setup."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logsetup.setup_logging(log_format="text", level="info")
    try:
        logging.getLogger("dra_solver.test").info("to the first")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("dra_solver.test").info("to the second")
        assert "Logging error" not in second.getvalue()
        assert re.fullmatch(r"I\d{4} [^\n]* to the second\n", second.getvalue()), second.getvalue()
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if h.get_name() == logsetup._HANDLER_NAME]:
            root.removeHandler(handler)
