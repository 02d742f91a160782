"""Installing Signal into a local cluster the way `kubectl apply -k deploy/` would, for the
demo and the tests: the controller's and the adapter's RBAC and the adapter WorkflowTemplate
from deploy/base (re-namespaced), a source ConfigMap from a directory of scripts, and the
controller itself as a local process running as its ServiceAccount."""

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from kubeio.errors import NotFound
from localcluster import identities, procs
from localcluster.controlplane import ControlPlane
from localcluster.imageenv import image_env
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.rbac import rbac_in_effect
from shared import keys
from shared.digests import bundle_digest
from shared.policies import EVIDENCE_POLICY, POLICY_FILES, PROBE_NAME, SCRIPTS_POLICY

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


def _policy_documents(namespace: str) -> list[Obj]:
    """Every policy and binding of POLICY_FILES for ``namespace``, in the order they are
    applied: all policies, then all bindings, the evidence policy and its binding last of each
    (``install_policies`` says why)."""
    text: list[Obj] = []
    for file in POLICY_FILES.values():
        content = (REPO / file).read_text().replace(f"namespace: {DEFAULT_NAMESPACE}", f"namespace: {namespace}")
        text += [doc for doc in yaml.safe_load_all(content) if doc]
    for doc in text:
        if doc["kind"] not in POLICY_KINDS:
            raise ValueError(f"{doc['kind']} {doc['metadata']['name']} in a policy file; only policies and bindings")
        if namespace != DEFAULT_NAMESPACE:
            bind_policy_to(doc, namespace)

    def order(doc: Obj) -> tuple[bool, bool]:
        policy = (
            doc["spec"]["policyName"] if doc["kind"] == "ValidatingAdmissionPolicyBinding" else doc["metadata"]["name"]
        )
        return doc["kind"] == "ValidatingAdmissionPolicyBinding", policy.startswith(EVIDENCE_POLICY)

    return sorted(text, key=order)


async def _denied_by(admin: KubeClient, namespace: str, policy: str, body: Obj) -> bool:
    """Whether the admin's server-side dry-run create of ConfigMap ``body`` in ``namespace`` is
    refused by ``policy`` (a copy named ``<policy>-<namespace>``); any other refusal is raised."""
    try:
        await admin.request("POST", resource_path("v1", "configmaps", namespace), body=body, params={"dryRun": "All"})
    except ApiError as error:
        if f"ValidatingAdmissionPolicy '{policy}" in error.message:
            return True
        raise
    return False


async def install_policies(admin: KubeClient, namespace: str, timeout: float = 30.0) -> list[Obj]:
    """Signal's admission policies (shared.policies.POLICY_FILES), bound to ``namespace``
    (outside signal-system, per-namespace copies: see ``bind_policy_to``), and wait until the
    API server enforces every one of them. The adapter and the controller refuse to start until
    their policies are in force.

    The API server's admission plugin does not take a policy into force when it is written: it
    recompiles its whole set from its caches of policies and of bindings at most once a second
    (k8s.io/apiserver policy/generic ``policyRefreshInterval``). Policies written one file after
    the other can therefore be in force in part: CI saw the evidence policy in force (the one
    probe this function made until 2026-12-07) while the signal-scripts policy, written after
    it, was not yet, and test_only_the_controller_writes_a_runs_snapshot saw every forbidden
    snapshot write admitted. Hence the order: all policies first, then all bindings, the
    evidence policy and its binding the last of each. Each cache receives its objects in the
    order they were written, so a recompilation that holds the evidence binding and policy
    holds every other one too, and the evidence probe's refusal (an admin's dry-run of a
    malformed evidence ConfigMap) proves the whole set in force. The signal-scripts probe (an
    admin's dry-run of a snapshot-named ConfigMap without a Run's labels) is checked as well,
    as direct evidence for the policy CI saw missing."""
    await configure_runner_image(admin, namespace, overwrite=False)
    applied = _policy_documents(namespace)
    for doc in applied:
        path = resource_path(doc["apiVersion"], PLURALS[doc["kind"]], name=doc["metadata"]["name"])
        await admin.apply(path, doc)
    probes = {
        EVIDENCE_POLICY: {
            "metadata": {"name": f"{PROBE_NAME}-c0-results"},
            "data": {"probe": "no labels, owner or immutability"},
        },
        SCRIPTS_POLICY: {"metadata": {"name": f"{PROBE_NAME}-scripts"}, "data": {"probe": "no Run labels or owner"}},
    }
    deadline = time.monotonic() + timeout
    waiting = dict(probes)
    while True:
        for policy, body in list(waiting.items()):
            if await _denied_by(admin, namespace, policy, body):
                del waiting[policy]
        if not waiting:
            return applied
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the admission policies {', '.join(waiting)} for namespace {namespace} were not in force after "
                f"{timeout}s (a server-side dry-run they must refuse was admitted)"
            )
        await asyncio.sleep(0.2)


async def remove_policies(admin: KubeClient, namespace: str) -> None:
    """Delete the per-namespace copies of Signal's policies and bindings that
    ``install_policies`` made for ``namespace`` (cluster-scoped: deleting the namespace leaves
    them behind, and every one left is evaluated on each later matching write of the session)."""
    if namespace == DEFAULT_NAMESPACE:
        return
    paths = [
        resource_path(doc["apiVersion"], PLURALS[doc["kind"]], name=doc["metadata"]["name"])
        for doc in _policy_documents(namespace)
    ]

    async def delete(path: str) -> None:
        with contextlib.suppress(NotFound):
            await admin.delete(path)

    # Bindings and policies at once: a binding whose policy is gone is ignored by the API server.
    await asyncio.gather(*(delete(path) for path in paths))


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
