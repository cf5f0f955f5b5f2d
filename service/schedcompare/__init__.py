"""kube-scheduler beside the dra-solver scheduler on the same real API server (issue 14).

- :mod:`.workloads`: the clusters and pod streams (pure objects);
- :mod:`.runner`: one scheduler, one workload, a fresh control plane; what was bound, when,
  and whether any device was allocated twice;
- :mod:`.evidence`: what each side's claims held when it placed a pod, and whether another
  placement would have fitted (the evidence behind each reason);
- :mod:`.report`: both sides side by side, and why each pod placed differently was;
- :mod:`.htmlpage`: the same as a self-contained HTML page with plots (``--report``);
- :mod:`.command`: ``dra-solver compare --schedulers WORKLOAD`` and the benchmark's driver.
"""
