"""A stand-in for the ``grpcurl`` command, so the gRPC examples in the docs run where the real
binary is not installed (it is not packaged for this machine's registries).

It speaks the subset of grpcurl's command line the docs use, through the server's own
reflection service exactly as grpcurl does (no local .proto files), and prints what grpcurl
prints: ``list``, ``describe``, and unary or server-streaming calls with ``-d`` JSON in and
indented JSON (lowerCamelCase names) out. Errors go to stderr as ``ERROR:`` with the code and
message, and the exit status is 64 + the gRPC status code, as grpcurl does.

    python -m tests.docs.grpcurl -plaintext -d '{"node": "worker-1"}' \\
        localhost:50051 drasolver.v1.AllocationService/Allocate
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import descriptor, descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

STATUS_OFFSET = 64
_FLAGS_WITH_VALUE = {"-d", "-H", "-max-time", "-connect-timeout", "-cacert", "-cert", "-key",
                     "-format", "-authority", "-servername", "-max-msg-sz"}


class Usage(Exception):
    """A command line this stand-in does not understand."""


def _parse(argv: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    flags: dict[str, list[str]] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.lstrip("-").partition("=")
            key = f"-{name}"
            if eq:
                flags.setdefault(key, []).append(value)
            elif key in _FLAGS_WITH_VALUE:
                if i + 1 >= len(argv):
                    raise Usage(f"flag {key} needs a value")
                flags.setdefault(key, []).append(argv[i + 1])
                i += 1
            else:
                flags.setdefault(key, []).append("true")
        else:
            positional.append(arg)
        i += 1
    return flags, positional


def _channel(address: str, flags: dict[str, list[str]]) -> grpc.Channel:
    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    if "-plaintext" in flags:
        return grpc.insecure_channel(address, options=options)

    def read(flag: str) -> bytes | None:
        if flag not in flags:
            return None
        with open(flags[flag][-1], "rb") as fh:
            return fh.read()

    creds = grpc.ssl_channel_credentials(
        root_certificates=read("-cacert"), private_key=read("-key"), certificate_chain=read("-cert")
    )
    if "-servername" in flags:
        options.append(("grpc.ssl_target_name_override", flags["-servername"][-1]))
    return grpc.secure_channel(address, creds, options=options)


def _service_text(service: descriptor.ServiceDescriptor) -> str:
    lines = [f"service {service.name} {{"]
    for method in service.methods:
        stream_in = "stream " if getattr(method, "client_streaming", False) else ""
        stream_out = "stream " if getattr(method, "server_streaming", False) else ""
        lines.append(
            f"  rpc {method.name} ( {stream_in}.{method.input_type.full_name} ) returns "
            f"( {stream_out}.{method.output_type.full_name} );"
        )
    lines.append("}")
    return "\n".join(lines)


def _message_text(message: descriptor.Descriptor) -> str:
    lines = [f"message {message.name} {{"]
    for f in message.fields:
        if f.message_type is not None:
            type_name = f".{f.message_type.full_name}"
        elif f.enum_type is not None:
            type_name = f".{f.enum_type.full_name}"
        else:
            type_name = _SCALARS.get(f.type, "unknown")
        label = "repeated " if _is_repeated(f) else ""
        lines.append(f"  {label}{type_name} {f.name} = {f.number};")
    lines.append("}")
    return "\n".join(lines)


def _is_repeated(field: descriptor.FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    if isinstance(flag, bool):
        return flag
    return bool(getattr(field, "label", None) == descriptor.FieldDescriptor.LABEL_REPEATED)


_SCALARS = {
    descriptor.FieldDescriptor.TYPE_DOUBLE: "double",
    descriptor.FieldDescriptor.TYPE_FLOAT: "float",
    descriptor.FieldDescriptor.TYPE_INT64: "int64",
    descriptor.FieldDescriptor.TYPE_UINT64: "uint64",
    descriptor.FieldDescriptor.TYPE_INT32: "int32",
    descriptor.FieldDescriptor.TYPE_UINT32: "uint32",
    descriptor.FieldDescriptor.TYPE_BOOL: "bool",
    descriptor.FieldDescriptor.TYPE_STRING: "string",
    descriptor.FieldDescriptor.TYPE_BYTES: "bytes",
}


def run(argv: Sequence[str]) -> int:
    flags, positional = _parse(argv)
    if not positional:
        raise Usage("usage: grpcurl [flags] ADDRESS [list|describe|SERVICE/METHOD] ...")
    address, verb, rest = positional[0], positional[1:2], positional[2:]
    channel = _channel(address, flags)
    timeout = float(flags["-max-time"][-1]) if "-max-time" in flags else 30.0
    db = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(db)
    try:
        if not verb or verb[0] == "list":
            if rest:
                service = pool.FindServiceByName(rest[0])
                for method in service.methods:
                    print(method.full_name)
            else:
                for name in sorted(db.get_services()):
                    print(name)
            return 0
        if verb[0] == "describe":
            names = rest or sorted(db.get_services())
            for name in names:
                symbol = name.lstrip(".")
                try:
                    service = pool.FindServiceByName(symbol)
                    print(f"{symbol} is a service:\n{_service_text(service)}")
                except KeyError:
                    message = pool.FindMessageTypeByName(symbol)
                    print(f"{symbol} is a message:\n{_message_text(message)}")
            return 0
        return _call(channel, pool, verb[0], flags, timeout)
    except grpc.RpcError as err:
        code = err.code()
        print(f"ERROR:\n  Code: {_code_name(code)}\n  Message: {err.details()}", file=sys.stderr)
        return STATUS_OFFSET + int(code.value[0])
    finally:
        channel.close()


def _code_name(code: grpc.StatusCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_")).replace("Ok", "OK")


def _call(
    channel: grpc.Channel,
    pool: descriptor_pool.DescriptorPool,
    symbol: str,
    flags: dict[str, list[str]],
    timeout: float,
) -> int:
    service_name, sep, method_name = symbol.replace("/", ".").rpartition(".")
    if not sep:
        raise Usage(f"not a method: {symbol}")
    service = pool.FindServiceByName(service_name)
    method = service.methods_by_name[method_name]
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    data = flags.get("-d", ["{}"])[-1]
    if data == "@":
        data = sys.stdin.read()
    request = json_format.Parse(data or "{}", request_class())
    metadata: list[tuple[str, str | bytes]] = []
    for header in flags.get("-H", []):
        key, _, value = header.partition(":")
        metadata.append((key.strip().lower(), value.strip()))
    path = f"/{service.full_name}/{method.name}"
    emit_defaults = "-emit-defaults" in flags

    def show(message: object) -> None:
        print(
            json_format.MessageToJson(
                message,  # type: ignore[arg-type]
                indent=2,
                always_print_fields_with_no_presence=emit_defaults,
                descriptor_pool=pool,  # Any fields' types resolved through reflection, as grpcurl does
            )
        )

    if getattr(method, "server_streaming", False):
        stream = channel.unary_stream(
            path,
            request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString,
        )
        for response in stream(request, timeout=timeout, metadata=tuple(metadata) or None):
            show(response)
        return 0
    unary = channel.unary_unary(
        path,
        request_serializer=request_class.SerializeToString,
        response_deserializer=response_class.FromString,
    )
    show(unary(request, timeout=timeout, metadata=tuple(metadata) or None))
    return 0


def main() -> int:
    try:
        return run(sys.argv[1:])
    except Usage as err:
        print(f"grpcurl (tests stand-in): {err}", file=sys.stderr)
        return 2
    except KeyError as err:
        print(f"Failed to resolve symbol {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
