"""A thin, typed Kubernetes gateway on kubernetes_asyncio, shared by the services.

Raw JSON in and out (no typed client models on hot paths), one small error hierarchy so no
kubernetes_asyncio type leaks past this package, and crash points on every write so that
recovery after a crash at any write can be tested. Imports ``shared`` only."""
