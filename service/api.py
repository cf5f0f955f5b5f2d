"""The service's public API for the packages above it (the companion processes, the command
dispatcher): everything they may import from ``dra_solver.service``, and nothing else.

- ``Client``: the gRPC client of the allocation service (``Allocate``, ``Schedule``,
  ``Reserve``/``Unreserve``, ``Explain``, health); ``pb``: the ``drasolver.v1`` messages.
- The one Kubernetes client layer (``service.kubeapi``): ``kube`` (a configured client, the
  typed requests, the error hierarchy ``NotFound``/``Conflict``/``Gone``/``Invalid``/
  ``Transient``), ``Informer``/``Store``/``wait_for_sync`` (list+watch into a local store) and
  ``meta`` (object metadata helpers); ``ElectionConfig``/``LeaderElector``: leader election on
  a Lease through the kubernetes client's own library.
- ``nodefilter``: whether a pod may go to a node, devices and node resources aside, in the
  scheduler's words (node selector and affinity, taints, unschedulable; the nodes that can reach
  a pod's allocated claims): the controllers' scheduler filters with it, as explain does.
- ``ArgumentParser``: argparse with one-line usage errors (exit 2), for every command line.
- What every long-running process shares: ``logsetup`` (``--log-format``/``--log-level``),
  ``HttpEndpoint`` (``/metrics``, ``/healthz``, ``/readyz``) and ``hold_full_collections``
  (the cyclic collector's policy for a process that keeps a large cache, ``service.gc_pauses``).

Every other module of ``dra_solver.service`` is internal: an import-linter contract in
pyproject.toml lets only the service itself and the dispatcher (``dra_solver.cli``) import
them. The service itself never imports the companions (another contract).
"""

from dra_solver.service import logsetup, nodefilter
from dra_solver.service.argparsing import ArgumentParser
from dra_solver.service.client import Client
from dra_solver.service.gc_pauses import hold_full_collections
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.httpendpoint import HttpEndpoint, no_created_series
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi import meta
from dra_solver.service.kubeapi.informer import Informer, Store, wait_for_sync
from dra_solver.service.kubeapi.leaderelection import ElectionConfig, LeaderElector

__all__ = [
    "ArgumentParser",
    "Client",
    "ElectionConfig",
    "HttpEndpoint",
    "Informer",
    "LeaderElector",
    "Store",
    "hold_full_collections",
    "kube",
    "logsetup",
    "meta",
    "no_created_series",
    "nodefilter",
    "pb",
    "wait_for_sync",
]
