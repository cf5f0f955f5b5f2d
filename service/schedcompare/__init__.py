"""kube-scheduler beside the dra-solver scheduler on the same real API server (issue 14).

- :mod:`.workloads`: the clusters and pod streams (pure objects);
- :mod:`.runner`: one scheduler, one workload, a fresh control plane; what was bound, when,
  and whether any device was allocated twice;
- :mod:`.report`: both sides side by side, and why each pod placed differently was;
- :mod:`.command`: ``dra-solver compare --schedulers WORKLOAD`` and the benchmark's driver.
"""
