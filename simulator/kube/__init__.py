"""What the tests put around the real Kubernetes API server (``simulator/controlplane``).

* :mod:`simulator.kube.populate`: the Node objects kubelet and GPU Feature Discovery would have
  registered for a ground truth (GFD labels, ``nvidia.com/gpu`` capacity, label owners);
* :mod:`simulator.kube.proxy`: a fault-injecting HTTP proxy in front of the API server (5xx,
  429, conflicts, slow answers, dropped watches), what only a fake can do;
* :mod:`simulator.kube.faults`: the fault rules the proxy applies.

The in-house API server that used to live here is gone: every Kubernetes-facing test runs on a
real kube-apiserver, kube-scheduler and Kueue (``docs/controlplane.md``).
"""
