"""``python -m dra_solver.service.healthcheck``: the solver's readiness probe when it serves TLS.

The kubelet's built-in gRPC probe speaks plaintext only, so a solver that serves TLS is probed
by running this inside its container (an ``exec`` probe): it asks the standard
``grpc.health.v1.Health/Check`` over the same TLS any client uses, prints one line, and exits 0
for SERVING, 1 for anything else (NOT_SERVING, unreachable, a certificate it does not trust)
and 2 for bad flags. It imports only grpc, the health stubs and the TLS helpers, so it stays
cheap enough to run every few seconds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_solver.model import InvalidInput
from dra_solver.service import tls
from dra_solver.service.argparsing import ArgumentParser


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m dra_solver.service.healthcheck",
        description="exit 0 when the solver's gRPC health service reports SERVING",
    )
    parser.add_argument("--address", default="127.0.0.1:50051", help="HOST:PORT or unix:PATH (default 127.0.0.1:50051)")
    parser.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the server (enables TLS)")
    parser.add_argument("--tls-cert", metavar="FILE", help="client certificate (when the server requires mTLS)")
    parser.add_argument("--tls-key", metavar="FILE", help="client private key (when the server requires mTLS)")
    parser.add_argument("--server-name", help="name to expect in the server's certificate (the Service's DNS name)")
    parser.add_argument("--service", default="", help="health service name (default: the server as a whole)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    return parser


def check(args: argparse.Namespace) -> tuple[int, str]:
    """(exit code, the line to print)."""
    if bool(args.tls_cert) != bool(args.tls_key):
        return 2, "error: --tls-cert and --tls-key go together"
    if args.server_name and not args.tls_ca:
        return 2, "error: --server-name needs --tls-ca"
    options = [("grpc.ssl_target_name_override", args.server_name)] if args.server_name else []
    try:
        if args.tls_ca:
            creds = tls.channel_credentials(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)
            channel = grpc.secure_channel(args.address, creds, options=options)
        else:
            channel = grpc.insecure_channel(args.address)
    except InvalidInput as err:
        return 2, f"error: {err}"
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
        except grpc.RpcError as err:
            code = err.code().name if hasattr(err, "code") else "UNKNOWN"
            details = err.details() if hasattr(err, "details") else str(err)
            return 1, f"{args.address}: {code}: {str(details)[:200]}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return (0 if status == "SERVING" else 1), f"{args.address}: {status}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code, line = check(args)
    print(line, file=sys.stdout if code == 0 else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
