"""The controller process: the entry point (``signal-controller``), the start-up check of its
admission policies, leader election, the reconcile loop that hands each key to
``controller.reconcile``, and the HTTP probes and metrics endpoint."""
