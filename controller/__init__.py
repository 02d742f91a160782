"""The Signal controller: admission, reservation, Workflow submission, release and recovery.

Three packages, one layer each (pyproject.toml's import contracts hold them to it):
``controller.process`` (the process: entry point, loop, leadership, probes) imports
``controller.reconcile`` (the reconcilers and the steps that read and write the API server),
which imports ``controller.rules`` (pure decisions and views: plain data and ``now`` in, plain
data out). No module sits directly in this package.
"""
