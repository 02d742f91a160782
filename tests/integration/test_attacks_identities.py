"""Issue 42 H-A and M-B on the real API server: the third parties Signal shares its namespace
with cannot become the controller, the portal or the adapter, nor rewrite what the adapter
runs or Signal's own control objects (deploy/base/identity-admission-policy.yaml;
docs/security.md, "Identities and control objects").

The attackers hold real rules read at run time (tests/attack_support.py): the Kubeflow MPI
operator's ClusterRole, Argo's workflow-controller's (as the very ServiceAccount argo/argo that
the policy trusts to make adapter step Pods) and a namespace editor's. Each tries every
attempt below; RBAC or the policy refuses every one, and every attempt is refused by the
policy for at least one of them (so none of the cases is refused by RBAC alone, which a
broader third-party role would not do). A control test shows the intended creators (the
ReplicaSet controller, Argo's controller with a genuine step Pod, the controller) admitted.
"""

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from localcluster import identities
from localcluster.argoworkflows import EXECUTOR_IMAGE
from localcluster.cluster import LocalCluster
from localcluster.install import install, released_runner_image
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.rbac import rbac_in_effect
from shared import keys, policies
from tests.attack_support import ARGO, attackers, attempt, denied_by, dry_run, until

pytestmark = pytest.mark.asyncio(loop_scope="session")

ADAPTER_IMAGE = "projectsignal.dev/adapter:0.1.0"
CONTROLLER_IMAGE = "projectsignal.dev/controller:0.1.0"
TRUSTED = keys.TRUSTED_NODE_LABEL
NOWHERE = {"example.com/nowhere": "true"}  # an admitted Pod would never run


def restricted(image: str, command: list[str]) -> Obj:
    return {
        "name": "main",
        "image": image,
        "command": command,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def pod_spec(account: str, image: str, command: list[str] | None = None, **extra: Any) -> Obj:
    steal = command or ["sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/token"]
    return {"serviceAccountName": account, "containers": [restricted(image, steal)], "nodeSelector": NOWHERE, **extra}


def pod(account: str, image: str, *, owner: Obj | None = None, **extra: Any) -> Obj:
    meta: Obj = {"name": f"probe-{uuid.uuid4().hex[:6]}"}
    if owner:
        meta["ownerReferences"] = [{**owner, "uid": str(uuid.uuid4()), "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(account, image, **extra)}


def workload(api: str, kind: str, account: str, image: str) -> Obj:
    labels = {"probe": uuid.uuid4().hex[:6]}
    template = {"metadata": {"labels": labels}, "spec": pod_spec(account, image)}
    spec: Obj = {"template": template}
    if kind == "Job":
        template["spec"]["restartPolicy"] = "Never"
    elif kind == "CronJob":
        template["spec"]["restartPolicy"] = "Never"
        spec = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "ReplicationController":
        spec["selector"] = labels
    else:
        spec["selector"] = {"matchLabels": labels}
        if kind == "StatefulSet":
            spec["serviceName"] = "probe"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": f"probe-{labels['probe']}"}, "spec": spec}


@dataclass(frozen=True)
class Attempt:
    """One request: ``method`` (POST, PATCH: a merge patch, UPDATE: a GET and a PUT of the object
    with ``body``'s fields merged in, DELETE) on ``path(namespace)`` with ``body()``."""

    method: str
    path: Callable[[str], str]
    body: Callable[[], Obj]


def creating(version: str, plural: str, body: Callable[[], Obj]) -> Attempt:
    return Attempt("POST", lambda ns: resource_path(version, plural, ns), body)


RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "signal-controller-5d8f7"}
WF_OWNER = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "some-run"}

ATTEMPTS: dict[str, Attempt] = {
    # H-A: a Pod, or any kind that makes Pods, running as one of Signal's ServiceAccounts.
    "pod-as-controller": creating("v1", "pods", lambda: pod("signal-controller", CONTROLLER_IMAGE)),
    "pod-as-controller-claiming-its-replicaset": creating(
        "v1", "pods", lambda: pod("signal-controller", CONTROLLER_IMAGE, owner=RS_OWNER)
    ),
    "pod-as-portal": creating("v1", "pods", lambda: pod("signal-portal", CONTROLLER_IMAGE)),
    "pod-as-adapter": creating("v1", "pods", lambda: pod("signal-adapter", ADAPTER_IMAGE)),
    "pod-as-adapter-claiming-a-workflow-with-a-foreign-image": creating(
        "v1", "pods", lambda: pod("signal-adapter", "busybox:1", owner=WF_OWNER, nodeSelector={TRUSTED: "true"})
    ),
    "pod-as-adapter-off-the-trusted-nodes": creating(
        "v1", "pods", lambda: pod("signal-adapter", ADAPTER_IMAGE, owner=WF_OWNER)
    ),
    "pod-as-adapter-by-its-deprecated-field": creating(
        "v1", "pods", lambda: pod("", ADAPTER_IMAGE, serviceAccount="signal-adapter")
    ),
    "job-as-adapter": creating(
        "batch/v1", "jobs", lambda: workload("batch/v1", "Job", "signal-adapter", ADAPTER_IMAGE)
    ),
    "job-as-controller": creating(
        "batch/v1", "jobs", lambda: workload("batch/v1", "Job", "signal-controller", CONTROLLER_IMAGE)
    ),
    "cronjob-as-adapter": creating(
        "batch/v1", "cronjobs", lambda: workload("batch/v1", "CronJob", "signal-adapter", ADAPTER_IMAGE)
    ),
    "deployment-as-controller": creating(
        "apps/v1", "deployments", lambda: workload("apps/v1", "Deployment", "signal-controller", CONTROLLER_IMAGE)
    ),
    "replicaset-as-portal": creating(
        "apps/v1", "replicasets", lambda: workload("apps/v1", "ReplicaSet", "signal-portal", CONTROLLER_IMAGE)
    ),
    "statefulset-as-adapter": creating(
        "apps/v1", "statefulsets", lambda: workload("apps/v1", "StatefulSet", "signal-adapter", ADAPTER_IMAGE)
    ),
    "daemonset-as-controller": creating(
        "apps/v1", "daemonsets", lambda: workload("apps/v1", "DaemonSet", "signal-controller", CONTROLLER_IMAGE)
    ),
    "replicationcontroller-as-adapter": creating(
        "v1", "replicationcontrollers", lambda: workload("v1", "ReplicationController", "signal-adapter", ADAPTER_IMAGE)
    ),
    "long-lived-token-secret-for-the-controller": creating(
        "v1",
        "secrets",
        lambda: {
            "metadata": {
                "name": f"probe-{uuid.uuid4().hex[:6]}",
                "annotations": {"kubernetes.io/service-account.name": "signal-controller"},
            },
            "type": "kubernetes.io/service-account-token",
        },
    ),
    "token-request-for-the-adapter": Attempt(
        "POST",
        lambda ns: resource_path("v1", "serviceaccounts", ns, "signal-adapter", "token"),
        lambda: {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    ),
    # H-A: what every adapter step runs.
    "workflowtemplate-rewrite": Attempt(
        "PATCH",
        lambda ns: resource_path(ARGO, "workflowtemplates", ns, keys.WORKFLOW_TEMPLATE),
        lambda: {"spec": {"podSpecPatch": '{"containers":[{"name":"main","image":"busybox:1"}]}'}},
    ),
    "workflowtemplate-replaced-by-a-new-one": creating(
        ARGO,
        "workflowtemplates",
        lambda: {
            "apiVersion": ARGO,
            "kind": "WorkflowTemplate",
            "metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}"},
            "spec": {"serviceAccountName": "signal-adapter", "templates": []},
        },
    ),
    "workflow-running-the-adapter-template": creating(
        ARGO,
        "workflows",
        lambda: {
            "apiVersion": ARGO,
            "kind": "Workflow",
            "metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}"},
            "spec": {"workflowTemplateRef": {"name": keys.WORKFLOW_TEMPLATE}},
        },
    ),
}

LEDGER = "signal-admission-ledger"
SEGMENT = f"{LEDGER}-{'1' * 64}"
LEASE = "signal-controller"
CONTROL_OBJECTS: dict[str, Attempt] = {
    # A segment of the ledger (issue 47): one deleted stops admission, one forged under the name
    # a group's digest will have would be read back as that group's.
    "ledger-segment-deleted": Attempt("DELETE", lambda ns: resource_path("v1", "configmaps", ns, SEGMENT), dict),
    "ledger-segment-forged": creating(
        "v1", "configmaps", lambda: {"metadata": {"name": f"{LEDGER}-{'2' * 64}"}, "data": {"segment": "{}"}}
    ),
    # M-B: the admission ledger and the leader Lease (both exist: the controller's).
    "ledger-made-unparsable": Attempt(
        "UPDATE", lambda ns: resource_path("v1", "configmaps", ns, LEDGER), lambda: {"data": {"groups": "{"}}
    ),
    "ledger-deleted": Attempt("DELETE", lambda ns: resource_path("v1", "configmaps", ns, LEDGER), dict),
    "lease-parking-every-replica": Attempt(
        "UPDATE",
        lambda ns: resource_path("coordination.k8s.io/v1", "leases", ns, LEASE),
        lambda: {"spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 2147483647}},
    ),
    "lease-deleted": Attempt("DELETE", lambda ns: resource_path("coordination.k8s.io/v1", "leases", ns, LEASE), dict),
}


async def send(client: KubeClient, namespace: str, attempt_: Attempt) -> Obj:
    path, body = attempt_.path(namespace), attempt_.body()
    if attempt_.method == "PATCH":
        return await client.merge_patch(path, body)
    if attempt_.method == "DELETE":
        return await client.delete(path)
    if attempt_.method == "UPDATE":  # read, change, write back (a PUT: the verb RBAC grants most often)
        current = await client.get(path)
        for field, value in body.items():
            current[field] = {**(current.get(field) or {}), **value}
        return await client.request("PUT", path, body=current)
    return await client.create(path, body)


async def signal_installed(admin: KubeClient, namespace: str) -> None:
    """deploy/'s RBAC, WorkflowTemplate and policies in ``namespace``, with the adapter image
    and Argo's executor image on the Namespace as an operator sets them."""
    await install(admin, namespace)
    annotations = {
        keys.ADAPTER_IMAGE_ANNOTATION: ADAPTER_IMAGE,
        keys.EXECUTOR_IMAGE_ANNOTATION: EXECUTOR_IMAGE,
        keys.RUNNER_IMAGE_ANNOTATION: released_runner_image(),
    }
    await admin.merge_patch(
        resource_path("v1", "namespaces", name=namespace), {"metadata": {"annotations": annotations}}
    )


async def identities_policy_enforced(editor: KubeClient, namespace: str) -> None:
    """Wait until a namespace editor's Pod as signal-controller is refused by the policy (a
    policy reaches the admission plugin a moment after it is installed). Where it is not
    installed at all, as before issue 42, the attempts that follow show what that admits."""

    async def check() -> bool:
        probe = pod("signal-controller", CONTROLLER_IMAGE)
        error = await attempt(dry_run(editor, resource_path("v1", "pods", namespace), probe))
        return error is not None and denied_by(error, policies.IDENTITIES_POLICY)

    with contextlib.suppress(AssertionError):
        await until(check, f"the {policies.IDENTITIES_POLICY} policy to be in force in {namespace}")


async def tried_by_everyone(
    clients: dict[str, KubeClient], namespace: str, attempts: dict[str, Attempt]
) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """(admitted, who the policy refused per case, refused otherwise)."""
    admitted: list[str] = []
    by_policy: dict[str, list[str]] = {case: [] for case in attempts}
    otherwise: list[str] = []
    for case, attempt_ in attempts.items():
        for who, client in clients.items():
            error = await attempt(send(client, namespace, attempt_))
            if error is None:
                admitted.append(f"{who}: {case}")
            elif denied_by(error, policies.IDENTITIES_POLICY):
                by_policy[case].append(who)
            else:
                otherwise.append(f"{who}: {case}: {error.status} {error.message[:160]}")
    return admitted, by_policy, otherwise


async def test_third_parties_cannot_run_as_signal_or_rewrite_what_the_adapter_runs(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    await signal_installed(admin, namespace)
    async with attackers(cluster, admin, namespace, argo=True) as clients:
        await identities_policy_enforced(clients["editor"], namespace)
        admitted, by_policy, otherwise = await tried_by_everyone(clients, namespace, ATTEMPTS)
    assert admitted == [], f"admitted: {admitted}; refused by RBAC or otherwise: {otherwise}"
    assert all(by_policy.values()), f"refused by RBAC alone (no identity reached the policy): {by_policy}"
    assert all(e.split(": ")[2].startswith("403") for e in otherwise), otherwise


async def test_third_parties_cannot_write_signals_ledger_or_lease(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    await signal_installed(admin, namespace)
    ledger = {"metadata": {"name": LEDGER}, "data": {"fence": "1", "holder": "signal-controller", "groups": "{}"}}
    lease = {"metadata": {"name": LEASE}, "spec": {"holderIdentity": "signal-controller", "leaseDurationSeconds": 15}}
    segment = {"metadata": {"name": SEGMENT}, "immutable": True, "data": {"segment": "{}"}}
    # The controller itself writes all three (here: creates them).
    async with (await identities.service_account(cluster.plane, namespace, LEASE, create=False)).client() as own:
        await own.create(resource_path("v1", "configmaps", namespace), ledger)
        await own.create(resource_path("v1", "configmaps", namespace), segment)
        await own.create(resource_path("coordination.k8s.io/v1", "leases", namespace), lease)
    async with attackers(cluster, admin, namespace, argo=True) as clients:
        await identities_policy_enforced(clients["editor"], namespace)
        admitted, by_policy, otherwise = await tried_by_everyone(clients, namespace, CONTROL_OBJECTS)
    assert admitted == [], f"admitted: {admitted}; refused otherwise: {otherwise}"
    assert all(by_policy.values()), f"refused by RBAC alone: {by_policy}"
    kept = await admin.get(resource_path("v1", "configmaps", namespace, LEDGER))
    assert kept["data"] == ledger["data"]
    assert (await admin.get(resource_path("v1", "configmaps", namespace, SEGMENT)))["data"] == segment["data"]
    names = {c["metadata"]["name"] for c in (await admin.get(resource_path("v1", "configmaps", namespace)))["items"]}
    assert f"{LEDGER}-{'2' * 64}" not in names
    held = await admin.get(resource_path("coordination.k8s.io/v1", "leases", namespace, LEASE))
    assert held["spec"]["leaseDurationSeconds"] == 15


async def test_the_intended_creators_are_admitted(cluster: LocalCluster, admin: KubeClient, namespace: str) -> None:
    """The control: the ReplicaSet controller's identity makes the controller's Pod for its
    ReplicaSet; Argo's controller makes a step Pod for a Workflow on a trusted Node with the
    adapter and executor images; the controller writes its ledger and Lease."""
    await signal_installed(admin, namespace)
    replicaset_sa = await identities.service_account(cluster.plane, "kube-system", "replicaset-controller")
    role = f"{namespace}-pod-maker"
    grant = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role, "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "replicaset-controller", "namespace": "kube-system"}],
        },
    ]
    for doc in grant:
        plural = "roles" if doc["kind"] == "Role" else "rolebindings"
        await admin.apply(resource_path("rbac.authorization.k8s.io/v1", plural, namespace, role), doc)
    await rbac_in_effect(admin, grant)
    pods = resource_path("v1", "pods", namespace)
    async with attackers(cluster, admin, namespace, argo=True) as clients, replicaset_sa.client() as replicaset:
        await identities_policy_enforced(clients["editor"], namespace)
        controller_pod = pod("signal-controller", CONTROLLER_IMAGE, owner=RS_OWNER)
        await dry_run(replicaset, pods, controller_pod)
        step = pod("signal-adapter", ADAPTER_IMAGE, owner=WF_OWNER, nodeSelector={TRUSTED: "true"})
        step["spec"]["initContainers"] = [{**restricted(EXECUTOR_IMAGE, ["argoexec", "init"]), "name": "init"}]
        await dry_run(clients["argo"], pods, step)
        # ... and the same Pods from anyone else are refused.
        for who in ("mpi-operator", "editor"):
            for body in (controller_pod, step):
                error = await attempt(dry_run(clients[who], pods, body))
                assert error is not None, f"{who} made a Pod that only its intended creator may"
                assert denied_by(error, policies.IDENTITIES_POLICY), (who, error)
    with contextlib.suppress(ApiError):
        await admin.delete(resource_path("v1", "serviceaccounts", "kube-system", "replicaset-controller"))
