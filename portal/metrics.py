"""The portal's Prometheus metrics, in a registry of its own (served at /metrics).

Operational figures only: nothing here counts results, Nodes or workspaces, so /metrics (which
scrapers read without a token) reveals nothing a caller would need authorization to see; the
state of the fleet is in /api/v1/fleet, per caller.
"""

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from portal.index import Index

REGISTRY = CollectorRegistry()
REQUESTS = Counter("signal_portal_requests_total", "HTTP requests served", ["route", "code"], registry=REGISTRY)
LATENCY = Histogram(
    "signal_portal_request_seconds",
    "HTTP request latency",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
REFRESH = Histogram("signal_portal_refresh_seconds", "Time to rebuild the index", registry=REGISTRY)
EVIDENCE_FETCHES = Counter("signal_portal_evidence_fetches_total", "Evidence ConfigMaps fetched", registry=REGISTRY)
EVIDENCE_CACHE_BYTES = Gauge(
    "signal_portal_evidence_cache_bytes",
    "About how many bytes of Run evidence the portal holds (bounded by --max-evidence-cache-mib)",
    registry=REGISTRY,
)
READY = Gauge("signal_portal_index_built", "1 once the first index snapshot is built", registry=REGISTRY)
AUTH_REVIEWS = Counter(
    "signal_portal_auth_reviews_total", "TokenReviews and SubjectAccessReviews sent", ["kind"], registry=REGISTRY
)
AUTH_LIMITED = Counter(
    "signal_portal_auth_rate_limited_total",
    "Requests refused (429) after too many failed authentications from one address",
    registry=REGISTRY,
)


def observe_index(index: "Index", seconds: float) -> None:
    REFRESH.observe(seconds)
    READY.set(1 if index.built_at is not None else 0)
