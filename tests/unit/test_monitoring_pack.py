"""deploy/monitoring/ (issue 45): the ServiceMonitor selects the controller's metrics Service
and port, every expression of the PrometheusRule and of the dashboard uses only metrics the
controller exports, every alert has a unit test, and the pack is not in the default install.
The real ``promtool`` and Prometheus run them in tests/integration/test_monitoring_prometheus.py."""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics_core import Metric

import controller.reconcile.accept
import controller.reconcile.recordproof  # noqa: F401 - registers its metric
from controller.reconcile import metrics

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}
METRIC = re.compile(r"\bsignal_[a-z0-9_]+\b")


def exported() -> set[str]:
    """Every sample name the controller's registry can expose."""
    families: list[Metric] = list(metrics.REGISTRY.collect())
    return {f.name + suffix for f in families for suffix in SUFFIXES[f.type]}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def rules() -> dict[str, Any]:
    (doc,) = documents(MONITORING / "prometheusrule.yaml")
    assert doc["kind"] == "PrometheusRule"
    spec: dict[str, Any] = doc["spec"]
    return spec


def dashboard_exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            yield node["expr"]
        for value in node.values():
            yield from dashboard_exprs(value)
    elif isinstance(node, list):
        for value in node:
            yield from dashboard_exprs(value)


def test_the_servicemonitor_scrapes_the_controllers_metrics_service() -> None:
    (monitor,) = documents(MONITORING / "servicemonitor.yaml")
    services = [d for d in documents(REPO / "deploy" / "base" / "controller.yaml") if d["kind"] == "Service"]
    (service,) = [s for s in services if s["metadata"]["name"] == "signal-controller-metrics"]
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}


def test_every_metric_the_rules_and_the_dashboard_use_is_exported() -> None:
    exprs = [r["expr"] for g in rules()["groups"] for r in g["rules"]]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    exprs += list(dashboard_exprs(dashboard))
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert len(used) >= 20, used
    assert used - exported() == set()


@pytest.mark.parametrize(
    ("panel", "metric"),
    [
        ("Fleet by result", "signal_nodes"),
        ("Checks by verdict over time", "signal_check_duration_seconds_count"),
        ("Admission latency", "signal_admission_seconds_bucket"),
        ("Check duration", "signal_check_duration_seconds_bucket"),
        ("Held Nodes", "signal_nodes_held"),
    ],
)
def test_the_dashboard_has_the_panels_asked_for(panel: str, metric: str) -> None:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    (found,) = [p for p in dashboard["panels"] if p["title"] == panel]
    assert any(metric in e for e in dashboard_exprs(found))


def test_every_alert_has_a_promtool_unit_test() -> None:
    alerts = {r["alert"] for g in rules()["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load((MONITORING / "tests" / "rules-test.yaml").read_text())
    firing = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert (
        alerts
        == firing
        == {
            "SignalNodeHeldAfterFailure",
            "SignalRunPastSuiteDeadline",
            "SignalNoLeader",
            "SignalCachesUnsynced",
            "SignalEvidenceRejected",
            "SignalProjectionTampered",
            "SignalCertificationStale",
        }
    )


def test_the_pack_is_not_in_the_default_install() -> None:
    for kustomization in (REPO / "deploy").rglob("kustomization.yaml"):
        if kustomization.parent == MONITORING:
            continue
        text = kustomization.read_text()
        assert "monitoring" not in text, kustomization
