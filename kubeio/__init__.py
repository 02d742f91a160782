"""A thin, typed Kubernetes gateway shared by the services: raw JSON over the project's own
HTTP/1.1 client on asyncio streams (``http``; it replaced aiohttp, see its docstring).

Raw JSON in and out (no typed client models), its own kubeconfig and in-cluster configuration
(``transport``: the generated client's package imports every API and model, about 60 MiB and a
second per process), one small error hierarchy so no transport type leaks past this package, and
crash points on every write so that recovery after a crash at any write can be tested. Imports
``shared`` only."""
