"""Installing Signal into a local cluster the way `kubectl apply -k deploy/` would, for the
demo and the tests: the controller's and the adapter's RBAC and the adapter WorkflowTemplate
from deploy/base (re-namespaced), a source ConfigMap from a directory of scripts, and the
controller itself as a local process running as its ServiceAccount."""

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from localcluster import identities, procs
from localcluster.controlplane import ControlPlane
from localcluster.imageenv import image_env
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.rbac import rbac_in_effect
from shared import keys
from shared.digests import bundle_digest
from shared.policies import EVIDENCE_POLICY, POLICY_FILES, PROBE_NAME

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "base"
DEFAULT_NAMESPACE = "signal-system"
PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "WorkflowTemplate": "workflowtemplates",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def bind_policy_to(doc: Obj, namespace: str) -> None:
    """Make a policy or binding of deploy/ a per-namespace copy for ``namespace``: both are
    cluster-scoped, so they get the namespace as a suffix, and the binding selects it."""
    doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
    if doc["kind"] == "ValidatingAdmissionPolicyBinding":
        doc["spec"]["policyName"] = f"{doc['spec']['policyName']}-{namespace}"
        selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        doc["spec"]["matchResources"]["namespaceSelector"] = selector


async def apply_file(admin: KubeClient, name: str, namespace: str) -> list[Obj]:
    """Server-side apply every document of deploy/base/<name> into ``namespace``
    (bindings outside it get a per-namespace name so namespaces do not collide); returns
    them as applied."""
    text = (DEPLOY / name).read_text().replace(f"namespace: {DEFAULT_NAMESPACE}", f"namespace: {namespace}")
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    for doc in docs:
        elsewhere = doc["metadata"].get("namespace") == "default" and namespace != "default"
        foreign = doc["kind"] == "ClusterRoleBinding" or (doc["kind"] == "RoleBinding" and elsewhere)
        if foreign and namespace != DEFAULT_NAMESPACE:
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
        if doc["kind"] in POLICY_KINDS and namespace != DEFAULT_NAMESPACE:
            bind_policy_to(doc, namespace)
        scoped = doc["kind"] not in CLUSTER_SCOPED
        if scoped and not elsewhere:
            doc["metadata"]["namespace"] = namespace
        path = resource_path(
            doc["apiVersion"], PLURALS[doc["kind"]], doc["metadata"].get("namespace") if scoped else None
        )
        await admin.apply(f"{path}/{doc['metadata']['name']}", doc)
    return docs


async def install(admin: KubeClient, namespace: str) -> None:
    await admin.apply(
        resource_path("v1", "namespaces", name=namespace),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    names: tuple[str, ...] = (
        "controller-rbac.yaml",
        "../node-events/rbac.yaml",
        "adapter-rbac.yaml",
        "portal-rbac.yaml",
    )
    applied: list[Obj] = []
    for name in (*names, "adapter-workflowtemplate.yaml"):
        applied += await apply_file(admin, name, namespace)
    await install_policies(admin, namespace)
    await rbac_in_effect(admin, applied)


def released_runner_image() -> str:
    """The runner image deploy/base/namespace.yaml names on the Signal Namespace."""
    for doc in yaml.safe_load_all((DEPLOY / "namespace.yaml").read_text()):
        if doc and doc["kind"] == "Namespace":
            return str(doc["metadata"]["annotations"][keys.RUNNER_IMAGE_ANNOTATION])
    raise LookupError(f"{DEPLOY / 'namespace.yaml'} has no Namespace")


async def configure_runner_image(admin: KubeClient, namespace: str, image: str = "", *, overwrite: bool = True) -> None:
    """Set the Namespace annotation the adapter's admission policy reads (as kustomize's
    ``images:`` sets it on the Signal Namespace): ``image``, or deploy/'s released one. Without
    ``overwrite``, a value already there is kept."""
    path = resource_path("v1", "namespaces", name=namespace)
    if not overwrite:
        current = await admin.get(path)
        if keys.RUNNER_IMAGE_ANNOTATION in (current["metadata"].get("annotations") or {}):
            return
    patch = {"metadata": {"annotations": {keys.RUNNER_IMAGE_ANNOTATION: image or released_runner_image()}}}
    await admin.merge_patch(path, patch)


async def install_policies(admin: KubeClient, namespace: str, timeout: float = 30.0) -> list[Obj]:
    """Signal's admission policies (shared.policies.POLICY_FILES), bound to ``namespace``
    (outside signal-system, per-namespace copies: see ``bind_policy_to``), and wait until the
    API server enforces them (an admin's dry-run of a malformed evidence ConfigMap is denied:
    policies reach the admission plugin together). The adapter and the controller refuse to
    start until their policies are in force."""
    await configure_runner_image(admin, namespace, overwrite=False)
    applied: list[Obj] = []
    for file in POLICY_FILES.values():
        applied += await apply_file(admin, Path(file).name, namespace)
    probe = {"metadata": {"name": f"{PROBE_NAME}-c0-results"}, "data": {"probe": "no labels, owner or immutability"}}
    deadline = time.monotonic() + timeout
    while True:
        try:
            await admin.request(
                "POST", resource_path("v1", "configmaps", namespace), body=probe, params={"dryRun": "All"}
            )
        except ApiError as error:
            if f"ValidatingAdmissionPolicy '{EVIDENCE_POLICY}" in error.message:
                return applied
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"the admission policies for namespace {namespace} were not in force after {timeout}s")
        await asyncio.sleep(0.2)


async def source_config_map(admin: KubeClient, namespace: str, name: str, scripts: Path) -> str:
    """Create the immutable source ConfigMap from a directory of scripts; returns its digest."""
    data = {p.name: p.read_text() for p in sorted(scripts.iterdir()) if p.is_file()}
    await admin.apply(
        resource_path("v1", "namespaces", name=namespace),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data, "immutable": True}
    await admin.create(resource_path("v1", "configmaps", namespace), body)
    return bundle_digest(data, {})


def profile_from(path: Path, digest: str) -> Obj:
    profile: dict[str, Any] = yaml.safe_load(path.read_text())
    profile["spec"]["source"]["digest"] = digest
    return profile


async def start_portal(
    plane: ControlPlane, namespace: str, workdir: Path, *, port: int, auth: str = "none"
) -> subprocess.Popen[bytes]:
    """The real signal-portal as a local process, as its ServiceAccount, on 127.0.0.1."""
    sa = await identities.service_account(plane, namespace, "signal-portal", create=False)
    config = sa.kubeconfig(workdir / "portal.kubeconfig", namespace)
    argv = [str(Path(sys.executable).parent / "signal-portal"), "--kubeconfig", str(config)]
    argv += ["--namespace", namespace, "--port", str(port), "--host", "127.0.0.1", "--auth", auth, "--resync", "2"]
    with (workdir / "portal.log").open("ab") as log:
        # A long-lived child that outlives this call (not an awaited asyncio process); it dies with this process.
        return procs.popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **image_env()})


async def start_controller(
    plane: ControlPlane,
    namespace: str,
    workdir: Path,
    *,
    instance_id: str = "",
    metrics_port: int = 0,
    resync: float = 5,
) -> subprocess.Popen[bytes]:
    """The real signal-controller as a local process, as its ServiceAccount."""
    sa = await identities.service_account(plane, namespace, "signal-controller", create=False)
    config = sa.kubeconfig(workdir / "controller.kubeconfig", namespace)
    log = (workdir / "controller.log").open("ab")
    argv = [
        str(Path(sys.executable).parent / "signal-controller"),
        "--kubeconfig",
        str(config),
        "--namespace",
        namespace,
        "--identity",
        f"controller-{namespace}",
        "--resync",
        str(resync),
        "--metrics-port",
        str(metrics_port),
        "--workflow-instance-id",
        instance_id,
        "--log-format",
        "json",
    ]
    try:
        # A long-lived child that outlives this call (not an awaited asyncio process); it dies with this process.
        return procs.popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **image_env()})
    finally:
        log.close()
