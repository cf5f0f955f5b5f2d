"""The bench's warm-up (``service.bench``) against a real ``serve``: what it reserved is given
back, also when the service refuses it part way, and the refusal is reported as the warm-up's."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_solver.service import bench
from dra_solver.service.client import Client


@pytest.mark.parametrize("stream", [False, True])
def test_a_refused_warm_up_says_so_and_leaves_nothing_held(tmp_path: Path, stream: bool) -> None:
    cluster = bench.write_cluster(tmp_path / "c", nodes=2, shape="gpu")
    # One reservation at most: the warm-up's second pod is refused.
    with bench.serve_process(cluster, "--max-reservations", "1") as (_, target), Client(target, timeout=60) as client:
        client.wait_ready(timeout=120)
        with pytest.raises(bench.BenchFailed, match=r"^warm-up: .*too many reservations in flight"):
            bench._warm_up(client, shape="gpu", concurrency=1, batch=1, stream=stream, window=1)
        assert client.inventory().reservations == 0
        # And a warm-up the service takes whole leaves nothing held either.
    with bench.serve_process(cluster) as (_, target), Client(target, timeout=60) as client:
        client.wait_ready(timeout=120)
        bench._warm_up(client, shape="gpu", concurrency=2, batch=1, stream=stream, window=2)
        assert client.inventory().reservations == 0
