"""Flags and helpers shared by the subcommands that talk to a running service over gRPC."""

from __future__ import annotations

import argparse
import sys

import grpc

from dra_solver.service.client import Client
from dra_solver.service.files import one_line

EXIT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT: 2,
    grpc.StatusCode.NOT_FOUND: 2,
    grpc.StatusCode.FAILED_PRECONDITION: 2,
    grpc.StatusCode.DEADLINE_EXCEEDED: 3,
}
"""Exit status by gRPC code, matching ``dra-solver allocate`` (2 bad input, 3 deadline); 4 else."""


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default="127.0.0.1:50051", help="service address HOST:PORT or unix:PATH (default 127.0.0.1:50051)")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline in seconds")
    parser.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the server (enables TLS)")
    parser.add_argument("--tls-cert", metavar="FILE", help="client certificate (mTLS)")
    parser.add_argument("--tls-key", metavar="FILE", help="client private key (mTLS)")
    parser.add_argument("--server-name", help="expected server name in its certificate")


def connect(args: argparse.Namespace) -> Client:
    return Client(
        args.server,
        timeout=args.timeout,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        server_name=args.server_name,
    )


def rpc_error(err: grpc.RpcError) -> int:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    print(f"error: {code.name}: {one_line(details or '')}", file=sys.stderr)
    return EXIT_CODES.get(code, 4)
