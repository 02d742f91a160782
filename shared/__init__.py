"""Wire contracts shared by every Signal component.

API models (the single source of the CRDs), label and annotation keys, canonical
digests. Nothing here performs I/O or imports a Kubernetes or HTTP client.
"""
