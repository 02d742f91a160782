"""How the real MPI operator is installed and run (pure parts of localcluster/kubeflowmpi.py)."""

from pathlib import Path

import pytest

from localcluster import kubeflowmpi


def test_rules_come_from_the_source_trees_upstream_cluster_role_when_it_has_one(tmp_path: Path) -> None:
    role = tmp_path / "manifests" / "base" / "cluster-role.yaml"
    role.parent.mkdir(parents=True)
    role.write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\n"
        "rules:\n- apiGroups: ['']\n  resources: [pods]\n  verbs: [list]\n"
    )
    rules, source = kubeflowmpi.operator_rules(tmp_path)
    assert rules == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert source == str(role)


def test_without_an_upstream_cluster_role_our_own_rules_apply(tmp_path: Path) -> None:
    rules, source = kubeflowmpi.operator_rules(tmp_path)
    assert rules == kubeflowmpi.OPERATOR_RULES
    assert "OPERATOR_RULES" in source
    granted = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    assert ("", "nodes") not in granted
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in rules)


def test_a_cluster_role_file_without_a_cluster_role_is_refused(tmp_path: Path) -> None:
    role = tmp_path / "manifests" / "base" / "cluster-role.yaml"
    role.parent.mkdir(parents=True)
    role.write_text("kind: ConfigMap\n")
    with pytest.raises(kubeflowmpi.OperatorError, match="holds no ClusterRole"):
        kubeflowmpi.operator_rules(tmp_path)


def test_the_operator_pod_is_restricted_and_runs_as_its_service_account() -> None:
    deployment = kubeflowmpi.deployment("localcluster.projectsignal.dev/mpi-operator:local@sha256:" + "0" * 64)
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == kubeflowmpi.SERVICE_ACCOUNT
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "--lock-namespace=mpi-operator" in container["args"]
    assert not any(arg.startswith("--kubeConfig") for arg in container["args"])
