"""The one Kubernetes client layer: every dra-solver component talks to the API through here.

- :mod:`.client`: a configured client (kubeconfig or in-cluster, with clear errors), the typed
  requests, and one error hierarchy (NotFound, Conflict, Gone, Invalid, Transient);
- :mod:`.informer`: list+watch into a local store, resync on 410 Gone, event handlers;
- :mod:`.direct`: how writes travel (connections of our own) and the JSON codec (orjson,
  reading what the standard decoder reads);
- :mod:`.meta`: object metadata helpers (keys, resourceVersion order).

The service's inventory, the controllers and the kubelet plugin use it; it is tested against
a real kube-apiserver.
"""
