"""The adapter's ValidatingAdmissionPolicy (deploy/base/adapter-admission-policy.yaml; SPEC
invariant 6) on the real API server: the signal-adapter ServiceAccount may create Pods and
MPIJobs, but not ones that run as another ServiceAccount, carry an API token or a Secret, or
reach the host. Requests of everyone else (an admin here) are not constrained, and the
adapter's own workloads, and real adapter runs of a Pod check and an MPIJob check, still go
through with the policy in force.

The policy and its binding are rendered with kustomize (under deploy/base's namespace) and
applied for the test's own namespace: both are cluster-scoped, so they get a per-namespace name (deleted
afterwards) and the binding's namespaceSelector names the test's namespace instead of
signal-system. A ValidatingAdmissionPolicy takes a moment to reach the admission plugin,
so each test first waits until a known-bad create is refused."""

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.mpispec import mpijob
from adapter.workloads import backend_pod
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.install import configure_runner_image, released_runner_image
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from tests.adapter_support import AdapterWorld, check
from tests.controller_support import install_rbac
from tests.integration.test_deploy_manifests import DEPLOY, default_inputs, kustomize
from tests.policy_support import configure_adapter_workloads

BASE = DEPLOY / "base"
POLICY_FILE = BASE / "adapter-admission-policy.yaml"

ADMISSION = "admissionregistration.k8s.io/v1"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
POLICY_NAME = "signal-adapter-workloads"
MPI_API = "kubeflow.org/v2beta1"
RUNNER = "projectsignal.dev/runner:0.1.0"
DENIED = f"ValidatingAdmissionPolicy '{POLICY_NAME}-"
ACTIVE_TIMEOUT = 30.0


def rendered_policy(tmp_path: Path) -> tuple[Obj, Obj]:
    """The policy and its binding as kustomize renders them with deploy/base's namespace."""
    base = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    overlay = tmp_path / "policy-overlay"
    overlay.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": base["namespace"],
        "resources": ["policy.yaml"],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    shutil.copyfile(POLICY_FILE, overlay / "policy.yaml")
    docs = kustomize(overlay)
    (policy,) = [d for d in docs if d["kind"] == POLICY_KIND]
    (binding,) = [d for d in docs if d["kind"] == BINDING_KIND]
    return policy, binding


def policy_for(namespace: str, tmp_path: Path) -> tuple[Obj, Obj]:
    """deploy/'s policy and binding, named and bound for ``namespace``. Both keep the
    metadata.namespace that kustomize (whose built-in schema predates the kinds) gives them:
    the API server drops it from a cluster-scoped object, as it does for `kubectl apply -k`."""
    policy, binding = rendered_policy(tmp_path)
    name = f"{POLICY_NAME}-{namespace}"
    for doc in (policy, binding):
        doc["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return policy, binding


def pods_path(namespace: str) -> str:
    return resource_path("v1", "pods", namespace)


def mpijobs_path(namespace: str) -> str:
    return resource_path(MPI_API, "mpijobs", namespace)


async def dry_run(kube: KubeClient, path: str, body: Obj) -> Obj:
    return await kube.request("POST", path, body=body, params={"dryRun": "All"})


def good_pod(namespace: str, **workload: Any) -> Obj:
    return backend_pod(default_inputs(namespace, "Pod", **workload), 0, "gpu-0", RUNNER)


def good_mpijob(namespace: str) -> Obj:
    return mpijob(default_inputs(namespace, "MPIJob"), RUNNER)


def bad_pod(namespace: str) -> Obj:
    pod = good_pod(namespace)
    pod["spec"]["serviceAccountName"] = "signal-controller"
    return pod


async def refusal(kube: KubeClient, path: str, body: Obj) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await dry_run(kube, path, body)
    return refused.value


async def add_controller_service_account(admin: KubeClient, namespace: str) -> None:
    """The identity the adapter must not borrow (the ServiceAccount plugin refuses a Pod that
    names a missing one before any policy is asked)."""
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "signal-controller"}}
    await admin.apply(resource_path("v1", "serviceaccounts", namespace, "signal-controller"), body)


@pytest.fixture
async def policed(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[KubeClient]:
    """The adapter's RBAC and the policy for the test's namespace, in force; yields a client
    that is the signal-adapter ServiceAccount."""
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await add_controller_service_account(admin, namespace)
    await configure_runner_image(admin, namespace, RUNNER)
    policy, binding = policy_for(namespace, tmp_path)
    name = policy["metadata"]["name"]
    try:
        await admin.apply(resource_path(ADMISSION, "validatingadmissionpolicies", name=name), policy)
        live = await admin.apply(resource_path(ADMISSION, "validatingadmissionpolicybindings", name=name), binding)
        assert "namespace" not in live["metadata"]
        sa = await identities.service_account(cluster.plane, namespace, "signal-adapter", create=False)
        async with sa.client() as adapter:
            await wait_until_active(adapter, namespace)
            yield adapter
    finally:
        for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(ApiError):
                await admin.delete(resource_path(ADMISSION, plural, name=name))


async def wait_until_active(adapter: KubeClient, namespace: str) -> None:
    """Until a known-bad Pod of the adapter is refused by the policy, and a good one admitted:
    the policy reads the runner image from the Namespace as the admission plugin's cache has
    it, which can lag the annotation the fixture just set (CI saw a refusal 'names no runner
    image' right after the policy took effect)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ACTIVE_TIMEOUT
    while True:
        try:
            await dry_run(adapter, pods_path(namespace), bad_pod(namespace))
        except ApiError as error:
            if DENIED in error.message:
                break
            raise
        assert loop.time() < deadline, "the ValidatingAdmissionPolicy never took effect"
        await asyncio.sleep(0.25)
    while True:
        try:
            await dry_run(adapter, pods_path(namespace), good_pod(namespace))
            return
        except ApiError as error:
            assert error.status == 403, error
            assert "names no runner image" in error.message, error
        assert loop.time() < deadline, "the Namespace's runner image never reached the admission policy"
        await asyncio.sleep(0.25)


# --- rendering --------------------------------------------------------------------------------


def test_the_policy_is_bound_to_the_signal_namespace(tmp_path: Path) -> None:
    policy, binding = rendered_policy(tmp_path)
    assert policy["apiVersion"] == binding["apiVersion"] == ADMISSION
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == POLICY_NAME
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["validationActions"] == ["Deny"]
    (namespace,) = [d for d in yaml.safe_load_all((BASE / "namespace.yaml").read_text()) if d["kind"] == "Namespace"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    assert selector == {"matchLabels": {"kubernetes.io/metadata.name": namespace["metadata"]["name"]}}
    (condition,) = policy["spec"]["matchConditions"]
    assert "signal-system" not in condition["expression"]  # the adapter of the namespace the object is in
    rules = {
        (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["operations"]))
        for r in policy["spec"]["matchConstraints"]["resourceRules"]
    }
    assert rules == {
        (("",), ("pods",), ("CREATE", "DELETE")),
        (("kubeflow.org",), ("mpijobs",), ("CREATE", "DELETE")),
    }
    # The runner image comes from the Signal Namespace (set by kustomize's images:), the rest
    # from two variables an overlay sets: by default the released runner image, nothing else.
    configuration = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert f"namespaceObject.metadata.annotations['{keys.RUNNER_IMAGE_ANNOTATION}']" in configuration["runnerImage"]
    assert RUNNER not in yaml.safe_dump(policy), "the image is named in one place, the Namespace"
    assert released_runner_image() == RUNNER == keys.DEFAULT_RUNNER_IMAGE
    assert configuration["capabilities"] == "''"
    assert configuration["hostNetwork"] == "false"
    assert "paramKind" not in policy["spec"]


# --- what the adapter may not create ------------------------------------------------------------


async def test_the_runner_image_is_the_namespaces_and_nothing_without_it(
    policed: KubeClient, admin: KubeClient, namespace: str
) -> None:
    """The one runner image is the Namespace's annotation: another image is refused, a Namespace
    that names none refuses every create (fail closed), and a new value is the one admitted."""
    other = "registry.example/signal/runner@sha256:" + "b" * 64
    error = await refusal(policed, pods_path(namespace), backend_pod(default_inputs(namespace, "Pod"), 0, "g", other))
    assert f"may run only the configured runner image {RUNNER}" in error.message, error.message
    path = resource_path("v1", "namespaces", name=namespace)
    await admin.merge_patch(path, {"metadata": {"annotations": {keys.RUNNER_IMAGE_ANNOTATION: None}}})
    await eventually_refused(
        policed, namespace, good_pod(namespace), f"the namespace {namespace} names no runner image"
    )
    await configure_runner_image(admin, namespace, other)
    await eventually_refused(
        policed, namespace, good_pod(namespace), f"may run only the configured runner image {other}"
    )
    await dry_run(policed, pods_path(namespace), backend_pod(default_inputs(namespace, "Pod"), 0, "g", other))


async def eventually_refused(adapter: KubeClient, namespace: str, pod: Obj, expected: str) -> None:
    """Until ``pod`` is refused with ``expected``: the admission plugin reads the Namespace from
    its own cache, which sees an annotation change a moment after the write (until then the
    refusal, or the admission, is the one of the previous value)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ACTIVE_TIMEOUT
    last = "admitted"
    while True:
        try:
            await dry_run(adapter, pods_path(namespace), pod)
        except ApiError as error:
            assert error.status == 403, error
            if expected in error.message:
                return
            last = error.message
        assert loop.time() < deadline, f"the Namespace change never reached the admission policy: {last}"
        await asyncio.sleep(0.2)


def _set(path: list[str], value: Any) -> Callable[[Obj], None]:
    def change(spec: Obj) -> None:
        target = spec
        for key in path[:-1]:
            target = target[key] if isinstance(target, dict) else target[int(key)]
        target[path[-1]] = value

    return change


def _add_volume(volume: Obj) -> Callable[[Obj], None]:
    return lambda spec: spec["volumes"].append(volume)


PROJECTED_TOKEN = {
    "name": "token",
    "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]},
}
PROJECTED_SECRET = {"name": "sec", "projected": {"sources": [{"secret": {"name": "anything"}}]}}
SECRET_ENV = {"name": "X", "valueFrom": {"secretKeyRef": {"name": "anything", "key": "token"}}}

BAD_PODS: dict[str, tuple[Callable[[Obj], None], str]] = {
    "controller-service-account": (_set(["serviceAccountName"], "signal-controller"), "other than default"),
    "deprecated-service-account-field": (_set(["serviceAccount"], "signal-controller"), "other than default"),
    "automount-true": (_set(["automountServiceAccountToken"], True), "automountServiceAccountToken: false"),
    "automount-absent": (lambda s: s.pop("automountServiceAccountToken"), "automountServiceAccountToken: false"),
    "projected-token": (_add_volume(PROJECTED_TOKEN), "projected serviceAccountToken"),
    "projected-secret": (_add_volume(PROJECTED_SECRET), "projected serviceAccountToken"),
    "secret-volume": (_add_volume({"name": "sec", "secret": {"secretName": "anything"}}), "Secret volume"),
    "secret-env": (lambda s: s["containers"][0]["env"].append(SECRET_ENV), "from a Secret"),
    "secret-env-from": (
        lambda s: s["containers"][0].setdefault("envFrom", []).append({"secretRef": {"name": "anything"}}),
        "from a Secret",
    ),
    "host-path": (_add_volume({"name": "host", "hostPath": {"path": "/"}}), "hostPath"),
    "host-pid": (_set(["hostPID"], True), "hostPID or hostIPC"),
    "host-ipc": (_set(["hostIPC"], True), "hostPID or hostIPC"),
    "privileged": (
        lambda s: s["containers"][0]["securityContext"].update(privileged=True, allowPrivilegeEscalation=True),
        "privileged container",
    ),
    "privileged-init-container": (
        lambda s: s.setdefault("initContainers", []).append(
            {"name": "init", "image": RUNNER, "securityContext": {"privileged": True}}
        ),
        "privileged container",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PODS))
async def test_the_adapter_cannot_create_a_pod_that_escapes(
    policed: KubeClient, admin: KubeClient, namespace: str, case: str
) -> None:
    change, message = BAD_PODS[case]
    pod = good_pod(namespace)
    change(pod["spec"])
    error = await refusal(policed, pods_path(namespace), pod)
    assert error.status == 403, error
    assert DENIED in error.message
    assert "signal-adapter: a Pod it creates" in error.message
    assert message in error.message, error.message
    # The policy is scoped to the adapter: an admin may create the very same Pod.
    admitted = await dry_run(admin, pods_path(namespace), pod)
    assert admitted["metadata"]["name"] == pod["metadata"]["name"]


async def test_a_real_pod_as_the_controller_is_refused_and_none_exists(policed: KubeClient, namespace: str) -> None:
    """Not only dry-run: a real create as the adapter is refused and leaves nothing."""
    error = await refusal(policed, pods_path(namespace), bad_pod(namespace))
    with pytest.raises(ApiError) as refused:
        await policed.create(pods_path(namespace), bad_pod(namespace))
    assert refused.value.status == 403
    assert "may not name a ServiceAccount other than default" in error.message
    assert (await policed.get(pods_path(namespace)))["items"] == []


@pytest.mark.parametrize(
    ("case", "role", "change", "message"),
    [
        ("worker-service-account", "Worker", _set(["serviceAccountName"], "signal-controller"), "other than default"),
        ("launcher-service-account", "Launcher", _set(["serviceAccount"], "signal-controller"), "other than default"),
        (
            "worker-automount-absent",
            "Worker",
            lambda s: s.pop("automountServiceAccountToken"),
            "automountServiceAccountToken: false",
        ),
        ("launcher-projected-token", "Launcher", _add_volume(PROJECTED_TOKEN), "projected serviceAccountToken"),
        ("worker-secret-volume", "Worker", _add_volume({"name": "s", "secret": {"secretName": "x"}}), "Secret volume"),
        ("worker-host-path", "Worker", _add_volume({"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
        ("launcher-host-pid", "Launcher", _set(["hostPID"], True), "hostPID or hostIPC"),
        (
            "worker-privileged",
            "Worker",
            lambda s: s["containers"][0]["securityContext"].update(privileged=True, allowPrivilegeEscalation=True),
            "privileged container",
        ),
    ],
)
async def test_the_adapter_cannot_create_an_mpijob_that_escapes(
    policed: KubeClient, admin: KubeClient, namespace: str, case: str, role: str, change: Any, message: str
) -> None:
    job = good_mpijob(namespace)
    change(job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"])
    error = await refusal(policed, mpijobs_path(namespace), job)
    assert error.status == 403, error
    assert DENIED in error.message
    assert "signal-adapter: an MPIJob (every mpiReplicaSpecs template) it creates" in error.message
    assert message in error.message, error.message
    admitted = await dry_run(admin, mpijobs_path(namespace), job)
    assert admitted["metadata"]["name"] == job["metadata"]["name"]


# --- what it may create -------------------------------------------------------------------------


async def test_the_adapters_own_workloads_are_admitted(
    cluster: LocalCluster, admin: KubeClient, policed: KubeClient, namespace: str
) -> None:
    # An operator who runs RDMA checks with the host network allows both (default: neither).
    await configure_adapter_workloads(cluster, admin, namespace, capabilities="IPC_LOCK", host_network=True)
    for workload in ({}, {"hostNetwork": True}, {"capabilities": ["IPC_LOCK"], "cpu": "1", "memory": "1Gi"}):
        pod = good_pod(namespace, **workload)
        admitted = await dry_run(policed, pods_path(namespace), pod)
        assert admitted["spec"]["automountServiceAccountToken"] is False
        assert admitted["spec"]["serviceAccountName"] == "default"  # filled in by ServiceAccount admission
        assert admitted["spec"].get("hostNetwork", False) is bool(workload.get("hostNetwork"))
        assert not [v for v in admitted["spec"]["volumes"] if "projected" in v or "secret" in v]
    job = good_mpijob(namespace)
    admitted = await dry_run(policed, mpijobs_path(namespace), job)
    assert set(admitted["spec"]["mpiReplicaSpecs"]) == {"Launcher", "Worker"}
    # Naming `default` explicitly is fine too.
    pod = good_pod(namespace)
    pod["spec"]["serviceAccountName"] = "default"
    await dry_run(policed, pods_path(namespace), pod)


async def test_the_policy_applies_only_in_its_namespace(
    cluster: LocalCluster, admin: KubeClient, policed: KubeClient, namespace: str
) -> None:
    """The binding selects the test's namespace: the adapter of another namespace (with the
    same RBAC there) is not bound by it."""
    other = f"{namespace}-o"
    await cluster.create_namespace(other)
    try:
        await install_rbac(admin, other, "adapter-rbac.yaml")
        await add_controller_service_account(admin, other)
        sa = await identities.service_account(cluster.plane, other, "signal-adapter", create=False)
        async with sa.client() as elsewhere:
            await dry_run(elsewhere, pods_path(other), bad_pod(other))
    finally:
        await cluster.delete_namespace(other)


# --- real adapter runs with the policy in force -------------------------------------------------

OK = """#!/bin/sh
echo "participant $SIGNAL_PARTICIPANT_INDEX on $SIGNAL_NODE_NAME"
printf '{"gpus": 8}' > "$SIGNAL_MEASUREMENTS_FILE"
"""


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path, policed: KubeClient
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


# An MPIJob check under the policy runs on real nodes (the real MPI operator's launcher and
# workers): every MPIJob test of tests/integration/test_checks_on_real_nodes.py runs in a
# namespace with these policies in force (tests/realnode_support.py).


async def test_a_pod_check_runs_under_the_policy(world: AdapterWorld) -> None:
    await world.setup(2, {"ok.sh": OK}, [check("inventory", "ok.sh")])
    outcome = await world.adapter(0)
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Pass", outcome.log
    assert outcome.outputs["proceed"] == "true"
    evidence, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    assert [p["verdict"] for p in evidence["results"]["participants"]] == ["Pass", "Pass"]
    assert evidence["cleanup"]["state"] == "Complete"
    assert await world.pods() == []
