"""deploy/base/network-policies.yaml (issue 42, Low): who reaches the controller's /metrics and
the backend Pods, read from the manifest itself. NetworkPolicies are enforced by the cluster's
network plugin, which the local clusters do not run; the API server's own validation of these
objects is tests/integration/test_deploy_manifests.py's."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from shared import keys

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "base" / "network-policies.yaml"


@pytest.fixture(scope="module")
def policies() -> dict[str, Any]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def test_metrics_are_scraped_only_from_the_monitoring_namespace(policies: dict[str, Any]) -> None:
    (rule,) = policies["signal-controller-metrics"]["spec"]["ingress"]
    (peer,) = rule["from"]
    # Never `namespaceSelector: {}` (any namespace): a Pod labelled prometheus anywhere would do.
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    assert peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]


def test_backend_pods_are_reached_only_by_backend_pods_of_this_namespace(policies: dict[str, Any]) -> None:
    (rule,) = policies["signal-backend-peers"]["spec"]["ingress"]
    (peer,) = rule["from"]
    assert "namespaceSelector" not in peer, "a peer outside the Signal namespace"
    assert "ipBlock" not in peer
    selector = peer["podSelector"]
    assert selector["matchLabels"] == {keys.COMPONENT_LABEL: "backend"}
    assert {(e["key"], e["operator"]) for e in selector["matchExpressions"]} == {
        (keys.RUN_UID_LABEL, "Exists"),
        (keys.CHECK_LABEL, "Exists"),
    }


def test_everything_else_is_denied_ingress(policies: dict[str, Any]) -> None:
    deny = policies["default-deny-ingress"]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
