"""deploy/ is what an operator applies (`kubectl apply -k deploy/`, SPEC §9): rendered with
the kustomize built into the local control plane's kubectl, server-side applied to the real
API server in a namespace of the test's own, and every Pod template in it (the Deployments,
the adapter WorkflowTemplate's step container, the adapter's backend Pods and MPIJob Pods
with the default workload policy) admitted by the PodSecurity plugin under `restricted`
(dry-run Pods; the plugin runs on dry-run requests). A non-compliant Pod is rejected, so a
regression in a template fails here.

Each test renders deploy/ through a throwaway overlay that sets its namespace (kustomize
renames the Namespace and re-points every ServiceAccount subject); ClusterRoles and
ClusterRoleBindings get a per-namespace suffix so tests sharing the session cluster never
collide, and are deleted afterwards. The CRDs are the session's own (identical bytes)."""

import contextlib
import copy
import json
import os
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.inputs import Inputs
from adapter.mpispec import mpijob
from adapter.workloads import backend_pod
from localcluster.binaries import kplane_binary
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.rbac import rbac_in_effect
from shared.profile import Check
from shared.run import Participant

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
LOCAL_OVERLAY = DEPLOY / "overlays" / "local"
CRDS = REPO / "crds"
CLUSTER_SCOPED_RBAC = {"ClusterRole", "ClusterRoleBinding"}
ADMISSION_POLICY = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
PER_NAMESPACE = CLUSTER_SCOPED_RBAC | ADMISSION_POLICY
"""Cluster-scoped objects a test renames ``<name>-<namespace>`` and deletes afterwards."""
PLURALS = {
    "Namespace": "namespaces",
    "CustomResourceDefinition": "customresourcedefinitions",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Service": "services",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "NetworkPolicy": "networkpolicies",
    "WorkflowTemplate": "workflowtemplates",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", *PER_NAMESPACE}
APPLY_ORDER = ["Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role"]
RESTRICTED_REJECTION = 'violates PodSecurity "restricted:latest"'


def kustomize(directory: Path) -> list[Obj]:
    """``kubectl kustomize DIR`` with the local control plane's kubectl (no network)."""
    result = subprocess.run(
        [str(kplane_binary()), "kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_into(source: Path, namespace: str, workdir: Path) -> list[Obj]:
    """``source`` rendered for ``namespace`` through an overlay that sets only the namespace;
    cluster-scoped RBAC and the adapter's admission policy renamed ``<name>-<namespace>``, the
    policy's binding selecting ``namespace``."""
    overlay = workdir / "overlay"
    overlay.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": [os.path.relpath(source, overlay)],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    docs = kustomize(overlay)
    for doc in docs:
        if doc["kind"] in PER_NAMESPACE:
            doc["metadata"]["name"] += f"-{namespace}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{namespace}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += f"-{namespace}"
            selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            doc["spec"]["matchResources"]["namespaceSelector"] = selector
    return docs


def object_path(doc: Obj) -> str:
    namespace = None if doc["kind"] in CLUSTER_SCOPED else doc["metadata"]["namespace"]
    return resource_path(doc["apiVersion"], PLURALS[doc["kind"]], namespace, doc["metadata"]["name"])


def by_kind(docs: list[Obj], kind: str) -> dict[str, Obj]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


async def apply_all(admin: KubeClient, docs: list[Obj]) -> None:
    """Server-side apply in dependency order (namespace, CRDs, identities first)."""

    def rank(doc: Obj) -> int:
        return APPLY_ORDER.index(doc["kind"]) if doc["kind"] in APPLY_ORDER else len(APPLY_ORDER)

    for doc in sorted(docs, key=rank):
        await admin.apply(object_path(doc), doc, manager="signal-localcluster")
    await rbac_in_effect(admin, docs)


async def dry_run_pod(admin: KubeClient, namespace: str, name: str, spec: Obj, labels: dict[str, str] | None) -> Obj:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}
    return await admin.request("POST", resource_path("v1", "pods", namespace), body=body, params={"dryRun": "All"})


@pytest.fixture
async def installed(cluster: LocalCluster, namespace: str, tmp_path: Path) -> AsyncIterator[list[Obj]]:
    """deploy/ rendered for the test's namespace and applied; cluster-scoped RBAC removed afterwards."""
    docs = render_into(DEPLOY, namespace, tmp_path)
    try:
        await apply_all(cluster.admin, docs)
        yield docs
    finally:
        for doc in docs:
            if doc["kind"] in PER_NAMESPACE:
                with contextlib.suppress(ApiError):
                    await cluster.admin.delete(object_path(doc))


def default_inputs(namespace: str, backend: str, **workload: Any) -> Inputs:
    check = Check.model_validate(
        {
            "name": "inventory",
            "scriptKey": "inventory.sh",
            "backend": backend,
            "gpuCount": 8,
            "backendActiveDeadline": "5m",
            **({"workload": workload} if workload else {}),
        }
    )
    participants = tuple(
        Participant.model_validate(
            {"index": i, "nodeName": f"gpu-{i}", "nodeUID": f"00000000-0000-0000-0000-00000000000{i}"}
        )
        for i in range(2)
    )
    return Inputs(namespace, "r-abc", "11111111-2222-3333-4444-555555555555", participants, "r-abc-scripts", 0, check)


# --- rendering (kustomize, no API server) -------------------------------------------------


def test_deploy_renders_the_crds_from_crds_and_every_component() -> None:
    docs = kustomize(DEPLOY)
    crds = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    on_disk = {
        d["metadata"]["name"]: d for p in sorted(CRDS.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d
    }
    assert crds == on_disk, "deploy/ must carry exactly the generated CRDs (crds/kustomization.yml lists them)"
    assert set(by_kind(docs, "ServiceAccount")) == {"default", "signal-controller", "signal-adapter", "signal-portal"}
    assert set(by_kind(docs, "Deployment")) == {"signal-controller", "signal-portal"}
    assert set(by_kind(docs, "PodDisruptionBudget")) == {"signal-controller", "signal-portal"}
    assert set(by_kind(docs, "WorkflowTemplate")) == {"signal-adapter"}
    policies = {
        "signal-adapter-workloads",
        "signal-evidence",
        "signal-controller-workflows",
        "signal-scripts",
        "signal-identities",
        "signal-adapter-kueue",
    }
    assert set(by_kind(docs, "ValidatingAdmissionPolicy")) == policies
    assert set(by_kind(docs, "ValidatingAdmissionPolicyBinding")) == policies
    for name, policy in by_kind(docs, "ValidatingAdmissionPolicy").items():
        assert policy["spec"]["failurePolicy"] == "Fail", name
    assert "default-deny-ingress" in by_kind(docs, "NetworkPolicy")
    namespaces = by_kind(docs, "Namespace")
    assert set(namespaces) == {"signal-system"}
    labels = namespaces["signal-system"]["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    for binding in by_kind(docs, "ValidatingAdmissionPolicyBinding").values():
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "signal-system"
        }
    namespaced = [d for d in docs if d["kind"] not in CLUSTER_SCOPED]
    # Everything lives in signal-system except the controller's right to post Events about
    # Nodes, which the API server accepts only in `default` (deploy/node-events).
    elsewhere = {
        (d["kind"], d["metadata"]["name"]) for d in namespaced if d["metadata"]["namespace"] != "signal-system"
    }
    assert elsewhere == {("Role", "signal-controller-node-events"), ("RoleBinding", "signal-controller-node-events")}
    assert {d["metadata"]["namespace"] for d in namespaced} == {"signal-system", "default"}


def test_crds_kustomization_lists_every_generated_crd() -> None:
    listed = yaml.safe_load((CRDS / "kustomization.yml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in CRDS.glob("*.yaml"))


def test_the_workflow_template_is_the_generated_file_unchanged() -> None:
    generated = yaml.safe_load((DEPLOY / "base" / "adapter-workflowtemplate.yaml").read_text())
    rendered = copy.deepcopy(by_kind(kustomize(DEPLOY), "WorkflowTemplate")["signal-adapter"])
    assert rendered["metadata"].pop("namespace") == "signal-system"
    assert rendered == generated


def test_controller_is_leader_elected_with_two_replicas_and_its_pod_name_as_identity() -> None:
    deployment = by_kind(kustomize(DEPLOY), "Deployment")["signal-controller"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"--namespace=$(SIGNAL_NAMESPACE)", "--identity=$(POD_NAME)", "--metrics-port=8080"} <= set(
        container["args"]
    )
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "SIGNAL_NAMESPACE": "metadata.namespace"}
    assert pod["serviceAccountName"] == "signal-controller"
    pdb = by_kind(kustomize(DEPLOY), "PodDisruptionBudget")["signal-controller"]
    assert pdb["spec"]["minAvailable"] == 1


def test_portal_contract_args_and_probes() -> None:
    pod = by_kind(kustomize(DEPLOY), "Deployment")["signal-portal"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "projectsignal.dev/portal:0.1.0"
    assert container["args"] == [
        "--namespace=$(SIGNAL_NAMESPACE)",
        "--port=8080",
        "--auth=sar",
        "--audience=signal-portal",
        "--tls-cert-file=/etc/signal-portal/tls/tls.crt",
        "--tls-key-file=/etc/signal-portal/tls/tls.key",
    ]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert {"name": "https", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert pod["serviceAccountName"] == "signal-portal"
    # TLS from a mounted Secret; the Service exposes HTTPS only.
    (tls,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "signal-portal-tls"
    assert {"name": "tls", "mountPath": "/etc/signal-portal/tls", "readOnly": True} in container["volumeMounts"]
    service = by_kind(kustomize(DEPLOY), "Service")["signal-portal"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("https", 443, "https")]


@pytest.mark.parametrize("source", [DEPLOY, LOCAL_OVERLAY], ids=["deploy", "local-overlay"])
def test_every_deployment_is_hardened(source: Path) -> None:
    for name, deployment in by_kind(kustomize(source), "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is True, name  # both talk to the API server
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["runAsNonRoot"] is True, name
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"] == {"drop": ["ALL"]}, name
            assert security["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name
            assert container["livenessProbe"], name
            assert container["readinessProbe"], name
    default = by_kind(kustomize(source), "ServiceAccount")["default"]
    assert default["automountServiceAccountToken"] is False


def test_local_overlay_runs_one_replica_of_each_from_local_images() -> None:
    docs = kustomize(LOCAL_OVERLAY)
    for deployment in by_kind(docs, "Deployment").values():
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Never"
    for pdb in by_kind(docs, "PodDisruptionBudget").values():
        assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}
    base_kinds = sorted((d["kind"], d["metadata"]["name"]) for d in kustomize(DEPLOY))
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == base_kinds


def deploy_images() -> list[tuple[str, str]]:
    """(image, the command it must run) for every container deploy/ names."""
    found = []
    for doc in kustomize(DEPLOY):
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                found.append((container["image"], container.get("command", [""])[0]))
        if doc["kind"] == "WorkflowTemplate":
            for template in doc["spec"]["templates"]:
                if "container" in template:
                    found.append((template["container"]["image"], template["container"]["command"][0]))
    return sorted(found)


def test_every_image_in_deploy_is_built_by_a_dockerfile_of_this_repository() -> None:
    """``projectsignal.dev/<x>:<tag>`` comes from ``Dockerfile.<x>``, whose ENTRYPOINT is the
    console script ``signal-<x>``; a container that names a command names that same script."""
    images = deploy_images()
    assert {image.split("/")[1].split(":")[0] for image, _ in images} == {"controller", "adapter", "portal"}
    for image, command in images:
        component = image.split("/")[1].split(":")[0]
        assert command in {"", f"signal-{component}"}, image
        dockerfile = REPO / f"Dockerfile.{component}"
        entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile.read_text(), re.MULTILINE)
        assert entrypoint is not None, dockerfile.name
        assert json.loads(entrypoint.group(1)) == [f"signal-{component}"], dockerfile.name


# --- the real API server --------------------------------------------------------------------


@pytest.mark.parametrize("source", [DEPLOY, LOCAL_OVERLAY], ids=["deploy", "local-overlay"])
async def test_deploy_applies_cleanly_with_server_side_apply(
    cluster: LocalCluster, namespace: str, tmp_path: Path, source: Path
) -> None:
    admin = cluster.admin
    docs = render_into(source, namespace, tmp_path)
    try:
        await apply_all(admin, docs)
        await apply_all(admin, docs)  # a second apply is a no-op, not a conflict
        for doc in docs:
            live = await admin.get(object_path(doc))
            assert live["metadata"]["name"] == doc["metadata"]["name"]
        ns = await admin.get(resource_path("v1", "namespaces", name=namespace))
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        sa = await admin.get(resource_path("v1", "serviceaccounts", namespace, "default"))
        assert sa["automountServiceAccountToken"] is False
    finally:
        for doc in docs:
            if doc["kind"] in PER_NAMESPACE:
                with contextlib.suppress(ApiError):
                    await admin.delete(object_path(doc))


async def test_every_deployment_pod_template_passes_restricted(
    admin: KubeClient, installed: list[Obj], namespace: str
) -> None:
    deployments = by_kind(installed, "Deployment")
    assert set(deployments) == {"signal-controller", "signal-portal"}
    for name, deployment in deployments.items():
        template = deployment["spec"]["template"]
        pod = await dry_run_pod(admin, namespace, f"{name}-dry", template["spec"], template["metadata"]["labels"])
        assert pod["spec"]["serviceAccountName"] == template["spec"]["serviceAccountName"]


async def test_the_workflow_template_step_container_passes_restricted(
    admin: KubeClient, installed: list[Obj], namespace: str
) -> None:
    template = by_kind(installed, "WorkflowTemplate")["signal-adapter"]
    steps = [t for t in template["spec"]["templates"] if "container" in t]
    assert sorted(t["name"] for t in steps) == ["check", "sweep"]  # a check, and the exit handler's sweep
    for step in steps:
        spec = {
            "serviceAccountName": template["spec"]["serviceAccountName"],
            "containers": [{"name": "main", **step["container"]}],
            "volumes": step.get("volumes", []),
        }
        labels = template["metadata"].get("labels")
        await dry_run_pod(admin, namespace, f"adapter-{step['name']}-dry", spec, labels)


async def test_the_adapters_backend_pods_pass_restricted_under_the_default_workload_policy(
    admin: KubeClient, installed: list[Obj], namespace: str
) -> None:
    pod = backend_pod(default_inputs(namespace, "Pod"), 0, "gpu-0", "projectsignal.dev/runner:0.1.0")
    await dry_run_pod(admin, namespace, "backend-dry", pod["spec"], pod["metadata"]["labels"])
    job = mpijob(default_inputs(namespace, "MPIJob"), "projectsignal.dev/runner:0.1.0")
    for role, replica in job["spec"]["mpiReplicaSpecs"].items():
        template = replica["template"]
        await dry_run_pod(admin, namespace, f"mpi-{role.lower()}-dry", template["spec"], template["metadata"]["labels"])


async def test_a_workload_policy_that_adds_capabilities_is_refused_under_restricted(
    admin: KubeClient, installed: list[Obj], namespace: str
) -> None:
    """By design: a check that adds a capability (IPC_LOCK for RDMA, as examples/demo does) or
    uses the host network cannot run in a `restricted` namespace; the operator guide says how
    to relax the namespace for such profiles."""
    for name, inputs in (
        ("ipc-lock", default_inputs(namespace, "Pod", capabilities=["IPC_LOCK"])),
        ("host-network", default_inputs(namespace, "Pod", hostNetwork=True)),
    ):
        pod = backend_pod(inputs, 0, "gpu-0", "projectsignal.dev/runner:0.1.0")
        with pytest.raises(ApiError) as refused:
            await dry_run_pod(admin, namespace, f"backend-{name}", pod["spec"], pod["metadata"]["labels"])
        assert refused.value.status == 403
        assert RESTRICTED_REJECTION in refused.value.message


@pytest.mark.parametrize(
    ("case", "change"),
    [
        ("privileged", lambda c, p: c["securityContext"].update(privileged=True, allowPrivilegeEscalation=True)),
        ("escalation-allowed", lambda c, p: c["securityContext"].update(allowPrivilegeEscalation=True)),
        ("runs-as-root", lambda c, p: c["securityContext"].update(runAsNonRoot=False, runAsUser=0)),
        (
            "no-seccomp",
            lambda c, p: (c["securityContext"].pop("seccompProfile"), p["securityContext"].pop("seccompProfile")),
        ),
        ("capabilities-kept", lambda c, p: c["securityContext"].pop("capabilities")),
        ("host-path", lambda c, p: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}})),
    ],
)
async def test_a_non_compliant_controller_pod_is_rejected(
    admin: KubeClient, installed: list[Obj], namespace: str, case: str, change: Any
) -> None:
    """The PodSecurity check is live: the controller's template, broken one way, is refused."""
    template = copy.deepcopy(by_kind(installed, "Deployment")["signal-controller"]["spec"]["template"])
    change(template["spec"]["containers"][0], template["spec"])
    with pytest.raises(ApiError) as refused:
        await dry_run_pod(admin, namespace, f"bad-{case}", template["spec"], template["metadata"]["labels"])
    assert refused.value.status == 403
    assert RESTRICTED_REJECTION in refused.value.message
