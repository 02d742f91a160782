"""The controller's Prometheus metrics (served on ``--metrics-port`` at ``/metrics``).

* ``signal_runs`` (gauge, by phase): Runs in the controller's namespace.
* ``signal_nodes_reserved`` (gauge): Nodes carrying a reservation of this namespace's Runs.
* ``signal_admission_seconds`` (histogram): one admission, ledger write to Workflow submitted.
* ``signal_evidence_verification_failures_total`` (counter): check evidence that failed
  verification (missing, malformed, foreign, digest mismatch, incomplete, ...).
* ``signal_runs_finished_total`` (counter, by phase).
"""

from collections import Counter as Tally
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from shared.run import Phase

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


def serve(port: int) -> None:
    """Serve /metrics on ``port`` (0: do not serve)."""
    if port:
        start_http_server(port, registry=REGISTRY)


def refresh(runs: list[dict[str, Any]], reserved_nodes: int) -> None:
    counts = Tally(((r.get("status") or {}).get("phase") or Phase.PENDING.value) for r in runs)
    for phase in Phase:
        RUNS.labels(phase=phase.value).set(counts.get(phase.value, 0))
    NODES_RESERVED.set(reserved_nodes)


def observe_terminal(run: dict[str, Any], phase: Phase) -> None:
    FINISHED.labels(phase=phase.value).inc()
