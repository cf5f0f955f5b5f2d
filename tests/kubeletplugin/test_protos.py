"""The kubelet protos: upstream's wire format, and committed generated code that is fresh."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
from google.protobuf import descriptor

from dra_solver.kubeletplugin import protogen, protos
from tests.kubeletplugin.helpers import short_tmpdir

# Method paths exactly as the kubelet calls them (upstream's generated Go code).
UPSTREAM_METHODS = {
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
    "/v1.DRAResourceHealth/NodeWatchResources",
    "/v1alpha1.DRAResourceHealth/NodeWatchResources",
    "/pluginregistration.Registration/GetInfo",
    "/pluginregistration.Registration/NotifyRegistrationStatus",
}

# (message, field) -> (number, type, label) for every field of upstream's messages.
T = descriptor.FieldDescriptor
DRA_FIELDS = {
    ("NodePrepareResourcesRequest", "claims"): (1, T.TYPE_MESSAGE, "repeated"),
    ("NodePrepareResourcesResponse", "claims"): (1, T.TYPE_MESSAGE, "repeated"),
    ("NodePrepareResourceResponse", "devices"): (1, T.TYPE_MESSAGE, "repeated"),
    ("NodePrepareResourceResponse", "error"): (2, T.TYPE_STRING, "optional"),
    ("Device", "request_names"): (1, T.TYPE_STRING, "repeated"),
    ("Device", "pool_name"): (2, T.TYPE_STRING, "optional"),
    ("Device", "device_name"): (3, T.TYPE_STRING, "optional"),
    ("Device", "cdi_device_ids"): (4, T.TYPE_STRING, "repeated"),
    ("NodeUnprepareResourcesRequest", "claims"): (1, T.TYPE_MESSAGE, "repeated"),
    ("NodeUnprepareResourcesResponse", "claims"): (1, T.TYPE_MESSAGE, "repeated"),
    ("NodeUnprepareResourceResponse", "error"): (1, T.TYPE_STRING, "optional"),
    ("Claim", "namespace"): (1, T.TYPE_STRING, "optional"),
    ("Claim", "uid"): (2, T.TYPE_STRING, "optional"),
    ("Claim", "name"): (3, T.TYPE_STRING, "optional"),
}
HEALTH_FIELDS = {
    ("DeviceIdentifier", "pool_name"): (1, T.TYPE_STRING, "optional"),
    ("DeviceIdentifier", "device_name"): (2, T.TYPE_STRING, "optional"),
    ("DeviceHealth", "device"): (1, T.TYPE_MESSAGE, "optional"),
    ("DeviceHealth", "health"): (2, T.TYPE_ENUM, "optional"),
    ("DeviceHealth", "last_updated_time"): (3, T.TYPE_INT64, "optional"),
    ("DeviceHealth", "health_check_timeout_seconds"): (4, T.TYPE_INT64, "optional"),
    ("DeviceHealth", "message"): (5, T.TYPE_STRING, "optional"),
    ("NodeWatchResourcesResponse", "devices"): (1, T.TYPE_MESSAGE, "repeated"),
}
REGISTRATION_FIELDS = {
    ("PluginInfo", "type"): (1, T.TYPE_STRING, "optional"),
    ("PluginInfo", "name"): (2, T.TYPE_STRING, "optional"),
    ("PluginInfo", "endpoint"): (3, T.TYPE_STRING, "optional"),
    ("PluginInfo", "supported_versions"): (4, T.TYPE_STRING, "repeated"),
    ("RegistrationStatus", "plugin_registered"): (1, T.TYPE_BOOL, "optional"),
    ("RegistrationStatus", "error"): (2, T.TYPE_STRING, "optional"),
}


def _fields(module: object) -> dict[tuple[str, str], tuple[int, int, str]]:
    file = module.DESCRIPTOR  # type: ignore[attr-defined]
    out = {}
    for message in file.message_types_by_name.values():
        for f in message.fields:
            label = "repeated" if f.is_repeated else "optional"
            out[(message.name, f.name)] = (f.number, f.type, label)
    return out


def test_packages_services_and_methods_are_upstreams() -> None:
    assert protos.dra_v1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert protos.dra_v1beta1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    assert protos.health_v1.DESCRIPTOR.package == "v1"
    assert protos.health_v1alpha1.DESCRIPTOR.package == "v1alpha1"
    assert protos.registration.DESCRIPTOR.package == "pluginregistration"
    methods = set()
    for module in (
        protos.dra_v1,
        protos.dra_v1beta1,
        protos.health_v1,
        protos.health_v1alpha1,
        protos.registration,
    ):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                methods.add(f"/{service.full_name}/{method.name}")
    assert methods == UPSTREAM_METHODS
    stream = protos.health_v1.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods_by_name[
        "NodeWatchResources"
    ]
    assert stream.server_streaming and not stream.client_streaming


def test_generated_servers_register_upstream_paths() -> None:
    """The server-side registration (not only the descriptors) uses the wire names."""
    root = Path(protos.__file__).parent / "gen"
    text = "".join(p.read_text() for p in root.rglob("*_grpc.py"))
    for path in UPSTREAM_METHODS:
        service = path.split("/")[1]
        assert f"'{path}'" in text
        assert f"method_handlers_generic_handler(\n            '{service}'" in text


def test_field_numbers_and_types() -> None:
    for module, expected in (
        (protos.dra_v1, {**DRA_FIELDS, ("Device", "share_id"): (5, T.TYPE_STRING, "optional")}),
        (protos.dra_v1beta1, DRA_FIELDS),
        (protos.health_v1, HEALTH_FIELDS),
        (protos.health_v1alpha1, HEALTH_FIELDS),
        (protos.registration, REGISTRATION_FIELDS),
    ):
        assert _fields(module) == expected, module.__name__
    share = protos.dra_v1.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert share.has_presence  # proto3 `optional`
    claims_map = protos.dra_v1.NodePrepareResourcesResponse.DESCRIPTOR.fields_by_name["claims"]
    assert claims_map.message_type.GetOptions().map_entry
    enum = protos.health_v1.HealthStatus
    assert [(v.name, v.number) for v in enum.DESCRIPTOR.values] == [
        ("UNKNOWN", 0),
        ("HEALTHY", 1),
        ("UNHEALTHY", 2),
    ]


def test_supported_services_match_descriptors() -> None:
    def short(module: object, service: str) -> str:
        package = module.DESCRIPTOR.package.rsplit(".", 1)[-1]  # type: ignore[attr-defined]
        return f"{package}.{service}"

    assert short(protos.dra_v1, "DRAPlugin") == protos.DRA_V1_SERVICE
    assert short(protos.dra_v1beta1, "DRAPlugin") == protos.DRA_V1BETA1_SERVICE
    assert short(protos.health_v1, "DRAResourceHealth") == protos.HEALTH_V1_SERVICE
    assert short(protos.health_v1alpha1, "DRAResourceHealth") == protos.HEALTH_V1ALPHA1_SERVICE


def test_raw_wire_call_without_generated_stubs(start_plugin) -> None:  # type: ignore[no-untyped-def]
    """A caller that knows only the method path and bytes (like the Go kubelet) is served."""
    running = start_plugin()
    channel = grpc.insecure_channel(f"unix://{running.dirs.registration_socket}")
    call = channel.unary_unary("/pluginregistration.Registration/GetInfo")
    raw = call(b"", timeout=5)
    info = protos.registration.PluginInfo.FromString(raw)
    assert info.type == "DRAPlugin"
    channel.close()


def test_generated_code_is_fresh() -> None:
    out = short_tmpdir()
    try:
        # protoc runs in a fresh interpreter: grpc_tools' bundled protobuf aborts the process
        # when loaded beside OR-Tools' copy (which other tests in the same worker import).
        subprocess.run(
            [sys.executable, "-c",
             "import sys, pathlib; from dra_solver.kubeletplugin import protogen; protogen.generate(pathlib.Path(sys.argv[1]))",
             str(out)],
            check=True, timeout=120,
        )
        committed = protogen.DEFAULT_OUT
        fresh = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
        present = sorted(
            p.relative_to(committed)
            for p in committed.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
        assert fresh == present, "run: python -m dra_solver.kubeletplugin.protogen"
        stale = [str(p) for p in fresh if not filecmp.cmp(out / p, committed / p, shallow=False)]
        assert stale == [], "stale generated files; run: python -m dra_solver.kubeletplugin.protogen"
    finally:
        shutil.rmtree(out, ignore_errors=True)
