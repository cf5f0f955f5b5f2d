"""What one gRPC call costs in Python before any work: a bare server against ``dra-solver serve``.

    python benchmarks/grpc_floor.py [--calls 3000] [--work-us 250] [-o json]

Starts, one after the other, a bare gRPC server (grpcio's sync server with only a Health
servicer that answers at once) and ``dra-solver serve`` on the demo cluster, each in its own
process, and times ``calls`` sequential Health calls to each from this process (after 300
warm-up calls): wall time per call, the server's CPU per call (from /proc) and the client's.
One sequential caller cannot make more than 1000 / wall-ms calls per second, whatever the
service does: the floor under ``dra-solver bench``'s one-call-per-pod figures, and the reason
for ``ScheduleBatch`` (docs/grpc-api.md#batches). Then the same for ``calls`` messages on one
bidirectional stream to a bare server that echoes them (a row "bare grpcio stream"): what a
message of ``ScheduleStream`` (docs/grpc-api.md#streams) costs before any work; and the same
stream with two messages in flight (as ``dra-solver bench --batch stream --window 2`` sends
them), without work and with ``--work-us`` of Python work per message in the handler: what
the serving thread spends per message besides its own work (docs/placement.md, "Where a
whole-GPU pod's time goes now").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import sys
import time
from concurrent import futures
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from dra_solver.service.bench import cpu_seconds, serve_process  # noqa: E402


class _Serving(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext) -> health_pb2.HealthCheckResponse:
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def _bare_server(ready: Any, port: Any) -> None:  # a multiprocessing Event and Value
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    health_pb2_grpc.add_HealthServicer_to_server(_Serving(), server)
    port.value = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ready.set()
    server.wait_for_termination()


def _busy(microseconds: float) -> None:
    """Python work for ``microseconds`` (a stand-in for an answer's)."""
    end = time.perf_counter() + microseconds / 1e6
    while time.perf_counter() < end:
        pass


def _echo(messages: Any, context: grpc.ServicerContext) -> Any:
    yield from messages


def _echo_after(work_us: float) -> Any:
    def echo(messages: Any, context: grpc.ServicerContext) -> Any:
        for message in messages:
            _busy(work_us)
            yield message
    return echo


def _bare_stream_server(ready: Any, port: Any, work_us: float = 0.0) -> None:  # a multiprocessing Event and Value
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    handler = _echo_after(work_us) if work_us > 0 else _echo
    echo = grpc.stream_stream_rpc_method_handler(handler, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Echo", {"Stream": echo}),))
    port.value = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ready.set()
    server.wait_for_termination()


def _time_messages(target: str, pid: int, calls: int, window: int = 1) -> dict[str, float]:
    """``calls`` messages on one stream, each sent once the previous one's echo came back (as
    ``Client.schedule_stream`` sends a scheduler's pods); ``window``: that many in flight,
    the next sent as each echo comes back."""
    outgoing: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def requests() -> Any:
        while (item := outgoing.get()) is not None:
            yield item

    message = b"\x0a" + bytes([100]) + b"x" * 100  # about a small Schedule request
    with grpc.insecure_channel(target) as channel:
        replies = channel.stream_stream("/floor.Echo/Stream", request_serializer=None, response_deserializer=None)(requests())
        for _ in range(window - 1):
            outgoing.put(message)
        for _ in range(300):
            outgoing.put(message)
            next(replies)
        server0, client0, wall0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
        for _ in range(calls):
            outgoing.put(message)
            next(replies)
        wall, server, client = time.perf_counter() - wall0, cpu_seconds(pid) - server0, time.process_time() - client0
        outgoing.put(None)
        for _ in replies:
            pass
    return {"wall_ms": wall / calls * 1e3, "server_cpu_ms": server / calls * 1e3, "client_cpu_ms": client / calls * 1e3,
            "calls_per_second": calls / wall}


def _time_calls(target: str, pid: int, calls: int) -> dict[str, float]:
    with grpc.insecure_channel(target) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        request = health_pb2.HealthCheckRequest()
        for _ in range(300):
            check(request, timeout=10)
        server0, client0, wall0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
        for _ in range(calls):
            check(request, timeout=10)
        wall, server, client = time.perf_counter() - wall0, cpu_seconds(pid) - server0, time.process_time() - client0
    return {"wall_ms": wall / calls * 1e3, "server_cpu_ms": server / calls * 1e3, "client_cpu_ms": client / calls * 1e3,
            "calls_per_second": calls / wall}


def bare(calls: int) -> dict[str, float]:
    return _in_child(_bare_server, _time_calls, calls)


def bare_stream(calls: int, *, window: int = 1, work_us: float = 0.0) -> dict[str, float]:
    return _in_child(_bare_stream_server, partial(_time_messages, window=window), calls, work_us)


def _in_child(server: Any, timer: Any, calls: int, *server_args: Any) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    ready, port = ctx.Event(), ctx.Value("i", 0)
    proc = ctx.Process(target=server, args=(ready, port, *server_args), daemon=True)
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the bare gRPC server did not start")
        assert proc.pid is not None
        result: dict[str, float] = timer(f"127.0.0.1:{port.value}", proc.pid, calls)
        return result
    finally:
        proc.terminate()
        proc.join(10)


def serve(calls: int) -> dict[str, float]:
    with serve_process(ROOT / "examples" / "demo" / "cluster.yaml") as (proc, target):
        return _time_calls(target, proc.pid, calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=3000, help="timed Health calls per server")
    parser.add_argument("--work-us", type=float, default=250.0,
                        help="Python work per message of the last stream row, in microseconds (about an answer's)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args(argv)
    if args.calls < 1:
        print("error: --calls: must be at least 1", file=sys.stderr)
        return 2
    if not 0 < args.work_us <= 1_000_000:
        print(f"error: --work-us: must be in (0, 1000000], got {args.work_us:g}", file=sys.stderr)
        return 2
    rows = {}
    for name, run, what in (("bare grpcio server", bare, "Health calls"), ("dra-solver serve", serve, "Health calls"),
                            ("bare grpcio stream", bare_stream, "messages on one stream"),
                            ("bare stream, 2 in flight", partial(bare_stream, window=2), "messages on one stream"),
                            (f"bare stream, 2 in flight, {args.work_us:g} us work", partial(bare_stream, window=2, work_us=args.work_us),
                             "messages on one stream")):
        print(f"timing {args.calls} {what} to the {name} ...", file=sys.stderr, flush=True)
        rows[name] = run(args.calls)
    if args.output == "json":
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'server':<38} {'wall ms':>8} {'server CPU ms':>14} {'client CPU ms':>14} {'calls/s':>8}")
    for name, row in rows.items():
        print(f"{name:<38} {row['wall_ms']:>8.3f} {row['server_cpu_ms']:>14.3f} {row['client_cpu_ms']:>14.3f} {row['calls_per_second']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
