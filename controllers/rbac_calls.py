"""Every Kubernetes API request the controllers make, as RBAC sees it: (apiGroup, resource, verb).

tests/controllers/test_rbac_calls.py drives the controllers against the real kube-apiserver and
checks every request they send against this list, in both directions; the controllers' ClusterRole
and Role in deploy/ grant exactly these (tests/deploy/test_rbac_as_shipped.py runs them under
that ServiceAccount and reads the audit log). Keep it exact: a missing entry breaks the
controllers in a real cluster, an extra one is privilege nobody uses.

Leases are only touched in the namespace given by ``--lease-namespace`` (a namespaced Role
suffices); everything else is cluster-wide (pods and claims live in every namespace).
"""

from __future__ import annotations

API_CALLS: tuple[tuple[str, str, str], ...] = (
    # Pods: the informer of all three controllers; get to re-read before evicting and to check
    # reservations of pods the cache has not seen; delete to evict.
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "get"),
    ("", "pods", "delete"),
    # resourceClaimStatuses (claim controller), PodScheduled=False (scheduler),
    # DisruptionTarget (eviction): strategic-merge patches of the status subresource.
    ("", "pods/status", "patch"),
    ("", "pods/binding", "create"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("", "events", "create"),
    ("resource.k8s.io", "resourceclaims", "list"),
    ("resource.k8s.io", "resourceclaims", "watch"),
    ("resource.k8s.io", "resourceclaims", "get"),
    ("resource.k8s.io", "resourceclaims", "create"),
    # Finalizer add/remove: metadata updates with a resourceVersion precondition.
    ("resource.k8s.io", "resourceclaims", "update"),
    ("resource.k8s.io", "resourceclaims", "delete"),
    # Allocation and reservedFor: status updates with a resourceVersion precondition.
    ("resource.k8s.io", "resourceclaims/status", "update"),
    ("resource.k8s.io", "resourceclaimtemplates", "list"),
    ("resource.k8s.io", "resourceclaimtemplates", "watch"),
    ("resource.k8s.io", "resourceslices", "list"),
    ("resource.k8s.io", "resourceslices", "watch"),
    ("resource.k8s.io", "devicetaintrules", "list"),
    ("resource.k8s.io", "devicetaintrules", "watch"),
    # The EvictionInProgress condition: server-side apply of the status subresource.
    ("resource.k8s.io", "devicetaintrules/status", "patch"),
    # Which DeviceClass serves an extended resource (the scheduler).
    ("resource.k8s.io", "deviceclasses", "list"),
    ("resource.k8s.io", "deviceclasses", "watch"),
    # PodGroups (scheduling.k8s.io/v1beta1) the scheduler places whole, and their
    # PodGroupInitiallyScheduled condition (a merge patch of the status subresource).
    ("scheduling.k8s.io", "podgroups", "list"),
    ("scheduling.k8s.io", "podgroups", "watch"),
    # Whether a PodGroup a claim is reserved for still exists (not yet in the cache).
    ("scheduling.k8s.io", "podgroups", "get"),
    ("scheduling.k8s.io", "podgroups/status", "patch"),
    # Leader election (namespaced, --lease-namespace).
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
)

NAMESPACED_ONLY: frozenset[tuple[str, str]] = frozenset({("coordination.k8s.io", "leases")})
"""Resources granted by a Role in the lease namespace rather than cluster-wide."""

BY_CONTROLLER: dict[str, frozenset[tuple[str, str, str]]] = {
    "claim": frozenset({
        ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "get"), ("", "pods/status", "patch"), ("", "events", "create"),
        ("resource.k8s.io", "resourceclaims", "list"), ("resource.k8s.io", "resourceclaims", "watch"),
        ("resource.k8s.io", "resourceclaims", "create"), ("resource.k8s.io", "resourceclaims", "update"),
        ("resource.k8s.io", "resourceclaims", "delete"), ("resource.k8s.io", "resourceclaims/status", "update"),
        ("resource.k8s.io", "resourceclaimtemplates", "list"), ("resource.k8s.io", "resourceclaimtemplates", "watch"),
        # The claims of a PodGroup's template entries, recorded in its status; a PodGroup's
        # reservation dropped once it is gone.
        ("scheduling.k8s.io", "podgroups", "list"), ("scheduling.k8s.io", "podgroups", "watch"),
        ("scheduling.k8s.io", "podgroups", "get"),
        ("scheduling.k8s.io", "podgroups/status", "patch"),
    }),
    "scheduler": frozenset({
        ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "get"), ("", "pods/status", "patch"),
        ("", "pods/binding", "create"), ("", "nodes", "list"), ("", "nodes", "watch"), ("", "events", "create"),
        ("resource.k8s.io", "resourceclaims", "list"), ("resource.k8s.io", "resourceclaims", "watch"),
        ("resource.k8s.io", "resourceclaims", "get"), ("resource.k8s.io", "resourceclaims", "update"),
        # The claims for extended resources: created, and deleted when an attempt fails.
        ("resource.k8s.io", "resourceclaims", "create"), ("resource.k8s.io", "resourceclaims", "delete"),
        ("resource.k8s.io", "resourceclaims/status", "update"),
        ("resource.k8s.io", "resourceslices", "list"), ("resource.k8s.io", "resourceslices", "watch"),
        ("resource.k8s.io", "deviceclasses", "list"), ("resource.k8s.io", "deviceclasses", "watch"),
        ("scheduling.k8s.io", "podgroups", "list"), ("scheduling.k8s.io", "podgroups", "watch"),
        ("scheduling.k8s.io", "podgroups/status", "patch"),
    }),
    "eviction": frozenset({
        ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "get"), ("", "pods", "delete"), ("", "pods/status", "patch"),
        ("", "events", "create"),
        ("resource.k8s.io", "resourceclaims", "list"), ("resource.k8s.io", "resourceclaims", "watch"),
        ("resource.k8s.io", "resourceslices", "list"), ("resource.k8s.io", "resourceslices", "watch"),
        ("resource.k8s.io", "devicetaintrules", "list"), ("resource.k8s.io", "devicetaintrules", "watch"),
        ("resource.k8s.io", "devicetaintrules/status", "patch"),
    }),
    "leader-election": frozenset({
        ("coordination.k8s.io", "leases", "get"), ("coordination.k8s.io", "leases", "create"), ("coordination.k8s.io", "leases", "update"),
    }),
}
"""The same requests by the controller (``--enable``) that makes them, for narrower roles."""
