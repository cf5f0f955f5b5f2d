"""A local Kubernetes to run dra-solver against: upstream's real control plane on loopback.

:mod:`.controlplane` starts etcd, kube-apiserver and kube-controller-manager built from the
pinned upstream release; :mod:`.cluster` adds the solver service, the companion controllers
and simulated kubelet plugins, as ``./scripts/local-cluster.sh up`` does for users.
"""
