"""A stand-in for the kubelet's side of the DRA plugin API, for trying the plugin by hand.

    python examples/kubeletplugin/kubelet.py register --registry-dir DIR --driver NAME
    python examples/kubeletplugin/kubelet.py prepare --plugin-dir DIR NAMESPACE/NAME/UID ...
    python examples/kubeletplugin/kubelet.py unprepare --plugin-dir DIR NAMESPACE/NAME/UID ...
    python examples/kubeletplugin/kubelet.py health --plugin-dir DIR [--updates N]

It makes exactly the calls a kubelet makes, over the same unix sockets, with stubs generated
from the same protos, and prints the answers as JSON (proto field names).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from dra_solver.kubeletplugin import protos
from dra_solver.kubeletplugin.driver import socket_target


def _show(message: Any) -> None:
    print(
        json_format.MessageToJson(
            message, preserving_proto_field_name=True, sort_keys=True, indent=2
        )
    )


def _claims(pb: Any, refs: list[str]) -> list[Any]:
    out = []
    for ref in refs:
        parts = ref.split("/")
        if len(parts) != 3:
            raise SystemExit(f"kubelet.py: {ref!r}: expected NAMESPACE/NAME/UID")
        out.append(pb.Claim(namespace=parts[0], name=parts[1], uid=parts[2]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    reg = sub.add_parser("register", help="GetInfo, then NotifyRegistrationStatus(registered)")
    reg.add_argument("--registry-dir", type=Path, required=True)
    reg.add_argument("--driver", required=True)
    for name in ("prepare", "unprepare"):
        p = sub.add_parser(name, help=f"Node{name.capitalize()}Resources (v1)")
        p.add_argument("--plugin-dir", type=Path, required=True)
        p.add_argument("claims", nargs="+", metavar="NAMESPACE/NAME/UID")
    health = sub.add_parser("health", help="NodeWatchResources (v1alpha1, as kubelets use it)")
    health.add_argument("--plugin-dir", type=Path, required=True)
    health.add_argument("--updates", type=int, default=1, help="snapshots to print before leaving")
    args = parser.parse_args(argv)

    try:
        if args.command == "register":
            socket = args.registry_dir / f"{args.driver}-reg.sock"
            with grpc.insecure_channel(socket_target(socket)) as ch:
                stub = protos.registration_grpc.RegistrationStub(ch)
                _show(stub.GetInfo(protos.registration.InfoRequest(), timeout=10))
                stub.NotifyRegistrationStatus(
                    protos.registration.RegistrationStatus(plugin_registered=True), timeout=10
                )
            return 0
        with grpc.insecure_channel(socket_target(args.plugin_dir / "dra.sock")) as ch:
            if args.command == "health":
                watch = protos.health_v1alpha1_grpc.DRAResourceHealthStub(ch)
                stream = watch.NodeWatchResources(
                    protos.health_v1alpha1.NodeWatchResourcesRequest()
                )
                for index, snapshot in enumerate(stream):
                    _show(snapshot)
                    if index + 1 >= args.updates:
                        stream.cancel()
                        break
                return 0
            dra = protos.dra_v1_grpc.DRAPluginStub(ch)
            if args.command == "prepare":
                request = protos.dra_v1.NodePrepareResourcesRequest(
                    claims=_claims(protos.dra_v1, args.claims)
                )
                _show(dra.NodePrepareResources(request, timeout=60))
            else:
                unprepare = protos.dra_v1.NodeUnprepareResourcesRequest(
                    claims=_claims(protos.dra_v1, args.claims)
                )
                _show(dra.NodeUnprepareResources(unprepare, timeout=60))
        return 0
    except grpc.RpcError as err:
        print(f"kubelet.py: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
