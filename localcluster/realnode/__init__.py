"""Real nodes for the local cluster: per node a network and mount namespace, containerd, runc,
CNI, a kubelet and kube-proxy, all built from upstream parts (see the README)."""
