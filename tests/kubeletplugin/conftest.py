"""Fixtures: a full plugin in-process (fast) and the directories it works in."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dra_solver.kubeletplugin import cli
from tests.kubeletplugin.helpers import Kubelet, PluginDirs, short_tmpdir


@pytest.fixture
def dirs() -> Iterator[PluginDirs]:
    root = short_tmpdir()
    try:
        yield PluginDirs(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Running:
    dirs: PluginDirs
    plugin: cli.Plugin
    kubelet: Kubelet


def namespace(dirs: PluginDirs) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(dirs.args())


@pytest.fixture
def start_plugin(dirs: PluginDirs) -> Iterator[Callable[..., Running]]:
    """Start the plugin in this process (same wiring as the CLI); stopped at teardown."""
    started: list[Running] = []

    def start(config: str | None = None) -> Running:
        if config is not None:
            dirs.config = dirs.root / "devices.yaml"
            dirs.config.write_text(config, encoding="utf-8")
        plugin = cli.build(namespace(dirs))
        plugin.start()
        running = Running(dirs, plugin, Kubelet(dirs.dra_socket, dirs.registration_socket))
        started.append(running)
        return running

    yield start
    for running in started:
        running.kubelet.close()
        running.plugin.shutdown()


@pytest.fixture
def config_path(dirs: PluginDirs) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        path = dirs.root / "devices.yaml"
        path.write_text(text, encoding="utf-8")
        dirs.config = path
        return path

    return write
