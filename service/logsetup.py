"""Logging for every long-running dra-solver process, set up in one place.

``serve``, ``controllers``, ``kubelet-plugin`` (and what ``local-cluster`` starts) share the
flags ``--log-format text|json`` and ``--log-level``, and so write the same lines:

- ``text`` (default) is klog's header, as Kubernetes components print it, so the tools that
  read kube-scheduler's logs read ours::

      I0102 15:04:05.123456   12345 cli.py:270] ready

  (severity letter I/W/E, month and day, local time with microseconds, process id padded to
  7, file:line, ``]``, the message; tracebacks follow on their own lines.)
- ``json`` is one object per line with Kubernetes' JSON log field names (``ts`` in seconds
  since the epoch, ``caller``, ``msg``, ``v`` for the verbosity of an info line, ``err`` for
  an exception), plus ``level`` (``debug``, ``info``, ``warning``, ``error``) and ``logger``
  (the Python logger's name), the same in every component; an exception's traceback is in
  ``stacktrace``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from typing import IO, Any

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
_HANDLER_NAME = "dra-solver"

_SEVERITY = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "F"}
_VERBOSITY = {logging.DEBUG: 4, logging.INFO: 0}
"""klog verbosity of an info line: debug records are klog's V(4) (as -v=4 shows them)."""


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="text: klog's format, as Kubernetes components log (default); "
                             "json: one object per line with Kubernetes' JSON field names")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                        help="least severe records logged (default info)")


def _severity(record: logging.LogRecord) -> str:
    return _SEVERITY.get(record.levelno, "I" if record.levelno < logging.WARNING else "E")


class KlogFormatter(logging.Formatter):
    """klog's text header in front of each message."""

    def format(self, record: logging.LogRecord) -> str:
        local = time.localtime(record.created)
        micros = int((record.created - int(record.created)) * 1_000_000)
        header = (
            f"{_severity(record)}{local.tm_mon:02d}{local.tm_mday:02d} "
            f"{local.tm_hour:02d}:{local.tm_min:02d}:{local.tm_sec:02d}.{micros:06d} "
            f"{record.process or os.getpid():7d} {record.filename}:{record.lineno}] "
        )
        text = header + record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info).rstrip("\n")
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with Kubernetes' field names."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "caller": f"{record.filename}:{record.lineno}",
            "logger": record.name,
            "level": record.levelname.lower() if record.levelno != logging.CRITICAL else "error",
            "msg": record.getMessage(),
        }
        if record.levelno in _VERBOSITY:
            doc["v"] = _VERBOSITY[record.levelno]
        if record.exc_info and record.exc_info[1] is not None:
            err = record.exc_info[1]
            doc["err"] = f"{type(err).__name__}: {err}"
            doc["stacktrace"] = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        return json.dumps(doc, ensure_ascii=False, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a record comes: a test harness or an embedding
    program may replace it, and a handler holding the old one would write to a closed stream
    from threads that outlive it."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: IO[str]) -> None:
        pass


def setup_logging(*, log_format: str = "text", level: str = "info", stream: IO[str] | None = None) -> None:
    """Log ``log_format`` to ``stream`` (stderr) from the root logger. Called again, it
    replaces the handler it added before; handlers others added (pytest's capture, an
    embedding program's) stay."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"--log-format: Unsupported value: {log_format!r}: supported values: {', '.join(LOG_FORMATS)}")
    handler: logging.StreamHandler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()  # type: ignore[type-arg]
    handler.setFormatter(JsonFormatter() if log_format == "json" else KlogFormatter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER_NAME:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def setup_from_args(args: argparse.Namespace) -> None:
    """:func:`setup_logging` from the flags :func:`add_logging_arguments` added."""
    setup_logging(log_format=getattr(args, "log_format", "text"), level=getattr(args, "log_level", "info"))
