"""The Kubernetes API requests ``dra-solver serve --kubeconfig/--in-cluster`` makes.

The inventory (``service.inventory.KubeSource``) lists and watches through the client's generic
``CustomObjectsApi`` and a method table, which a source scan cannot resolve to resources; this
list says what RBAC must grant (tests/deploy checks deploy/ against it). Keep it in step with
``service.inventory.DEFAULT_KUBE_KINDS``.
"""

from __future__ import annotations

API_CALLS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("resource.k8s.io", "deviceclasses", ("list", "watch")),
    ("resource.k8s.io", "resourceslices", ("list", "watch")),
    ("resource.k8s.io", "resourceclaims", ("list", "watch")),
    ("resource.k8s.io", "devicetaintrules", ("list", "watch")),
    ("", "nodes", ("list", "watch")),
)
