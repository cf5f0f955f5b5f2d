"""Listen first, load second (issue 16): the ports open at once, health says NOT_SERVING and
calls get UNAVAILABLE while the inventory loads, progress lines say how far it got, and health
turns SERVING once it is loaded and indexed.

The load is held at its first progress line (a logging handler that waits), so what a caller
sees during a load is observed, not raced.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import grpc
import pytest

from dra_solver.service import engine as e
from dra_solver.service.client import Client
from dra_solver.service.inventory import FileSource
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from dra_solver.service.server import ServerDeps, Service
from tests.builders import ONE_GPU, device_class, gpu_slice, node

NODES = 40


class HoldAtFirstProgress(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.seen = threading.Event()
        self.go = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if "inventory: loaded" in line and not self.seen.is_set():
            self.seen.set()
            assert self.go.wait(60)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    objects = [device_class()]
    for i in range(NODES):
        objects += [node(f"node-{i:02}"), gpu_slice(f"node-{i:02}", count=2)]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def test_not_serving_with_progress_until_loaded(inventory: Path) -> None:
    source = FileSource(str(inventory))
    source.progress_interval = 0.0  # a line per object
    engine = e.Engine(source=source, reservations=ReservationStore(), metrics=Metrics())
    service = Service("127.0.0.1:0", ServerDeps(engine=engine), metrics_address="127.0.0.1", metrics_port=None)
    handler = HoldAtFirstProgress()
    logger = logging.getLogger("dra_solver.service")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    failed: list[BaseException] = []
    client = None
    try:
        service.listen()
        client = Client(f"127.0.0.1:{service.port}", timeout=30)
        assert client.health() == "NOT_SERVING"  # listening before anything is loaded
        service.load_in_background(failed.append)
        assert handler.seen.wait(60), "no progress line"
        # Mid-load: still not serving, and a call is told to come back (UNAVAILABLE).
        assert client.health() == "NOT_SERVING"
        with pytest.raises(grpc.RpcError) as raised:
            client.schedule([ONE_GPU.named("early").obj()])
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        handler.go.set()
        for _ in range(600):
            if client.health() == "SERVING":
                break
            threading.Event().wait(0.05)
        assert not failed, failed
        assert client.health() == "SERVING"
        assert client.schedule([ONE_GPU.named("late").obj()]).node
        progress = [line for line in handler.lines if "inventory: loaded" in line]
        assert progress[0].startswith("inventory: loaded 0/") or progress[0].startswith("inventory: loaded 1/")
        assert any(f"/{NODES} nodes" in line for line in progress), progress
        assert any(f"loaded {NODES} nodes" in line for line in handler.lines), handler.lines
        assert any("indexed" in line and "serving" in line for line in handler.lines), handler.lines
    finally:
        handler.go.set()
        logger.removeHandler(handler)
        logger.setLevel(level)
        if client is not None:
            client.close()
        service.stop(0)


def test_cli_inputs_report_progress_on_large_files(inventory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``allocate`` and ``schedule`` read their files through ``read_inputs(progress=...)``: a
    file over the size threshold gets progress lines, and a last line with the total."""
    from dra_solver.service import files

    lines: list[str] = []
    monkeypatch.setattr(files, "PROGRESS_INTERVAL", 0.0)
    small = files.read_inputs([str(inventory)], progress=lines.append)
    assert not lines  # under the threshold: quiet
    monkeypatch.setattr(files, "PROGRESS_MIN_CHARS", 1)
    large = files.read_inputs([str(inventory)], progress=lines.append)
    assert [o.describe() for o in large.objects] == [o.describe() for o in small.objects]
    total = 1 + 2 * NODES
    assert lines[0].startswith(f"{inventory}: read 1 objects (")
    assert lines[-1].startswith(f"{inventory}: read {total:,} objects (0 MB) in ")
