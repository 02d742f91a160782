"""The access matrix of Signal's three identities (SPEC invariant 6), asked of the real API
server with SubjectAccessReviews: with exactly deploy/'s RBAC applied, every permission a
component needs is allowed, and the high-risk requests (Secrets, Node deletion and update,
nodes/proxy, pods/exec, ServiceAccount tokens, escalate, bind, impersonate, CSR approval,
webhook configurations, cluster-scoped writes for the adapter and the portal, any write for
the portal, Pod and MPIJob creation for the controller) are denied. One case, one id.

The RBAC is rendered from deploy/ with kustomize into a namespace of this module's own (the
namespace stands for signal-system); ClusterRoles and ClusterRoleBindings get a per-namespace
suffix. A pure test checks the other direction: every rule deploy/ grants is a listed need.
"""

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

import pytest

from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.rbac import rbac_in_effect
from tests.attack_support import argo_controller_rules, mpi_operator_rules
from tests.integration.test_deploy_manifests import (
    CLUSTER_SCOPED_RBAC,
    DEPLOY,
    apply_all,
    kustomize,
    object_path,
    render_into,
)

Where = Literal["ns", "other", "cluster"]
"""``ns``: the Signal namespace; ``other``: another namespace (kube-system); ``cluster``:
cluster-scoped, or every namespace for a namespaced resource."""

IDENTITIES = ("signal-controller", "signal-adapter", "signal-portal")
OTHER_NAMESPACE = "kube-system"
SIGNAL = "projectsignal.dev"
RBAC = "rbac.authorization.k8s.io"
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    """``resource`` or ``resource/subresource``."""
    where: Where

    @property
    def id(self) -> str:
        group = f"{self.group}/" if self.group else ""
        return f"{self.verb}-{group}{self.resource}-{self.where}".replace("/", ".")


def reqs(verbs: str, group: str, resource: str, where: Where) -> list[Request]:
    return [Request(v, group, resource, where) for v in verbs.split()]


# --- what each component needs ----------------------------------------------------------------

NEEDED: dict[str, list[Request]] = {
    "signal-controller": [
        *reqs("get list watch patch", "", "nodes", "cluster"),  # reservation, cordon taint, projection
        *reqs("patch", "", "nodes/status", "cluster"),  # the projected Node condition
        *reqs("get", "", "configmaps", "other"),  # a profile's source ConfigMap, in any namespace
        *reqs("get list watch", SIGNAL, "certificationprofiles", "cluster"),
        *reqs("get patch update", SIGNAL, "certificationprofiles/status", "cluster"),
        *reqs("get list watch create patch update delete", SIGNAL, "certificationruns", "ns"),
        *reqs("get patch update", SIGNAL, "certificationruns/status", "ns"),
        *reqs("update", SIGNAL, "certificationruns/finalizers", "ns"),
        *reqs("get list watch create update delete", "", "configmaps", "ns"),  # snapshots, ledger, evidence
        *reqs("get list watch create patch delete", "argoproj.io", "workflows", "ns"),
        *reqs("get", "argoproj.io", "workflowtemplates", "ns"),  # its digest, before each submission
        *reqs("get list watch", "", "pods", "ns"),  # are backend workloads gone?
        # Busy Nodes: the Pods bound to a Node under admission, in any namespace; evictions for
        # busyNodes.policy drain (the Eviction API: PodDisruptionBudgets decide).
        *reqs("list", "", "pods", "other"),
        *reqs("create", "", "pods/eviction", "other"),
        *reqs("get list watch", "kubeflow.org", "mpijobs", "ns"),
        *reqs("get create update", "coordination.k8s.io", "leases", "ns"),  # leader election
        *reqs("create", "", "events", "ns"),
    ],
    "signal-adapter": [
        *reqs("get", SIGNAL, "certificationruns", "ns"),
        *reqs("get list watch create delete", "", "pods", "ns"),
        *reqs("get list watch create delete", "kubeflow.org", "mpijobs", "ns"),
        *reqs("get create", "", "configmaps", "ns"),  # evidence; the MPI hostfile proven gone
        *reqs("get", "batch", "jobs", "ns"),
        *reqs("get", "", "services", "ns"),
        *reqs("create patch", "argoproj.io", "workflowtaskresults", "ns"),  # Argo's executor outputs
        *reqs("delete", "kueue.x-k8s.io", "workloads", "ns"),  # its own pod groups' only (a policy)
    ],
    "signal-portal": [
        *reqs("get list watch", SIGNAL, "certificationprofiles", "cluster"),
        *reqs("get list watch", "", "nodes", "cluster"),
        *reqs("get list watch", SIGNAL, "certificationruns", "ns"),
        *reqs("get list watch", "", "configmaps", "ns"),
        *reqs("get list watch", "", "events", "ns"),
        *reqs("create", "authentication.k8s.io", "tokenreviews", "cluster"),
        *reqs("create", "authorization.k8s.io", "subjectaccessreviews", "cluster"),
    ],
}

# --- what no Signal identity may do ------------------------------------------------------------

HIGH_RISK: list[Request] = [
    *reqs("get list watch", "", "secrets", "ns"),
    *reqs("get list watch", "", "secrets", "cluster"),
    *reqs("get", "", "secrets", "other"),
    *reqs("delete update create", "", "nodes", "cluster"),
    *reqs("get create", "", "nodes/proxy", "cluster"),
    *reqs("create", "", "pods/exec", "ns"),
    *reqs("create", "", "pods/attach", "ns"),
    *reqs("create", "", "pods/portforward", "ns"),
    *reqs("create", "", "serviceaccounts/token", "ns"),
    *reqs("create", "", "serviceaccounts/token", "other"),
    *reqs("escalate bind update", RBAC, "roles", "ns"),
    *reqs("escalate bind update", RBAC, "clusterroles", "cluster"),
    *reqs("create", RBAC, "rolebindings", "ns"),
    *reqs("create", RBAC, "clusterrolebindings", "cluster"),
    *reqs("impersonate", "", "users", "cluster"),
    *reqs("impersonate", "", "groups", "cluster"),
    *reqs("impersonate", "", "serviceaccounts", "ns"),
    *reqs("impersonate", "authentication.k8s.io", "userextras/scopes", "cluster"),
    *reqs("update", "certificates.k8s.io", "certificatesigningrequests/approval", "cluster"),
    *reqs("approve", "certificates.k8s.io", "signers", "cluster"),
    *reqs("create update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "cluster"),
    # No Signal identity may lift the admission policies that bound it (docs/security.md).
    *reqs("create update patch delete", "admissionregistration.k8s.io", "validatingadmissionpolicies", "cluster"),
    *reqs("create update patch delete", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "cluster"),
    *reqs("create update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "cluster"),
    *reqs("create update", "apiextensions.k8s.io", "customresourcedefinitions", "cluster"),
    *reqs("create delete", "", "namespaces", "cluster"),
    *reqs("create delete", SIGNAL, "certificationprofiles", "cluster"),
    *reqs("create patch", "apps", "deployments", "ns"),
    *reqs("create", "", "pods", "other"),
    *reqs("update", "", "configmaps", "other"),
    *reqs("update", "coordination.k8s.io", "leases", "other"),
]

DENIED: dict[str, list[Request]] = {
    "signal-controller": [
        *HIGH_RISK,
        *reqs("create", "", "pods", "ns"),
        *reqs("delete", "", "pods", "ns"),
        *reqs("create", "kubeflow.org", "mpijobs", "ns"),
        *reqs("delete", "kubeflow.org", "mpijobs", "ns"),
        # Busy Nodes: list and evict only; never read one Pod, change or delete it elsewhere.
        *reqs("get watch delete update patch", "", "pods", "other"),
        *reqs("create", "batch", "jobs", "ns"),
        *reqs("list", "", "configmaps", "cluster"),  # sources: get by name only
        *reqs("create", "", "configmaps", "other"),
        *reqs("update", SIGNAL, "certificationprofiles", "cluster"),
        *reqs("create", "argoproj.io", "workflows", "other"),
        *reqs("create", "argoproj.io", "workflowtemplates", "ns"),
        *reqs("create", "", "events", "other"),
    ],
    "signal-adapter": [
        *HIGH_RISK,
        # Nothing cluster-scoped, no Node access at all.
        *reqs("get list watch patch", "", "nodes", "cluster"),
        *reqs("patch", "", "nodes/status", "cluster"),
        *reqs("get update patch", SIGNAL, "certificationprofiles", "cluster"),
        *reqs("patch", SIGNAL, "certificationprofiles/status", "cluster"),
        *reqs("create", RBAC, "clusterroles", "cluster"),
        *reqs("create", "", "persistentvolumes", "cluster"),
        # In its namespace: the Run is the controller's; evidence is immutable.
        *reqs("create update patch delete", SIGNAL, "certificationruns", "ns"),
        *reqs("patch update", SIGNAL, "certificationruns/status", "ns"),
        *reqs("update", SIGNAL, "certificationruns/finalizers", "ns"),
        *reqs("update patch delete list", "", "configmaps", "ns"),
        *reqs("create", "argoproj.io", "workflows", "ns"),
        *reqs("create", "kubeflow.org", "mpijobs", "other"),
        *reqs("get", "", "configmaps", "other"),
        *reqs("create update", "coordination.k8s.io", "leases", "ns"),
        *reqs("create", "", "pods/eviction", "ns"),
        *reqs("list", "", "pods", "cluster"),
    ],
    "signal-portal": [
        *HIGH_RISK,
        # Any write.
        *reqs("patch", "", "nodes", "cluster"),
        *reqs("patch", "", "nodes/status", "cluster"),
        *reqs("update patch", SIGNAL, "certificationprofiles", "cluster"),
        *reqs("patch update", SIGNAL, "certificationprofiles/status", "cluster"),
        *reqs("create update patch delete", SIGNAL, "certificationruns", "ns"),
        *reqs("patch update", SIGNAL, "certificationruns/status", "ns"),
        *reqs("create update patch delete", "", "configmaps", "ns"),
        *reqs("create patch delete", "", "events", "ns"),
        *reqs("create delete", "", "pods", "ns"),
        *reqs("get list", "", "pods", "ns"),
        *reqs("create update", "coordination.k8s.io", "leases", "ns"),
        *reqs("create", "argoproj.io", "workflows", "ns"),
        *reqs("create", "kubeflow.org", "mpijobs", "ns"),
        # Reads stay in the Signal namespace.
        *reqs("list", SIGNAL, "certificationruns", "cluster"),
        *reqs("list", "", "configmaps", "cluster"),
        *reqs("list", "", "events", "cluster"),
        *reqs("create", "", "pods/eviction", "ns"),
        *reqs("list", "", "pods", "cluster"),
    ],
}

CASES = [
    pytest.param(identity, request, allowed, id=f"{identity}-{'allowed' if allowed else 'denied'}-{request.id}")
    for identity in IDENTITIES
    for allowed, table in ((True, NEEDED), (False, DENIED))
    for request in table[identity]
]


def review(namespace: str, identity: str, request: Request) -> Obj:
    resource, _, subresource = request.resource.partition("/")
    attributes = {"verb": request.verb, "group": request.group, "resource": resource, "subresource": subresource}
    if request.where == "ns":
        attributes["namespace"] = namespace
    elif request.where == "other":
        attributes["namespace"] = OTHER_NAMESPACE
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{identity}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": attributes,
        },
    }


@pytest.fixture(scope="module")
async def signal_namespace(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """A namespace standing for signal-system with deploy/'s ServiceAccounts and RBAC applied."""
    name = f"access-{uuid.uuid4().hex[:8]}"
    await cluster.create_namespace(name)
    docs = [d for d in render_into(DEPLOY, name, tmp_path_factory.mktemp("access")) if d["kind"] in RBAC_KINDS]
    try:
        await apply_all(cluster.admin, docs)
        yield name
    finally:
        for doc in docs:
            if doc["kind"] in CLUSTER_SCOPED_RBAC:
                with contextlib.suppress(ApiError):
                    await cluster.admin.delete(object_path(doc))
        await cluster.delete_namespace(name)


async def is_allowed(admin: KubeClient, namespace: str, identity: str, request: Request) -> tuple[bool, str]:
    path = resource_path("authorization.k8s.io/v1", "subjectaccessreviews")
    status = (await admin.create(path, review(namespace, identity, request))).get("status", {})
    return bool(status.get("allowed")), str(status.get("reason", ""))


@pytest.mark.parametrize(("identity", "request_", "allowed"), CASES)
async def test_access(
    cluster: LocalCluster, signal_namespace: str, identity: str, request_: Request, allowed: bool
) -> None:
    answer, reason = await is_allowed(cluster.admin, signal_namespace, identity, request_)
    assert answer is allowed, f"{identity} {request_}: expected allowed={allowed}, the API server said {reason!r}"


@pytest.mark.parametrize("identity", IDENTITIES)
def test_at_least_fifteen_high_risk_requests_are_denied_per_identity(identity: str) -> None:
    assert len(set(DENIED[identity])) >= 15
    assert len(set(DENIED[identity])) == len(DENIED[identity]), "a denied request is listed twice"
    assert not set(DENIED[identity]) & set(NEEDED[identity])


def granted(docs: list[Obj]) -> dict[str, set[Request]]:
    """Every (verb, group, resource, scope) deploy/ grants, per ServiceAccount: a Role's rules
    in the Signal namespace, a ClusterRole's rules cluster-wide (``other`` for a namespaced
    resource granted in every namespace)."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in {"Role", "ClusterRole"}}
    cluster_scoped = {"nodes", "nodes/status", "certificationprofiles", "certificationprofiles/status"}
    cluster_scoped |= {"tokenreviews", "subjectaccessreviews"}
    grants: dict[str, set[Request]] = {}
    for binding in (d for d in docs if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}):
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding["subjects"]:
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        where: Where = "ns"
                        if role["kind"] == "ClusterRole":
                            where = "cluster" if resource in cluster_scoped else "other"
                        for verb in rule["verbs"]:
                            grants.setdefault(subject["name"], set()).add(Request(verb, group, resource, where))
    return grants


def test_every_grant_in_deploy_is_a_listed_need() -> None:
    """The other direction of 'exactly its job': deploy/ grants nothing the tables above do not
    say a component needs (a new permission must be added to NEEDED with its reason)."""
    grants = granted(kustomize(DEPLOY))
    assert set(grants) == set(IDENTITIES)
    for identity in IDENTITIES:
        assert grants[identity] == set(NEEDED[identity]), identity


# --- the third parties Signal shares its namespace with (issue 42 H-A, M-B) ---------------------
#
# RBAC lets them do what would make them Signal; only the admission policy signal-identities
# stands in the way (tests/integration/test_attacks_identities.py tries each one against it).
# Their rules are read at run time: the Kubeflow MPI operator's ClusterRole and the ClusterRoles
# Argo's own manifests bind to its workflow-controller (tests/attack_support.py).

THIRD_PARTY_REACH: dict[str, list[Request]] = {
    "mpi-operator": [
        *reqs("create", "", "pods", "ns"),  # a Pod as signal-controller / signal-adapter
        *reqs("create", "batch", "jobs", "ns"),  # a Job as signal-adapter
        *reqs("create update", "", "configmaps", "ns"),  # the admission ledger
        *reqs("create update", "", "secrets", "ns"),  # a token Secret; the portal's TLS Secret
        *reqs("create update", "coordination.k8s.io", "leases", "ns"),  # the leader Lease
    ],
    "argo-controller": [
        *reqs("create", "", "pods", "ns"),  # a Pod as signal-adapter (or signal-controller)
        *reqs("create", "", "pods/exec", "ns"),
        *reqs("create update", "argoproj.io", "workflows", "ns"),  # a Workflow of the adapter template
    ],
}


@pytest.fixture(scope="module")
async def third_parties(cluster: LocalCluster, signal_namespace: str) -> AsyncIterator[dict[str, str]]:
    """ServiceAccounts in the Signal namespace bound to the MPI operator's and Argo's
    workflow-controller's real ClusterRoles; yields identity -> ServiceAccount name."""
    rules = {"mpi-operator": mpi_operator_rules()[0], "argo-controller": argo_controller_rules()}
    docs: list[Obj] = []
    for who, rule_list in rules.items():
        role = f"{signal_namespace}-{who}"
        docs += [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": who, "namespace": signal_namespace}},
            {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": role}, "rules": rule_list},
            {
                "apiVersion": f"{RBAC}/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": signal_namespace}],
            },
        ]
    await apply_all(cluster.admin, docs)
    await rbac_in_effect(cluster.admin, docs)
    try:
        yield {who: who for who in rules}
    finally:
        for doc in docs:
            if doc["kind"] in CLUSTER_SCOPED_RBAC:
                with contextlib.suppress(ApiError):
                    await cluster.admin.delete(object_path(doc))


@pytest.mark.parametrize(
    ("who", "request_"),
    [pytest.param(who, r, id=f"{who}-rbac-allows-{r.id}") for who, rs in THIRD_PARTY_REACH.items() for r in rs],
)
async def test_third_parties_reach_signals_namespace_through_rbac(
    cluster: LocalCluster, signal_namespace: str, third_parties: dict[str, str], who: str, request_: Request
) -> None:
    """The other half of the matrix: what RBAC grants the third parties in the Signal namespace
    (so the policy, not RBAC, is what keeps them from being Signal)."""
    answer, reason = await is_allowed(cluster.admin, signal_namespace, third_parties[who], request_)
    assert answer, f"{who} {request_}: RBAC no longer allows it ({reason!r}); move the case to the attack test's notes"
