"""dra-solver's DRA kubelet plugin: what a real kubelet talks to on each node.

It serves the kubelet's own gRPC API (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and v1beta1,
``DRAResourceHealth``) on a unix socket, registers through the kubelet's plugins_registry,
prepares allocated devices crash-safely (two-phase checkpoint, CDI spec per claim) and publishes
the node's devices as ResourceSlices. One concern per module:

- ``driver``: the gRPC servicers and their sockets;
- ``state``: prepare/unprepare under a lock, idempotent, with rollback and recovery;
- ``checkpoint``: the versioned checkpoint file;
- ``cdi``: CDI spec names and files;
- ``discovery``: the device backend interface and the simulated backend;
- ``publish``: ResourceSlice building, splitting, generations and the two sinks;
- ``health``: device health, the health stream and device taints;
- ``claims``: where claims are read from (API or directory);
- ``cli``: flags, wiring, signals, lifecycle.
"""
