"""The controller's reconcilers and the steps that read and write the API server (the middle
layer). A profile, a Run and the Node groups are reconciled one pass at a time (admission,
reservations, acceptance, release, recovery, retention, recurrence, re-assertion, expiry),
over the working context they share (caches, ledger compare-and-swap, Events, metrics). Each
write is safe to repeat and to interrupt. They decide with ``controller.rules`` and never import
``controller.process``."""
