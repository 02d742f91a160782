"""Helpers of the attack tests (tests/integration/test_attacks*.py; issues 12 and 42): the third
parties RBAC lets write in the Signal namespace (the Kubeflow MPI operator's and Argo's
workflow-controller's real rules, read at run time, and a namespace editor), evidence forged
exactly as Signal stores it, and waiting on whether an admission policy is enforced."""

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

from controller.rules.manifests import owner_reference
from kubeio.errors import NotFound
from localcluster import identities, kubeflowmpi
from localcluster.binaries import argo_build_dir
from localcluster.cluster import LocalCluster
from localcluster.incluster import argo_manifests, render
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


ARGO_CONTROLLER: Final = ("argo", "argo")
"""Namespace and name of Argo's workflow-controller ServiceAccount in Argo's own manifests: the
identity deploy/base/identity-admission-policy.yaml trusts to create adapter step Pods."""

EDITOR_RULES: Final[list[Obj]] = [
    # What Kubernetes' ``edit`` role lets a namespace editor do with the kinds that matter here
    # (a Role of its own: the local kube-controller-manager runs no ClusterRole aggregation,
    # so the built-in ``edit`` is empty here).
    {
        "apiGroups": [""],
        "resources": ["configmaps", "pods", "replicationcontrollers", "secrets", "serviceaccounts"],
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods/exec", "pods/attach", "pods/portforward", "serviceaccounts/token"],
        "verbs": ["create", "get"],
    },
    {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch", "update"]},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {
        "apiGroups": ["batch"],
        "resources": ["jobs", "cronjobs"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update", "delete"]},
    {
        "apiGroups": ["argoproj.io"],
        "resources": ["workflows", "workflowtemplates", "cronworkflows"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
]

ALL_CONFIGMAP_VERBS: Final[Obj] = {
    "apiGroups": [""],
    "resources": ["configmaps"],
    "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"],
}


def mpi_operator_rules() -> tuple[list[Obj], str]:
    """The Kubeflow MPI operator's ClusterRole rules, read at run time
    (``localcluster.kubeflowmpi.operator_rules``: the source tree's upstream
    ``manifests/base/cluster-role.yaml`` when it has one, else the rules written from what
    v0.8.0's controller calls: Pods, Jobs, ConfigMaps, Secrets, Services and Leases in every
    namespace), plus every ConfigMap verb (a superset, as a newer operator or another
    third party may hold)."""
    rules, source = kubeflowmpi.operator_rules()
    return [*rules, ALL_CONFIGMAP_VERBS], source


def argo_controller_rules() -> list[Obj]:
    """The rules of every ClusterRole that Argo's own cluster install binds to its
    workflow-controller's ServiceAccount, rendered at run time from the Argo module the Argo
    build extracts (``localcluster.incluster.argo_manifests``); never copied here."""
    docs = render(argo_manifests(argo_build_dir()))
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    namespace, name = ARGO_CONTROLLER
    bound = [
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and any(
            s.get("kind") == "ServiceAccount" and s.get("name") == name and s.get("namespace") == namespace
            for s in d.get("subjects") or []
        )
    ]
    rules = [rule for role in bound if role in roles for rule in roles[role].get("rules") or []]
    if not rules:
        raise AssertionError(f"Argo's manifests bind no ClusterRole to ServiceAccount {namespace}/{name}: {bound}")
    return rules


def _rbac(kind: str, name: str, namespace: str | None, **body: Any) -> Obj:
    metadata: Obj = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, **body}


def _cluster_grant(role: str, rules: list[Obj], namespace: str, account: str) -> list[Obj]:
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    return [
        _rbac("ClusterRole", role, None, rules=rules),
        _rbac("ClusterRoleBinding", role, None, roleRef=ref, subjects=[subject]),
    ]


@contextlib.asynccontextmanager
async def attackers(
    cluster: LocalCluster, admin: KubeClient, namespace: str, *, argo: bool = False
) -> AsyncIterator[dict[str, KubeClient]]:
    """Identities that share a cluster with Signal and that RBAC lets write in the Signal
    namespace:

    * ``mpi-operator``: a ServiceAccount with the Kubeflow MPI operator's full ClusterRole
      (``mpi_operator_rules``: Pods, Jobs, ConfigMaps, Secrets, Leases... in every namespace);
    * ``editor``: the user carol with Kubernetes' ``edit`` rights in the namespace
      (``EDITOR_RULES``);
    * with ``argo``, ``argo``: the ServiceAccount argo/argo, the identity Argo's own manifests
      give its workflow-controller (and the one Signal's policy trusts for adapter step Pods),
      with the rules those manifests bind to it (``argo_controller_rules``).
    """
    operator_role, argo_role = f"{namespace}-mpi-operator", f"{namespace}-argo-controller"
    operator_rules, _source = mpi_operator_rules()
    docs: list[Obj] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mpi-operator", "namespace": namespace}},
        *_cluster_grant(operator_role, operator_rules, namespace, "mpi-operator"),
        _rbac("Role", "namespace-editor", namespace, rules=EDITOR_RULES),
        _rbac(
            "RoleBinding",
            "carol-edits",
            namespace,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "namespace-editor"},
            subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}],
        ),
    ]
    if argo:
        argo_namespace, argo_account = ARGO_CONTROLLER
        docs += [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": argo_namespace}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": argo_account, "namespace": argo_namespace},
            },
            *_cluster_grant(argo_role, argo_controller_rules(), argo_namespace, argo_account),
        ]
    plurals = {
        "Namespace": ("v1", "namespaces"),
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
    await rbac_in_effect(admin, [d for d in docs if d["kind"] != "Namespace"])
    clients = {
        "mpi-operator": await service_account_client(cluster, namespace, "mpi-operator"),
        "editor": identities.user(cluster.plane, "carol").client(),
    }
    if argo:
        clients["argo"] = await service_account_client(cluster, *ARGO_CONTROLLER)
    try:
        for who in ("mpi-operator", "editor"):  # both can write an ordinary ConfigMap here

            async def allowed(client: KubeClient = clients[who]) -> bool:
                plain = {"metadata": {"name": f"plain-{uuid.uuid4().hex[:6]}", "namespace": namespace}, "data": {}}
                return await attempt(dry_run(client, configmaps(namespace), plain)) is None

            await until(allowed, f"{who} to be allowed to create ConfigMaps")
        yield clients
    finally:
        for client in clients.values():
            await client.close()
        for role in (operator_role, argo_role):
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
