"""A real local Kubernetes control plane for tests, benchmarks and the demo.

Built from the upstream components (``kplane/``), started on 127.0.0.1, with simulated
GPU Nodes and a process kubelet, and optionally real nodes (``realnode/``). Never imported
by the services themselves.
"""
