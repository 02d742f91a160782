"""Issue 12, item 3: the adapter is contained (deploy/base/adapter-admission-policy.yaml), on
the real API server, as the adapter's own ServiceAccount.

* What it creates is an allow-list: only the configured runner image, only Signal's backend
  labels (never another component's ``app.kubernetes.io/*``, so a backend Pod can never join
  the portal's Service), non-root, no privilege escalation, RuntimeDefault seccomp, only the
  configured capabilities (none by default), only configMap/emptyDir/downwardAPI volumes, no
  host namespaces, no API token. Each attack below is refused for a Pod and for an MPIJob's
  templates, while the adapter's own workloads are admitted.
* It deletes only what it created: a Pod or MPIJob without Signal's backend labels and an
  owner of its own (the Run, or for MPI workers the check's MPIJob) is refused.
* Its Argo step Pods never land on a Node under test: the generated WorkflowTemplate's
  placement, given to the real kube-scheduler, leaves a step Pod Pending rather than put it
  on a reserved or requested Node, and places it on a free one.

deploy/'s policy file is applied for the test's namespace: the cluster-scoped policy and binding
get a per-namespace name and selector, as the local install does.
"""

import asyncio
import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import yaml

from adapter import workflow_template
from adapter.mpispec import mpijob
from adapter.workloads import backend_pod
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.controlplane import KUBELET_NODE, KUBELET_USER
from localcluster.fleet import SimNode
from localcluster.install import configure_runner_image
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from tests.attack_support import attempt
from tests.controller_support import eventually, install_rbac
from tests.integration.test_deploy_manifests import default_inputs

ADMISSION = "admissionregistration.k8s.io/v1"
POLICY_NAME = "signal-adapter-workloads"
POLICY_FILE = "adapter-admission-policy.yaml"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "base"
MPI_API = "kubeflow.org/v2beta1"
RUNNER = "projectsignal.dev/runner:0.1.0"
"""The runner image deploy/ configures (kustomize `images:`; by digest in a real overlay)."""
DENIED = f"ValidatingAdmissionPolicy '{POLICY_NAME}-"
ACTIVE_TIMEOUT = 90.0
PORTAL_LABELS = {"app.kubernetes.io/name": "project-signal", "app.kubernetes.io/component": "portal"}


def pods_path(namespace: str) -> str:
    return resource_path("v1", "pods", namespace)


def mpijobs_path(namespace: str) -> str:
    return resource_path(MPI_API, "mpijobs", namespace)


async def dry_run(kube: KubeClient, path: str, body: Obj) -> Obj:
    return await kube.request("POST", path, body=body, params={"dryRun": "All"})


def good_pod(namespace: str) -> Obj:
    return backend_pod(default_inputs(namespace, "Pod"), 0, "gpu-0", RUNNER)


def good_mpijob(namespace: str) -> Obj:
    return mpijob(default_inputs(namespace, "MPIJob"), RUNNER)


def deploy_policy_for(namespace: str) -> list[Obj]:
    """deploy/'s policy file for ``namespace``: the cluster-scoped policy and binding named
    ``<name>-<namespace>``, the binding selecting ``namespace``."""
    docs = [d for d in yaml.safe_load_all((DEPLOY / POLICY_FILE).read_text()) if d]
    for doc in docs:
        if doc["kind"] in (POLICY_KIND, BINDING_KIND):
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
            doc["metadata"].pop("namespace", None)
        else:
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] == BINDING_KIND:
            doc["spec"]["policyName"] = f"{doc['spec']['policyName']}-{namespace}"
            doc["spec"]["matchResources"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}
            }
    return docs


def _path(doc: Obj) -> str:
    plural = {POLICY_KIND: "validatingadmissionpolicies", BINDING_KIND: "validatingadmissionpolicybindings"}
    if doc["kind"] in plural:
        return resource_path(ADMISSION, plural[doc["kind"]], name=doc["metadata"]["name"])
    return resource_path("v1", doc["kind"].lower() + "s", doc["metadata"]["namespace"], doc["metadata"]["name"])


@pytest.fixture
async def contained(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[KubeClient]:
    """deploy/'s adapter policy for the test's namespace, in force; yields the adapter."""
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await configure_runner_image(admin, namespace)  # as deploy/'s Namespace carries it
    docs = deploy_policy_for(namespace)
    try:
        for doc in docs:
            await admin.apply(_path(doc), doc)
        sa = await identities.service_account(cluster.plane, namespace, "signal-adapter", create=False)
        async with sa.client() as adapter:
            await wait_until_active(adapter, namespace)
            yield adapter
    finally:
        for doc in docs:
            if doc["kind"] in (POLICY_KIND, BINDING_KIND):
                with contextlib.suppress(ApiError):
                    await admin.delete(_path(doc))


async def wait_until_active(adapter: KubeClient, namespace: str) -> None:
    """Until the policy is in force: a Pod that keeps its API token is refused and the
    adapter's own Pod is admitted."""
    bad = good_pod(namespace)
    bad["spec"]["automountServiceAccountToken"] = True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ACTIVE_TIMEOUT
    last = "the bad Pod was admitted"
    while True:
        try:
            await dry_run(adapter, pods_path(namespace), bad)
        except ApiError as error:
            if DENIED not in error.message:
                raise
            try:
                await dry_run(adapter, pods_path(namespace), good_pod(namespace))
                return
            except ApiError as still:
                if DENIED not in still.message:
                    raise
                last = f"the adapter's own Pod is refused: {still.message}"
        assert loop.time() < deadline, f"the adapter's ValidatingAdmissionPolicy never took effect: {last}"
        await asyncio.sleep(0.25)


def _portal_labels(meta: Obj, spec: Obj) -> None:
    meta["labels"].update(PORTAL_LABELS)


def _foreign_label(meta: Obj, spec: Obj) -> None:
    # Services commonly select `app: <name>`: a backend Pod with it would join another Service.
    meta["labels"]["app"] = "frontend"


def _privileged(meta: Obj, spec: Obj) -> None:
    spec["containers"][0]["securityContext"].update(privileged=True, allowPrivilegeEscalation=True)


def _host_path(meta: Obj, spec: Obj) -> None:
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    spec["containers"][0]["volumeMounts"].append({"name": "host", "mountPath": "/host"})


def _added_capability(meta: Obj, spec: Obj) -> None:
    spec["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]


def _foreign_image(meta: Obj, spec: Obj) -> None:
    spec["containers"][0]["image"] = "registry.invalid/attacker/toolbox:latest"


ATTACKS: dict[str, Callable[[Obj, Obj], None]] = {
    "portal-labels": _portal_labels,
    "foreign-label": _foreign_label,
    "privileged": _privileged,
    "host-path": _host_path,
    "capability-outside-the-list": _added_capability,
    "foreign-image": _foreign_image,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_the_adapter_cannot_create_an_escaping_pod(
    contained: KubeClient, admin: KubeClient, namespace: str, attack: str
) -> None:
    await dry_run(contained, pods_path(namespace), good_pod(namespace))  # its own Pod is fine
    pod = good_pod(namespace)
    ATTACKS[attack](pod["metadata"], pod["spec"])
    with pytest.raises(ApiError) as refused:
        await dry_run(contained, pods_path(namespace), pod)
    assert refused.value.status == 403, refused.value
    assert DENIED in refused.value.message
    # A real create is refused as well, and leaves nothing.
    with pytest.raises(ApiError):
        await contained.create(pods_path(namespace), pod)
    assert (await admin.get(pods_path(namespace)))["items"] == []


@pytest.mark.parametrize("role", ["Launcher", "Worker"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_the_adapter_cannot_create_an_escaping_mpijob(
    contained: KubeClient, namespace: str, attack: str, role: str
) -> None:
    await dry_run(contained, mpijobs_path(namespace), good_mpijob(namespace))
    job = good_mpijob(namespace)
    template = job["spec"]["mpiReplicaSpecs"][role]["template"]
    ATTACKS[attack](template["metadata"], template["spec"])
    with pytest.raises(ApiError) as refused:
        await dry_run(contained, mpijobs_path(namespace), job)
    assert refused.value.status == 403, refused.value
    assert DENIED in refused.value.message


async def test_an_mpijob_cannot_carry_the_portals_labels_itself(contained: KubeClient, namespace: str) -> None:
    job = good_mpijob(namespace)
    job["metadata"]["labels"].update(PORTAL_LABELS)
    with pytest.raises(ApiError) as refused:
        await dry_run(contained, mpijobs_path(namespace), job)
    assert DENIED in refused.value.message


# --- deletions ----------------------------------------------------------------------------------


async def _run(admin: KubeClient, namespace: str) -> Obj:
    body = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.RUN_KIND,
        "metadata": {"name": f"r-{uuid.uuid4().hex[:6]}", "namespace": namespace},
        "spec": {
            "profile": {"name": "p", "uid": str(uuid.uuid4()), "generation": 1},
            "checks": [{"name": "c", "scriptKey": "s.sh", "backend": "Pod", "backendActiveDeadline": "1m"}],
            "source": {"digest": "sha256:" + "0" * 64, "snapshotConfigMap": "s"},
            "participants": [{"index": 0, "nodeName": "gpu-0", "nodeUID": str(uuid.uuid4())}],
            "suiteDeadlineSeconds": 600,
        },
    }
    return await admin.create(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace), body)


def _plain_pod(name: str, labels: dict[str, str], owners: list[Obj]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "registry.invalid/other:1"}]},
    }


async def test_the_adapter_deletes_only_what_it_created(
    contained: KubeClient, admin: KubeClient, namespace: str
) -> None:
    run = await _run(admin, namespace)
    owner = {"apiVersion": keys.API_VERSION, "kind": keys.RUN_KIND, "name": run["metadata"]["name"]}
    owner["uid"] = run["metadata"]["uid"]
    backend = {keys.RUN_UID_LABEL: run["metadata"]["uid"], keys.COMPONENT_LABEL: "backend"}
    pods = {
        "portal": _plain_pod("portal", PORTAL_LABELS, []),
        "labels-only": _plain_pod("labels-only", backend, []),
        "other-runs-labels": _plain_pod("other-run", {**backend, keys.RUN_UID_LABEL: str(uuid.uuid4())}, [owner]),
        "mine": _plain_pod("mine", backend, [owner]),
    }
    for pod in pods.values():
        await admin.create(pods_path(namespace), pod)
    for case in ("portal", "labels-only", "other-runs-labels"):
        with pytest.raises(ApiError) as refused:
            await contained.request("DELETE", f"{pods_path(namespace)}/{pods[case]['metadata']['name']}")
        assert refused.value.status == 403, (case, refused.value)
        assert DENIED in refused.value.message, case
    await contained.request("DELETE", f"{pods_path(namespace)}/mine", params={"gracePeriodSeconds": "0"})
    left = {p["metadata"]["name"] for p in (await admin.get(pods_path(namespace)))["items"]}
    assert {"portal", "labels-only", "other-run"} <= left


# --- placement of the adapter's own step Pods ----------------------------------------------------


def step_pod(template: Obj, scope: dict[str, str]) -> Obj:
    """A Pod placed as Argo places the template's step Pods (the Workflow-level nodeSelector,
    affinity and tolerations), kept to this test's Nodes by ``scope``."""
    spec = template["spec"]
    selector = {**(spec.get("nodeSelector") or {}), **scope}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"step-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "nodeSelector": selector,
            **({"affinity": copy.deepcopy(spec["affinity"])} if spec.get("affinity") else {}),
            **({"tolerations": copy.deepcopy(spec["tolerations"])} if spec.get("tolerations") else {}),
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "registry.invalid/never-pulled:1"}],
        },
    }


async def _scheduled_on(admin: KubeClient, namespace: str, name: str) -> tuple[str, str]:
    pod = await admin.get(f"{pods_path(namespace)}/{name}")
    condition: Obj = next((c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})
    return pod["spec"].get("nodeName", ""), f"{condition.get('status', '')}/{condition.get('reason', '')}"


async def _unschedulable_message(admin: KubeClient, namespace: str, name: str) -> str:
    pod = await admin.get(f"{pods_path(namespace)}/{name}")
    conditions = pod.get("status", {}).get("conditions") or []
    return str(next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), ""))


async def test_a_step_pod_is_never_scheduled_onto_a_node_under_test(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    template = workflow_template.build_workflow_template()
    scope = {"projectsignal.dev/test-scope": namespace}
    reserved = SimNode(f"{namespace}-reserved", labels={**scope, keys.RESERVED_BY_LABEL: "some-run-uid"})
    requested = SimNode(f"{namespace}-requested", labels={**scope, keys.CERTIFY_LABEL: "gpu-burn"})
    await cluster.add_nodes([reserved, requested])
    taint = {"key": keys.RESERVED_TAINT_KEY, "value": "some-run-uid", "effect": "NoSchedule"}
    await admin.merge_patch(resource_path("v1", "nodes", name=reserved.name), {"spec": {"taints": [taint]}})
    pod = step_pod(template, scope)
    name = pod["metadata"]["name"]
    await admin.create(pods_path(namespace), pod)

    async def unschedulable() -> bool:
        node, condition = await _scheduled_on(admin, namespace, name)
        assert node == "", f"the step Pod was scheduled onto {node}, a Node under test"
        return condition == "False/Unschedulable"

    await eventually(unschedulable, timeout=60, what="the scheduler to give up on the step Pod")
    # Issue 42 M-C: a Node that is not under test, but that no admin marked trusted (a
    # requested Node that dropped its own request label looks like this), gets no step Pod
    # either: the trusted-node label is one its kubelet cannot set.
    before = await _unschedulable_message(admin, namespace, name)
    untrusted = SimNode(f"{namespace}-untrusted", labels=scope)
    await cluster.add_nodes([untrusted])

    async def reconsidered() -> bool:
        node, _ = await _scheduled_on(admin, namespace, name)
        assert node == "", f"the step Pod was scheduled onto {node}, a Node no admin marked trusted"
        return await _unschedulable_message(admin, namespace, name) != before

    # Evidence the scheduler tried again with the new Node: its verdict's message changed.
    await eventually(reconsidered, timeout=60, what="the scheduler to reconsider the step Pod")
    # ... and no kubelet can put that label on its own Node (NodeRestriction).
    own = resource_path("v1", "nodes", name=KUBELET_NODE)
    with contextlib.suppress(ApiError):
        await admin.delete(own)  # left by an earlier, interrupted session
    await cluster.add_nodes([SimNode(KUBELET_NODE)])
    async with identities.user(cluster.plane, KUBELET_USER).client() as kubelet:
        error = await attempt(
            kubelet.merge_patch(
                resource_path("v1", "nodes", name=KUBELET_NODE),
                {"metadata": {"labels": {keys.TRUSTED_NODE_LABEL: "true"}}},
            )
        )
    assert error is not None, f"a kubelet set {keys.TRUSTED_NODE_LABEL} on its own Node"
    assert error.status == 403, error
    assert keys.TRUSTED_NODE_LABEL in error.message, error
    await cluster.remove_node(KUBELET_NODE)
    # A trusted Node (labelled by an admin): the same Pod is placed there.
    free = SimNode(f"{namespace}-free", labels={**scope, keys.TRUSTED_NODE_LABEL: "true"})
    await cluster.add_nodes([free])

    async def placed() -> str:
        return (await _scheduled_on(admin, namespace, name))[0]

    assert await eventually(placed, timeout=60, what="the step Pod to be scheduled") == free.name
    with contextlib.suppress(ApiError):
        await admin.delete(f"{pods_path(namespace)}/{name}", {"gracePeriodSeconds": 0})
    for node in (reserved, requested, untrusted, free):
        with contextlib.suppress(ApiError):
            await admin.delete(resource_path("v1", "nodes", name=node.name))


def test_the_generated_template_keeps_steps_off_nodes_under_test() -> None:
    spec = workflow_template.build_workflow_template()["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for term in terms:
        absent = {e["key"] for e in term["matchExpressions"] if e["operator"] == "DoesNotExist"}
        assert {keys.CERTIFY_LABEL, keys.RESERVED_BY_LABEL} <= absent
    assert not any(t.get("key") == keys.RESERVED_TAINT_KEY for t in spec.get("tolerations") or [])
