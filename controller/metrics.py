"""The controller's Prometheus metrics (served on ``--metrics-port`` at ``/metrics`` by probes.py).

* ``signal_runs`` (gauge, by phase): Runs in the controller's namespace.
* ``signal_nodes_reserved`` (gauge): Nodes carrying a reservation of this namespace's Runs.
* ``signal_admission_seconds`` (histogram): one admission, ledger write to Workflow submitted.
* ``signal_evidence_verification_failures_total`` (counter): check evidence that failed
  verification (missing, malformed, foreign, digest mismatch, incomplete, ...).
* ``signal_runs_finished_total`` (counter, by phase).
* ``signal_reconcile_errors_total`` (counter, by kind of object and error): reconciles that
  raised; the object is retried with backoff (or ended, when it is structurally bad).
* ``signal_reconciles_total`` (counter, by kind and result: done, requeue, terminal, error).
* ``signal_objects_ended_total`` (counter, by kind): structurally bad objects ended with a
  condition and an Event.
* ``signal_informer_synced`` (gauge, by resource): 1 while that cache follows the API server.
* ``signal_workqueue_depth`` (gauge): keys waiting to be reconciled now.
* ``signal_projection_tampered_total`` (counter, by profile): a Node's projection differed from
  the profile's record (controller/reassert.py) and was rewritten from it.
* ``signal_build_info`` (gauge, by version): 1, labelled with the controller's version
  (shared/version.py).
"""

from collections import Counter as Tally
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared.run import Phase
from shared.version import VERSION

REGISTRY = CollectorRegistry()
RUNS = Gauge("signal_runs", "Runs by phase", ["phase"], registry=REGISTRY)
NODES_RESERVED = Gauge("signal_nodes_reserved", "Nodes reserved by this controller's Runs", registry=REGISTRY)
ADMISSION_SECONDS = Histogram(
    "signal_admission_seconds",
    "Duration of one admission (ledger write to Workflow submitted)",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
    registry=REGISTRY,
)
EVIDENCE_FAILURES = Counter(
    "signal_evidence_verification_failures", "Check evidence that failed verification", registry=REGISTRY
)
FINISHED = Counter("signal_runs_finished", "Runs that reached a terminal phase", ["phase"], registry=REGISTRY)
RECONCILE_ERRORS = Counter(
    "signal_reconcile_errors", "Reconciles that raised, by kind and error", ["kind", "error"], registry=REGISTRY
)
RECONCILES = Counter("signal_reconciles", "Reconciles by kind and result", ["kind", "result"], registry=REGISTRY)
ENDED = Counter("signal_objects_ended", "Structurally bad objects ended", ["kind"], registry=REGISTRY)
INFORMER_SYNCED = Gauge(
    "signal_informer_synced", "1 while a cache follows the API server", ["resource"], registry=REGISTRY
)
QUEUE_DEPTH = Gauge("signal_workqueue_depth", "Keys waiting to be reconciled now", registry=REGISTRY)
CERTIFICATION_EXPIRED = Counter(
    "signal_certification_expired",
    "Node results set to Stale: freshness window passed, suite changed, or profile deleted",
    ["reason"],
    registry=REGISTRY,
)
LEDGER_UNREADABLE = Gauge(
    "signal_admission_ledger_unreadable",
    "1 while the admission ledger cannot be parsed: admission is stopped (acceptance, releases and "
    "the re-assertion of Node projections go on)",
    registry=REGISTRY,
)
PROJECTION_TAMPERED = Counter(
    "signal_projection_tampered",
    "Node projections that differed from the profile's record and were re-asserted",
    ["profile"],
    registry=REGISTRY,
)
BUILD_INFO = Gauge("signal_build_info", "The controller's version (value 1)", ["version"], registry=REGISTRY)
BUILD_INFO.labels(version=VERSION).set(1)


def refresh(phases: Iterable[str], reserved_nodes: int) -> None:
    """Set the Runs-by-phase and reserved-Nodes gauges (``phases``: one per Run)."""
    counts = Tally(phases)
    for phase in Phase:
        RUNS.labels(phase=phase.value).set(counts.get(phase.value, 0))
    NODES_RESERVED.set(reserved_nodes)


def observe_terminal(run: dict[str, Any], phase: Phase) -> None:
    FINISHED.labels(phase=phase.value).inc()
