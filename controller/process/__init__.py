"""The controller process (the top layer): entry point, policy check, leadership, loop, probes.
``signal-controller`` starts here (``main``): it proves its admission policies are in force,
elects a leader, and runs the reconcile loop, which hands each key to ``controller.reconcile``;
the probes serve ``/metrics``, ``/healthz`` and ``/readyz``."""
