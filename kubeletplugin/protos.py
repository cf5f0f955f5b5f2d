"""Short names for the generated kubelet API modules, and the service names the kubelet matches.

The generated modules sit deep under ``kubeletplugin.gen`` (mirroring upstream's proto paths);
everything else in the package imports them from here. The ``*_SERVICE`` strings are what a
DRA plugin lists in ``PluginInfo.supported_versions``: the kubelet matches them literally
(``<last proto package element>.<service>``), so they are spelled out here once, and a test
checks them against the descriptors.
"""

from __future__ import annotations

from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra.v1 import api_pb2 as dra_v1
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra.v1beta1 import (
    api_pb2_grpc as dra_v1beta1_grpc,
)
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra_health.v1 import api_pb2 as health_v1
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra_health.v1 import (
    api_pb2_grpc as health_v1_grpc,
)
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra_health.v1alpha1 import (
    api_pb2 as health_v1alpha1,
)
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.dra_health.v1alpha1 import (
    api_pb2_grpc as health_v1alpha1_grpc,
)
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.pluginregistration.v1 import (
    api_pb2 as registration,
)
from dra_solver.kubeletplugin.gen.k8s.io.kubelet.pkg.apis.pluginregistration.v1 import (
    api_pb2_grpc as registration_grpc,
)

__all__ = [
    "DRA_PLUGIN_TYPE",
    "DRA_V1BETA1_SERVICE",
    "DRA_V1_SERVICE",
    "HEALTH_V1ALPHA1_SERVICE",
    "HEALTH_V1_SERVICE",
    "SUPPORTED_SERVICES",
    "dra_v1",
    "dra_v1_grpc",
    "dra_v1beta1",
    "dra_v1beta1_grpc",
    "health_v1",
    "health_v1_grpc",
    "health_v1alpha1",
    "health_v1alpha1_grpc",
    "registration",
    "registration_grpc",
]

DRA_PLUGIN_TYPE = "DRAPlugin"
"""``PluginInfo.type`` for DRA drivers (upstream ``pluginregistration/v1.DRAPlugin``)."""

DRA_V1_SERVICE = "v1.DRAPlugin"
DRA_V1BETA1_SERVICE = "v1beta1.DRAPlugin"
HEALTH_V1_SERVICE = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1_SERVICE = "v1alpha1.DRAResourceHealth"

SUPPORTED_SERVICES: tuple[str, ...] = (
    DRA_V1_SERVICE,
    DRA_V1BETA1_SERVICE,
    HEALTH_V1_SERVICE,
    HEALTH_V1ALPHA1_SERVICE,
)
"""Everything the plugin serves on its DRA socket, newest first (the kubelet picks)."""
