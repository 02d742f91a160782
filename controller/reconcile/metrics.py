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
  the profile's record (controller/reconcile/reassert.py) and was rewritten from it.
* ``signal_build_info`` (gauge, by version): 1, labelled with the controller's version
  (shared/version.py).

Issue 45 (observability pack; docs/reference.md "Metrics" has the table, deploy/monitoring/
the rules and dashboard over them):

* ``signal_reconcile_duration_seconds`` (histogram, by kind); ``signal_workqueue_depth`` (by
  kind), ``signal_workqueue_queue_duration_seconds`` (histogram, by kind: queued to taken),
  ``signal_workqueue_retries_total`` (by kind: rate-limited requeues after a failure);
* ``signal_leader`` (gauge): 1 while this replica holds the Lease and may write;
* ``signal_api_requests_total`` (by verb and code) and ``signal_api_request_duration_seconds``
  (histogram, by verb): every request of the controller's Kubernetes clients (a hook of
  kubeio's ``Kube.observe``; kubeio imports no metrics library);
* ``signal_check_duration_seconds`` (histogram, by profile, check and verdict);
  ``signal_run_duration_seconds`` (histogram, by phase);
* set from the caches at each scrape (controller/rules/fleetstats.py): ``signal_nodes`` (by profile
  and result), ``signal_nodes_held`` and ``signal_held_reservation_oldest_age_seconds`` (by
  the phase of the Run holding them), ``signal_runs_past_deadline``.
"""

from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.rules import fleetstats
from controller.rules.nodes import NodeView
from controller.rules.queuekeys import Kind
from controller.rules.runview import RunView
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
QUEUE_DEPTH = Gauge("signal_workqueue_depth", "Keys waiting to be reconciled now", ["kind"], registry=REGISTRY)
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


LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RECONCILE_SECONDS = Histogram(
    "signal_reconcile_duration_seconds",
    "Duration of one reconcile, by kind of key",
    ["kind"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUEUE_SECONDS = Histogram(
    "signal_workqueue_queue_duration_seconds",
    "How long a key waited in the work queue before it was reconciled",
    ["kind"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUEUE_RETRIES = Counter(
    "signal_workqueue_retries", "Keys requeued with backoff after a failure", ["kind"], registry=REGISTRY
)
LEADER = Gauge("signal_leader", "1 while this replica holds the Lease and may write, else 0", registry=REGISTRY)
API_REQUESTS = Counter(
    "signal_api_requests", "Requests to the API server, by verb and HTTP code", ["verb", "code"], registry=REGISTRY
)
API_SECONDS = Histogram(
    "signal_api_request_duration_seconds",
    "Duration of a request to the API server (a watch: until the server accepted it)",
    ["verb"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
CHECK_SECONDS = Histogram(
    "signal_check_duration_seconds",
    "Duration of one check of a Run (its results' start to collection), by verdict",
    ["profile", "check", "verdict"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200),
    registry=REGISTRY,
)
RUN_SECONDS = Histogram(
    "signal_run_duration_seconds",
    "Duration of a Run, creation to its terminal phase",
    ["phase"],
    buckets=(10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600),
    registry=REGISTRY,
)
NODES = Gauge(
    "signal_nodes",
    "Nodes by profile and certification result (trusted label)",
    ["profile", "result"],
    registry=REGISTRY,
)
NODES_HELD = Gauge(
    "signal_nodes_held",
    "Nodes held by Runs that ended other than Succeeded, by the Run's phase",
    ["phase"],
    registry=REGISTRY,
)
HELD_OLDEST = Gauge(
    "signal_held_reservation_oldest_age_seconds",
    "Age of the oldest hold of a Node by a Run that ended other than Succeeded (since the Run ended)",
    ["phase"],
    registry=REGISTRY,
)
RUNS_PAST_DEADLINE = Gauge(
    "signal_runs_past_deadline", "Runs not ended whose suite deadline has passed", registry=REGISTRY
)

for _kind in Kind:  # every kind's series from the start (0), not only after its first event
    QUEUE_DEPTH.labels(kind=_kind.value)
    QUEUE_RETRIES.labels(kind=_kind.value)
    QUEUE_SECONDS.labels(kind=_kind.value)
    RECONCILE_SECONDS.labels(kind=_kind.value)


def observe_request(verb: str, code: str, seconds: float) -> None:
    """kubeio's ``Kube.observe`` hook."""
    API_REQUESTS.labels(verb=verb, code=code).inc()
    API_SECONDS.labels(verb=verb).observe(seconds)


def observe_checks(profile: str, checks: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> None:
    for check, verdict, seconds in fleetstats.check_durations(checks):
        CHECK_SECONDS.labels(profile=profile, check=check, verdict=verdict).observe(seconds)


def observe_queue_depth(kinds: Iterable[str], queued: Iterable[str]) -> None:
    for kind, depth in fleetstats.depth_by_kind(kinds, queued).items():
        QUEUE_DEPTH.labels(kind=kind).set(depth)


def refresh_fleet(
    profiles: Iterable[str], nodes: Iterable[NodeView], runs: Iterable[RunView], now: datetime | None = None
) -> None:
    """Set the fleet gauges from the caches (at each scrape): counts, never per-Node series."""
    now = now or datetime.now(UTC)
    nodes, runs = list(nodes), list(runs)
    NODES.clear()  # a deleted profile's series go with it
    profiles = list(profiles)
    for profile in profiles:  # present at 0 before the first one: rules alert on its increase()
        PROJECTION_TAMPERED.labels(profile=profile)
    for (profile, result), count in fleetstats.nodes_by_result(profiles, nodes).items():
        NODES.labels(profile=profile, result=result).set(count)
    for phase, hold in fleetstats.held(nodes, runs, now).items():
        NODES_HELD.labels(phase=phase).set(hold.nodes)
        HELD_OLDEST.labels(phase=phase).set(hold.oldest_seconds)
    RUNS_PAST_DEADLINE.set(fleetstats.past_deadline(runs, now))
    counts = Tally(r.phase for r in runs)
    for phase in Phase:
        RUNS.labels(phase=phase.value).set(counts.get(phase.value, 0))
    uids = {r.uid for r in runs}
    NODES_RESERVED.set(sum(1 for n in nodes if n.reservation and n.reservation.run_uid in uids))


def observe_terminal(run: dict[str, Any], phase: Phase, now: datetime | None = None) -> None:
    FINISHED.labels(phase=phase.value).inc()
    seconds = fleetstats.run_duration(run, now or datetime.now(UTC))
    if seconds is not None:
        RUN_SECONDS.labels(phase=phase.value).observe(seconds)
