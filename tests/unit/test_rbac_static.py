"""A static check of every RBAC rule in deploy/ (every YAML file, not only those kustomize
includes): no wildcards, no escalate/bind/impersonate, no Secrets, no nodes/proxy or
pods/exec (nor any other Pod-exec-like subresource), no non-resource URLs or aggregation; and
each Role or ClusterRole is bound exactly once, to exactly the ServiceAccount of its own name.
Table-driven: one case per rule."""

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAMESPACE = "signal-system"
IDENTITIES = {"signal-controller", "signal-adapter", "signal-portal"}
ROLE_KINDS = {"Role", "ClusterRole"}
BINDING_KINDS = {"RoleBinding", "ClusterRoleBinding"}
FORBIDDEN_VERBS = {"escalate", "bind", "impersonate", "*"}
FORBIDDEN_RESOURCES = {
    "secrets",
    "nodes/proxy",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "serviceaccounts/token",
    "certificatesigningrequests/approval",
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "*",
}
KNOWN_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and "kind" in doc:
                found.append((str(path.relative_to(REPO)), doc))
    return found


DOCS = documents()
ROLES = [(where, doc) for where, doc in DOCS if doc["kind"] in ROLE_KINDS]
BINDINGS = [(where, doc) for where, doc in DOCS if doc["kind"] in BINDING_KINDS]
RULES = [
    pytest.param(doc, rule, id=f"{doc['kind']}/{doc['metadata']['name']}#{i}:{','.join(rule.get('resources', []))}")
    for _, doc in ROLES
    for i, rule in enumerate(doc.get("rules") or [])
]


NODE_EVENTS = "signal-controller-node-events"
"""The one Role outside signal-system: Events about Nodes may only be created in ``default``."""


def _identity(role: dict[str, Any]) -> str:
    name: str = role["metadata"]["name"]
    return "signal-controller" if name == NODE_EVENTS else name


def test_deploy_holds_the_three_identities() -> None:
    assert {d["metadata"]["name"] for _, d in DOCS if d["kind"] == "ServiceAccount"} >= IDENTITIES
    assert {_identity(d) for _, d in ROLES} == IDENTITIES


def test_the_node_events_role_creates_events_in_default_only() -> None:
    (role,) = [d for _, d in ROLES if d["metadata"]["name"] == NODE_EVENTS]
    assert role["kind"] == "Role"
    assert role["metadata"]["namespace"] == "default"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    assert len(RULES) >= 20


@pytest.mark.parametrize(("role", "rule"), RULES)
def test_rule_is_narrow(role: dict[str, Any], rule: dict[str, Any]) -> None:
    assert set(rule) <= {"apiGroups", "resources", "verbs"}, "no resourceNames games, no nonResourceURLs"
    assert rule["apiGroups"]
    assert rule["resources"]
    assert rule["verbs"]
    assert "*" not in rule["apiGroups"]
    assert not any("*" in r for r in rule["resources"])
    assert not set(rule["verbs"]) & FORBIDDEN_VERBS
    assert set(rule["verbs"]) <= KNOWN_VERBS
    assert not set(rule["resources"]) & FORBIDDEN_RESOURCES


@pytest.mark.parametrize("role", [pytest.param(doc, id=f"{doc['kind']}/{doc['metadata']['name']}") for _, doc in ROLES])
def test_role_is_plain_and_bound_to_exactly_its_service_account(role: dict[str, Any]) -> None:
    assert "aggregationRule" not in role
    name = role["metadata"]["name"]
    home = "default" if name == NODE_EVENTS else NAMESPACE
    if role["kind"] == "Role":
        assert role["metadata"]["namespace"] == home
    bound = [
        b
        for _, b in BINDINGS
        if b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": name}
        and (role["kind"] == "ClusterRole" or b["metadata"].get("namespace") == home)
    ]
    assert len(bound) == 1, f"{role['kind']} {name} is bound {len(bound)} times"
    assert bound[0]["metadata"]["name"] == name
    assert bound[0]["subjects"] == [{"kind": "ServiceAccount", "name": _identity(role), "namespace": NAMESPACE}]


@pytest.mark.parametrize(
    "binding", [pytest.param(doc, id=f"{doc['kind']}/{doc['metadata']['name']}") for _, doc in BINDINGS]
)
def test_binding_names_a_role_of_deploy(binding: dict[str, Any]) -> None:
    ref = binding["roleRef"]
    if binding["kind"] == "RoleBinding":
        assert ref["kind"] == "Role", "a RoleBinding to a ClusterRole would borrow cluster-wide rules"
    assert (ref["kind"], ref["name"]) in {(d["kind"], d["metadata"]["name"]) for _, d in ROLES}
