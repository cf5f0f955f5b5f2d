"""The Kubernetes API requests ``dra-solver serve --kubeconfig/--in-cluster`` makes.

The inventory (``service.inventory.KubeSource``) lists each kind through its typed ``list_*``
method, named in ``service.inventory.DEFAULT_KUBE_KINDS``; the shared informers
(``service.kubeapi.informer``) then watch through the same method, which a source scan cannot
see. This list says what RBAC must grant (tests/deploy checks deploy/ against it); keep it in
step with ``DEFAULT_KUBE_KINDS`` (tests/service/test_kube_inventory.py checks that).
"""

from __future__ import annotations

API_CALLS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("resource.k8s.io", "deviceclasses", ("list", "watch")),
    ("resource.k8s.io", "resourceslices", ("list", "watch")),
    ("resource.k8s.io", "resourceclaims", ("list", "watch")),
    ("resource.k8s.io", "devicetaintrules", ("list", "watch")),
    ("", "nodes", ("list", "watch")),
    ("", "namespaces", ("list", "watch")),
)
