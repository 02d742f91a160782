"""The controller's reconcilers and the steps that read and write the API server: a profile,
a Run and the Node groups reconciled one pass at a time (admission, reservations, acceptance,
release, recovery, retention, recurrence, re-assertion, expiry), the working context they share
(caches, ledger compare-and-swap, Events, metrics). Each write is safe to repeat and to
interrupt. Decides with ``controller.rules``; never imports ``controller.process``."""
