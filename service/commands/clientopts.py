"""Flags and helpers shared by the subcommands that talk to a running service over gRPC."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from dra_solver.model import InvalidInput
from dra_solver.service.client import Client
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.files import one_line
from dra_solver.service.quoting import shown
from dra_solver.service.tls import channel_credentials

EXIT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT: 2,
    grpc.StatusCode.NOT_FOUND: 2,
    grpc.StatusCode.FAILED_PRECONDITION: 2,
    grpc.StatusCode.DEADLINE_EXCEEDED: 3,
}
"""Exit status by gRPC code, matching ``dra-solver allocate`` (2 bad input, 3 deadline); 4 else."""


DEFAULT_SERVER = "127.0.0.1:50051"


def add_client_arguments(parser: argparse._ActionsContainer, *, server_help: str = "", timeout: bool = True) -> None:
    """The service's address, deadline and TLS flags. ``server_help`` replaces the default
    ``--server`` (for commands that answer without a service unless it is given: no default);
    ``timeout=False`` leaves ``--timeout`` to the command."""
    if server_help:
        parser.add_argument("--server", metavar="HOST:PORT", help=server_help)
    else:
        parser.add_argument("--server", default=DEFAULT_SERVER, help=f"service address HOST:PORT or unix:PATH (default {DEFAULT_SERVER})")
    if timeout:
        parser.add_argument("--timeout", type=float, default=30.0, help=f"deadline in seconds (at most {checks.MAX_SECONDS:g})")
    parser.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the server (enables TLS)")
    parser.add_argument("--tls-cert", metavar="FILE", help="client certificate (mTLS)")
    parser.add_argument("--tls-key", metavar="FILE", help="client private key (mTLS)")
    parser.add_argument("--server-name", help="expected server name in its certificate")


def check_client_arguments(args: argparse.Namespace) -> None:
    """The address, deadline and TLS flags make sense, before any file is read or channel made:
    one line naming the flag (:class:`FlagError`, exit 2) instead of a C-core abort, C-core log
    lines or a call that fails as UNAVAILABLE. An empty ``--server`` is refused too (explain
    would otherwise answer from the files, as without it)."""
    checks.check(args, {"--timeout": checks.seconds()})
    if args.server is not None and not args.server.strip():
        raise checks.FlagError(f"--server: must be HOST:PORT or unix:PATH: {shown(args.server)}")
    if args.server_name is not None and not (args.tls_ca or args.tls_cert or args.tls_key):
        raise checks.FlagError("--server-name needs TLS: --tls-ca, or --tls-cert and --tls-key")
    # The files read once, here: :func:`connect` dials with what they made.
    args.tls_credentials = None
    if args.tls_ca or args.tls_cert or args.tls_key:
        try:
            args.tls_credentials = channel_credentials(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)
        except InvalidInput as err:
            raise checks.FlagError(str(err)) from None


def connect(args: argparse.Namespace) -> Client:
    """A client for the checked flags (:func:`check_client_arguments` first)."""
    return Client(
        args.server,
        timeout=args.timeout,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        server_name=args.server_name,
        credentials=getattr(args, "tls_credentials", None),
    )


def rpc_error(err: grpc.RpcError) -> int:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    print(f"error: {code.name}: {one_line(details or '')}", file=sys.stderr)
    return EXIT_CODES.get(code, 4)


def answer_json(message: Message) -> str:
    """An answer as JSON for ``-o json``: protobuf's JSON mapping, except that the Kubernetes
    objects that travel as JSON bytes (allocations, claims) are shown as the objects they are,
    not as base64."""
    return json.dumps(_as_objects(message), indent=2)


def _as_objects(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message)
    for field, value in message.ListFields():
        key = field.json_name
        if field.type == FieldDescriptor.TYPE_BYTES:
            out[key] = [_decoded(v) for v in value] if _repeated(field) else _decoded(value)
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            out[key] = [_as_objects(v) for v in value] if _repeated(field) else _as_objects(value)
    return out


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # not JSON: protobuf's own mapping (base64)
        return base64.b64encode(raw).decode("ascii")
