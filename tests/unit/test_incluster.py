"""The in-cluster install's decisions (localcluster/incluster.py): what of Argo's rendered
install runs, how its workflow-controller is configured, Signal's Deployments pinned to the
system node, the portal's TLS Secret and when a Deployment counts as available."""

import base64
from typing import Any

import pytest
import yaml

from localcluster import incluster
from localcluster.argoworkflows import CONFIGMAP, SYSTEM_NODE_LABEL


def _deployment(name: str, namespace: str = "argo", **spec: object) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "generation": 2},
        "spec": {
            "template": {"spec": {"containers": [{"name": name, "image": "upstream:latest", "args": []}]}},
            **spec,
        },
    }


ARGO_RENDERED: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "argo", "namespace": "argo"}},
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "argo-server", "namespace": "argo"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "argo-cluster-role"}},
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "argo-server-cluster-role"},
    },
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP, "namespace": "argo"}},
    _deployment("argo-server"),
    _deployment("workflow-controller"),
]


def test_argo_keeps_the_workflow_controller_and_leaves_argo_server_out() -> None:
    kept = incluster.argo_objects(ARGO_RENDERED, "wc:local", "exec:local")
    assert [(d["kind"], d["metadata"]["name"]) for d in kept] == [
        ("ServiceAccount", "argo"),
        ("ClusterRole", "argo-cluster-role"),
        ("ConfigMap", CONFIGMAP),
        ("Deployment", "workflow-controller"),
    ]


def test_the_workflow_controller_runs_the_local_images_on_the_system_node() -> None:
    kept = incluster.argo_objects(ARGO_RENDERED, "wc:local", "exec:local", instance_id="signal")
    deployment = next(d for d in kept if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "wc:local"
    assert container["imagePullPolicy"] == "Never"
    assert "--executor-image=exec:local" in container["args"]
    assert f"--configmap={CONFIGMAP}" in container["args"]
    assert pod["nodeSelector"] == {SYSTEM_NODE_LABEL: "true"}
    config = yaml.safe_load(next(d for d in kept if d["kind"] == "ConfigMap")["data"]["config"])
    assert config["instanceID"] == "signal"
    assert config["workflowDefaults"]["spec"]["nodeSelector"] == {SYSTEM_NODE_LABEL: "true"}
    assert config["workflowRestrictions"] == {"templateReferencing": "Secure"}
    # Step Pods pass Pod Security restricted in signal-system (docs/operator-guide.md).
    assert config["executor"]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # The input is not changed.
    assert ARGO_RENDERED[-1]["spec"]["template"]["spec"]["containers"][0]["image"] == "upstream:latest"


def test_signal_deployments_are_pinned_and_other_kinds_untouched() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "signal-portal", "namespace": "s"}}
    existing = _deployment("signal-controller", "s")
    existing["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/os": "linux"}
    out = incluster.signal_objects([service, existing])
    assert out[0] is service
    assert out[1]["spec"]["template"]["spec"]["nodeSelector"] == {
        "kubernetes.io/os": "linux",
        SYSTEM_NODE_LABEL: "true",
    }


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}},
            "/apis/apps/v1/namespaces/n/deployments/d",
        ),
        (
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "p"}},
            "/apis/scheduling.k8s.io/v1/priorityclasses/p",
        ),
        (
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t", "namespace": "n"}},
            "/api/v1/namespaces/n/secrets/t",
        ),
    ],
)
def test_object_paths(doc: dict[str, object], path: str) -> None:
    assert incluster.object_path(doc) == path


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(incluster.InstallError, match="Ingress web: not a kind"):
        incluster.object_path({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"}})


def test_the_portal_secret_carries_the_pair() -> None:
    secret = incluster.portal_tls_secret(b"CERT", b"KEY", "ns")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {"name": incluster.PORTAL_TLS_SECRET, "namespace": "ns"}
    assert base64.b64decode(secret["data"]["tls.crt"]) == b"CERT"
    assert base64.b64decode(secret["data"]["tls.key"]) == b"KEY"


@pytest.mark.parametrize(
    ("status", "available"),
    [
        ({}, False),
        ({"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 1}, False),
        ({"observedGeneration": 2, "updatedReplicas": 1, "availableReplicas": 0}, False),
        ({"observedGeneration": 2, "updatedReplicas": 0, "availableReplicas": 1}, False),
        ({"observedGeneration": 2, "updatedReplicas": 1, "availableReplicas": 1}, True),
    ],
)
def test_deployment_available(status: dict[str, int], available: bool) -> None:
    deployment = _deployment("d", replicas=1)
    deployment["status"] = status
    assert incluster.deployment_available(deployment) is available
