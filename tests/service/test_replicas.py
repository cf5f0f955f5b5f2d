"""Stateless, interchangeable replicas (issue 16, docs/replicas.md): three real ``serve``
processes behind a round-robin client that sends every call to the next replica, so the Schedule
and the Reserve of one pod land on different replicas. The caller sends its in-flight
allocations (``in_flight``) with every call, as the controllers' scheduler does; one replica is
killed (SIGKILL) mid-run and a fresh one takes its place. No device may ever be in two claims.

The same run with the in-flight claims withheld hands one device out twice: the in-flight claims
are what keeps the replicas consistent, not luck of routing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_solver.service.client import Client, encode
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.gen.drasolver.v1 import allocation_pb2_grpc as pb_grpc
from tests.builders import ONE_GPU, device_class, gpu_slice, node
from tests.service.conftest import ROOT

NODES = 3
GPUS = 2
PODS = 9
"""More pods than the 6 devices: the last ones must find nothing free."""


class Replica:
    def __init__(self, inventory: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(inventory), "--port", "0", "--metrics-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        )
        assert self.proc.stdout is not None
        fields = dict(part.split("=", 1) for part in self.proc.stdout.readline().split())
        self.channel = grpc.insecure_channel(fields["grpc"])
        self.stub = pb_grpc.AllocationServiceStub(self.channel)  # type: ignore[no-untyped-call]

    def wait_serving(self) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)
        for _ in range(600):
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
        raise AssertionError("the replica never became ready")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


class RoundRobin:
    """Every call to the next replica; one that is down (or not ready) is skipped for the call."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.next = 0
        self.used: list[int] = []
        """The replica that answered each call."""

    def call(self, method: str, request: Any) -> Any:
        for _ in range(200):
            i = self.next % len(self.replicas)
            self.next += 1
            try:
                answer = getattr(self.replicas[i].stub, method)(request, timeout=30)
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                continue
            self.used.append(i)
            return answer
        raise AssertionError(f"no replica answered {method}")


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    objects = [device_class()]
    for i in range(NODES):
        objects += [node(f"node-{i}"), gpu_slice(f"node-{i}", count=GPUS)]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


@pytest.fixture
def replicas(inventory: Path) -> Iterator[tuple[list[Replica], Callable[[], Replica]]]:
    started: list[Replica] = []

    def start() -> Replica:
        r = Replica(inventory)
        started.append(r)
        return r

    try:
        yield [start() for _ in range(3)], start
    finally:
        for r in started:
            r.stop()


def devices(answer: pb.ScheduleResponse) -> list[str]:
    return [d.split("=", 1)[1] for d in Client.devices(answer)]


def run_pods(rr: RoundRobin, prefix: str, *, send_in_flight: bool, between: Callable[[int], None] = lambda i: None) -> list[str]:
    """Schedule, then Reserve, each pod's claim, as a scheduler does; the devices each got."""
    in_flight: list[dict[str, Any]] = []
    taken: list[str] = []
    for i in range(PODS):
        between(i)
        claim = ONE_GPU.named(f"{prefix}-{i}").uid(f"{prefix}-uid-{i}").obj()
        sent = [encode(c) for c in in_flight] if send_in_flight else []
        for _attempt in range(5):
            answer = rr.call("Schedule", pb.ScheduleRequest(claims=[encode(claim)], in_flight=sent, in_flight_complete=True))
            if not answer.node:
                break
            allocated = Client.with_allocations([claim], answer)
            try:
                held = rr.call("Reserve", pb.ReserveRequest(claims=[encode(allocated[0])], node=answer.node, in_flight=sent, in_flight_complete=True))
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.ABORTED, err
                continue  # taken meanwhile: schedule again
            assert held.reservation.id == "", "a stateless call must leave nothing on the replica"
            in_flight.append(allocated[0])  # what the scheduler writes to the API server next
            taken += devices(answer)
            break
    return taken


def test_three_replicas_round_robin_with_one_killed_never_share_a_device(replicas: tuple[list[Replica], Callable[[], Replica]]) -> None:
    members, start = replicas
    rr = RoundRobin(list(members))

    def chaos(i: int) -> None:
        if i == 3:
            members[1].kill()  # mid-run, without warning
        if i == 6:
            fresh = start()  # a restarted replica knows nothing, and needs nothing
            fresh.wait_serving()
            rr.replicas[1] = fresh

    taken = run_pods(rr, "pod", send_in_flight=True, between=chaos)
    assert len(taken) == len(set(taken)), f"a device in two claims: {sorted(taken)}"
    assert len(taken) == NODES * GPUS, "every device is used, then nothing fits"
    # Consecutive calls went to different replicas (Schedule and Reserve of one pod included),
    # and the restarted replica answered some of them.
    assert all(a != b for a, b in zip(rr.used, rr.used[1:], strict=False))
    assert rr.used[-6:].count(1) >= 1

    # The control: the same calls without the in-flight claims give one device to two claims.
    control = run_pods(RoundRobin(rr.replicas), "control", send_in_flight=False)
    assert len(control) > len(set(control))
