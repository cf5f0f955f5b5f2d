"""``serve --grace`` holds even when a call is stuck decoding (issue 15): a real ``dra-solver
serve`` process gets SIGTERM while it decodes a claim of about 12 MB of YAML, which takes the
pure-Python decoder far longer than the grace period, and exits within the grace period plus a
small margin, leaving that call unanswered rather than waiting for it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

import grpc

from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.gen.drasolver.v1 import allocation_pb2_grpc as pb_grpc
from tests.service.conftest import DEMO, ROOT

GRACE = 1.0
MARGIN = 3.0
"""Past the grace period: serve waits at most one more second for the server to stop, then
exits without the stuck call; the rest is process teardown on a busy machine."""

ANNOTATIONS = 600_000
"""Lines of YAML in the claim (about 12 MB): tens of seconds of decoding, well under the
64 MiB message and input limits."""


def slow_claim() -> bytes:
    lines = "".join(f"    key-{i}: value-{i}\n" for i in range(ANNOTATIONS))
    return ("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: slow\n  namespace: default\n"
            f"  annotations:\n{lines}spec:\n  devices:\n    requests:\n    - name: gpu\n      exactly:\n"
            "        deviceClassName: gpu.example.com\n").encode()


def in_flight(metrics_url: str) -> float:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("dra_solver_grpc_requests_in_flight"):
            return float(line.split()[-1])
    return 0.0


def test_sigterm_during_a_slow_decode_exits_within_grace() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dra_solver.cli", "serve", "--inventory", str(DEMO / "cluster.yaml"), "--port", "0",
         "--metrics-port", "0", "--grace", str(GRACE)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    channel = None
    try:
        assert proc.stdout is not None
        fields = dict(part.split("=", 1) for part in proc.stdout.readline().split())
        metrics = f"http://{fields['metrics']}/metrics"
        channel = grpc.insecure_channel(fields["grpc"], options=[("grpc.max_send_message_length", 64 << 20)])
        stub = pb_grpc.AllocationServiceStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Allocate.future(pb.AllocateRequest(claims=[slow_claim()], node="node-a"), timeout=300)
        deadline = time.monotonic() + 60
        while in_flight(metrics) < 1:
            assert time.monotonic() < deadline and not call.done(), "the call never started"
            time.sleep(0.05)
        time.sleep(0.5)  # well into decoding

        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(GRACE + MARGIN + 30)  # a bound for the test itself; the property is below
        took = time.monotonic() - start
        assert code == 0, proc.stderr.read() if proc.stderr else ""
        assert took < GRACE + MARGIN, f"exited {took:.1f} s after SIGTERM with --grace {GRACE}"
        # The call was still decoding when the process went: it got no answer.
        err = call.exception(timeout=30)
        assert err is not None and err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), err
        assert proc.stderr is not None
        assert "calls still running after the 1.0s grace period" in proc.stderr.read()
    finally:
        if channel is not None:
            channel.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
