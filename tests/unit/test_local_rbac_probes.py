"""localcluster.rbac.probes: which SubjectAccessReview proves that a binding took effect."""

from localcluster.rbac import probes


def _role(kind: str, name: str, rules: list[dict[str, list[str]]], namespace: str | None = None) -> dict[str, object]:
    meta: dict[str, str] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "rules": rules}


def _binding(
    kind: str, role_kind: str, role: str, subjects: list[dict[str, str]], namespace: str = ""
) -> dict[str, object]:
    meta = {"name": f"{role}-binding", **({"namespace": namespace} if namespace else {})}
    return {"kind": kind, "metadata": meta, "roleRef": {"kind": role_kind, "name": role}, "subjects": subjects}


SA = {"kind": "ServiceAccount", "name": "signal-controller", "namespace": "ns1"}


def test_a_role_binding_probes_the_first_rule_in_its_namespace() -> None:
    rules = [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
         "resourceNames": ["signal-controller"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
    ]  # fmt: skip
    docs = [_role("Role", "r", rules, "ns1"), _binding("RoleBinding", "Role", "r", [SA], "ns1")]
    assert probes(docs) == [
        {
            "user": "system:serviceaccount:ns1:signal-controller",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"],
            "resourceAttributes": {
                "verb": "get",
                "group": "coordination.k8s.io",
                "resource": "leases",
                "name": "signal-controller",
                "namespace": "ns1",
            },
        }
    ]


def test_a_cluster_binding_probes_cluster_wide_with_subresources_and_users() -> None:
    rules = [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]
    user = {"kind": "User", "name": "alice"}
    group = {"kind": "Group", "name": "signal:operators"}
    docs = [
        _role("ClusterRole", "c", rules),
        _binding("ClusterRoleBinding", "ClusterRole", "c", [SA, user, group]),
        None,  # an empty YAML document
    ]
    found = probes(docs)  # type: ignore[arg-type]
    assert [p["user"] for p in found] == ["system:serviceaccount:ns1:signal-controller", "alice"]
    assert found[1]["groups"] == ["system:authenticated"]
    assert found[0]["resourceAttributes"] == {
        "verb": "patch",
        "group": "",
        "resource": "nodes",
        "subresource": "status",
    }


def test_bindings_to_roles_elsewhere_or_without_resource_rules_are_not_probed() -> None:
    docs = [
        _role("Role", "empty", [], "ns1"),
        _role("ClusterRole", "urls", [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        _binding("ClusterRoleBinding", "ClusterRole", "urls", [SA]),
        _binding("RoleBinding", "Role", "empty", [SA], "ns1"),
        _binding("RoleBinding", "Role", "not-here", [SA], "ns1"),
        _binding("RoleBinding", "ClusterRole", "empty", [SA], "ns1"),
    ]
    assert probes(docs) == []
