"""Helpers of the attack tests (tests/integration/test_attacks.py; issue 12): identities that
RBAC lets write ConfigMaps in the Signal namespace, evidence forged exactly as Signal stores it,
and waiting on whether an admission policy is enforced."""

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from controller.manifests import owner_reference
from kubeio.errors import NotFound
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.rbac import rbac_in_effect
from shared import keys, policies
from shared.acceptance import RUN_EVIDENCE_SCHEMA
from shared.evidence import config_map
from tests import evidence_builders as eb
from tests.controller_support import eventually

ADMISSION = "admissionregistration.k8s.io/v1"
ARGO = "argoproj.io/v1alpha1"
STARTED = "2026-11-30T00:00:00Z"
ACTIVE_TIMEOUT = 30.0


def configmaps(namespace: str, name: str | None = None) -> str:
    return resource_path("v1", "configmaps", namespace, name)


def denied_by(error: ApiError, policy: str) -> bool:
    return error.status == 403 and f"ValidatingAdmissionPolicy '{policy}-" in error.message


async def attempt(call: Awaitable[Obj]) -> ApiError | None:
    """The API error a request met, or None when it was admitted."""
    try:
        await call
    except ApiError as error:
        return error
    return None


async def dry_run(kube: KubeClient, path: str, body: Obj) -> Obj:
    return await kube.request("POST", path, body=body, params={"dryRun": "All"})


async def until(condition: Callable[[], Awaitable[bool]], what: str, timeout: float = ACTIVE_TIMEOUT) -> None:
    await eventually(condition, timeout=timeout, interval=0.25, what=what)


def bad_evidence(namespace: str) -> Obj:
    """An evidence-named ConfigMap nobody may create (no labels, owner or immutability)."""
    return {"metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}-c0-results", "namespace": namespace}, "data": {}}


async def evidence_policy_enforced(kube: KubeClient, namespace: str, enforced: bool = True) -> None:
    async def check() -> bool:
        error = await attempt(dry_run(kube, configmaps(namespace), bad_evidence(namespace)))
        return (error is not None and denied_by(error, policies.EVIDENCE_POLICY)) == enforced

    await until(check, f"the evidence policy to be {'in force' if enforced else 'gone'} in {namespace}")


def bad_workflow(namespace: str) -> Obj:
    return {
        "apiVersion": ARGO,
        "kind": "Workflow",
        "metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}", "namespace": namespace},
        "spec": {"workflowTemplateRef": {"name": keys.WORKFLOW_TEMPLATE}, "podSpecPatch": "{}"},
    }


async def workflow_policy_enforced(controller: KubeClient, namespace: str, enforced: bool = True) -> None:
    async def check() -> bool:
        error = await attempt(dry_run(controller, resource_path(ARGO, "workflows", namespace), bad_workflow(namespace)))
        return (error is not None and denied_by(error, policies.CONTROLLER_WORKFLOWS_POLICY)) == enforced

    await until(check, f"the Workflow policy to be {'in force' if enforced else 'gone'} in {namespace}")


async def service_account_client(cluster: LocalCluster, namespace: str, name: str) -> KubeClient:
    sa = await identities.service_account(cluster.plane, namespace, name, create=False)
    return sa.client()


@contextlib.asynccontextmanager
async def attackers(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[dict[str, KubeClient]]:
    """Two identities that RBAC lets write ConfigMaps in the Signal namespace:

    * ``mpi-operator``: a ServiceAccount with every ConfigMap verb in every namespace, as a
      third-party operator's ClusterRole grants (the Kubeflow MPI operator v0.8.0 gets, lists,
      watches, creates and updates ConfigMaps cluster-wide: pkg/controller/mpi_job_controller.go
      of its source; its source tree here has no RBAC manifest to read, so this identity gets a
      superset of those rights);
    * ``editor``: the user carol with the ConfigMap verbs of Kubernetes' ``edit`` role in the
      namespace (a Role of its own: the local kube-controller-manager runs no ClusterRole
      aggregation, so the built-in ``edit`` is empty here).
    """
    role = f"{namespace}-mpi-operator-configmaps"
    docs: list[Obj] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mpi-operator", "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": namespace}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "namespace-editor", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "carol-edits", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "namespace-editor"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}],
        },
    ]
    plurals = {
        "ServiceAccount": ("v1", "serviceaccounts"),
        "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles"),
        "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
        "Role": ("rbac.authorization.k8s.io/v1", "roles"),
        "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    }
    for doc in docs:
        version, plural = plurals[doc["kind"]]
        path = resource_path(version, plural, doc["metadata"].get("namespace"), doc["metadata"]["name"])
        await admin.apply(path, doc)
    await rbac_in_effect(admin, docs)
    operator = await service_account_client(cluster, namespace, "mpi-operator")
    editor = identities.user(cluster.plane, "carol").client()
    clients = {"mpi-operator": operator, "editor": editor}
    try:
        for who, client in clients.items():  # both can write an ordinary ConfigMap here

            async def allowed(client: KubeClient = client) -> bool:
                plain = {"metadata": {"name": f"plain-{uuid.uuid4().hex[:6]}", "namespace": namespace}, "data": {}}
                return await attempt(dry_run(client, configmaps(namespace), plain)) is None

            await until(allowed, f"{who} to be allowed to create ConfigMaps")
        yield clients
    finally:
        for client in clients.values():
            await client.close()
        for kind in ("ClusterRoleBinding", "ClusterRole"):
            version, plural = plurals[kind]
            with contextlib.suppress(ApiError):
                await admin.delete(resource_path(version, plural, name=role))


def run_evidence_document(run: Obj, check_document: Obj | None, nodes: dict[str, str], phase: str) -> Obj:
    """A Run evidence document (projectsignal.dev/evidence/v2) claiming ``phase`` and ``nodes``,
    naming ``check_document`` (by its digest) as check 0's evidence."""
    meta, spec = run["metadata"], run["spec"]
    digest = eb.digest_of(check_document) if check_document else None
    return {
        "schema": RUN_EVIDENCE_SCHEMA,
        "run": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
        "profile": spec["profile"],
        "sourceDigest": spec["source"]["digest"],
        "attempt": 1,
        "participants": [
            {"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]} for p in spec["participants"]
        ],
        "workflow": {"name": meta["name"], "phase": "Succeeded"},
        "checks": [
            {
                "index": 0,
                "name": spec["checks"][0]["name"],
                "verdict": "Pass",
                "problem": None,
                "configMap": keys.check_evidence_name(meta["name"], 0),
                "digest": digest,
                "reportedDigest": digest,
                "resultsConfigMap": (check_document or {}).get("resultsConfigMap"),
                "resultsDigest": (check_document or {}).get("resultsDigest"),
            }
        ],
        "replacedNodes": [],
        "deadlinePassed": False,
        "nodes": nodes,
        "phase": phase,
        "reason": "AllChecksPassed",
        "message": "all 1 check(s) passed",
        "decidedAt": STARTED,
    }


def forged(run: Obj, name: str, document: Obj, *, check_name: str | None = None, controller: bool = False) -> Obj:
    """``document`` stored exactly as Signal stores evidence: every label, the owner, the
    annotations, immutable, gzip'd canonical JSON (a forger who read the source)."""
    meta = run["metadata"]
    labels = {keys.RUN_NAME_LABEL: meta["name"], keys.RUN_UID_LABEL: meta["uid"], keys.COMPONENT_LABEL: "evidence"}
    if check_name:
        labels[keys.CHECK_LABEL] = check_name
    # A controller reference, as the controller writes for the Run's own document; without
    # blockOwnerDeletion, which OwnerReferencesPermissionEnforcement would refuse to a writer
    # that may not update the Run's finalizers before any policy is asked.
    owner = {k: owner_reference(run)[k] for k in ("apiVersion", "kind", "name", "uid")}
    if controller:
        owner["controller"] = True
    body, _, _ = config_map(name=name, namespace=meta["namespace"], owner=owner, labels=labels, document=document)
    return body


def node_labels(node: Obj) -> dict[str, str]:
    return node["metadata"].get("labels") or {}


async def change_binding(admin: KubeClient, policy: str, namespace: str, how: str) -> None:
    """Delete the test namespace's copy of a policy's binding, or bind it to another namespace."""
    path = resource_path(ADMISSION, "validatingadmissionpolicybindings", name=f"{policy}-{namespace}")
    # Without that binding (none was ever installed), there is nothing to delete or rebind.
    with contextlib.suppress(NotFound):
        if how == "deleted":
            await admin.delete(path)
        else:
            selector = {"matchLabels": {"kubernetes.io/metadata.name": f"{namespace}-elsewhere"}}
            await admin.merge_patch(path, {"spec": {"matchResources": {"namespaceSelector": selector}}})
