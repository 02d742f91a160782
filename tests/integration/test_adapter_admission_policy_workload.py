"""Issue 44 §1 and issue 42 (supply chain) on the real API server: the adapter's admission policy
(deploy/base/adapter-admission-policy.yaml) admits each workload setting only from the
installation's allow-list and refuses anything else, for the signal-adapter ServiceAccount:

* a check's own image: only ``name@sha256:<digest>`` whose digest is on the Signal Namespace's
  ``projectsignal.dev/check-images`` (compared by digest: another name with an allowed digest is
  the same content and admitted; a tag, even one written on the list, never is);
* the runner image, when its annotation is pinned by digest, compared by digest too (a tag of
  the same repository is refused);
* ``runtimeClassName`` from the variable ``runtimeClasses``; the Multus networks annotation from
  ``networks`` (Pods and MPIJob templates); a memory-backed ``/dev/shm`` up to ``shmSizeLimit``.

Each allowed value is admitted as the adapter writes it (adapter/workloads.py), and the same
object is admitted for an admin (the policy binds the adapter alone)."""

from typing import Any

import pytest

from adapter.mpispec import mpijob
from adapter.workloads import backend_pod
from localcluster.cluster import LocalCluster
from localcluster.install import configure_runner_image
from localcluster.kube import ApiError, KubeClient, resource_path
from shared import keys
from shared.profile import Check
from tests.controller_support import eventually
from tests.integration.test_adapter_admission_policy import (
    DENIED,
    RUNNER,
    dry_run,
    eventually_refused,
    mpijobs_path,
    pods_path,
    policed,
    refusal,
)
from tests.integration.test_deploy_manifests import default_inputs
from tests.policy_support import configure_adapter_workloads

__all__ = ["policed"]  # the fixture, shared with the policy's main tests

Obj = dict[str, Any]
ALLOWED = "sha256:" + "a1" * 32
OTHER = "sha256:" + "b2" * 32
RUNNER_DIGEST = "sha256:" + "c3" * 32


def check_pod(namespace: str, image: str | None = None, runner: str = RUNNER, **workload: Any) -> Obj:
    inputs = default_inputs(namespace, "Pod", **workload)
    if image is not None:
        inputs = inputs.__class__(**{**inputs.__dict__, "check": inputs.check.model_copy(update={"image": image})})
    return backend_pod(inputs, 0, "gpu-0", runner)


async def allow_check_images(admin: KubeClient, namespace: str, value: str | None) -> None:
    path = resource_path("v1", "namespaces", name=namespace)
    await admin.merge_patch(path, {"metadata": {"annotations": {keys.CHECK_IMAGES_ANNOTATION: value}}})


async def eventually_admitted(adapter: KubeClient, path: str, body: Obj) -> Obj:
    """Admitted once the admission plugin's cache has the Namespace change just written."""
    refusals: list[str] = []

    async def admitted() -> Obj | None:
        try:
            return await dry_run(adapter, path, body)
        except ApiError as error:
            refusals.append(str(error))
            return None

    async def why() -> str:
        return refusals[-1] if refusals else ""

    result: Obj = await eventually(admitted, timeout=30.0, what="the dry-run admitted", explain=why)
    return result


# --- a check's own image, and the runner image, by digest ---------------------------------------


async def test_a_check_image_is_admitted_by_its_digest_on_the_allow_list_and_never_by_tag(
    policed: KubeClient, admin: KubeClient, namespace: str
) -> None:
    own = f"registry.example/gpu/dcgm@{ALLOWED}"
    refused = await refusal(policed, pods_path(namespace), check_pod(namespace, own))
    assert DENIED in refused.message
    assert "compared by digest, never by tag" in refused.message, refused.message
    await allow_check_images(admin, namespace, f"registry.example/gpu/dcgm@{ALLOWED}, registry.example/gpu/nccl:4.0")
    admitted = await eventually_admitted(policed, pods_path(namespace), check_pod(namespace, own))
    assert admitted["spec"]["initContainers"][0]["image"] == RUNNER
    # The digest is what is compared: the same content under another name is the same image.
    await dry_run(policed, pods_path(namespace), check_pod(namespace, f"mirror.example/dcgm@{ALLOWED}"))
    # Never a tag, not even one written on the list; never a digest that is not on it.
    for image in ("registry.example/gpu/nccl:4.0", f"registry.example/gpu/dcgm@{OTHER}", "registry.example/gpu/dcgm"):
        pod = check_pod(namespace)
        pod["spec"]["containers"][0]["image"] = image
        error = await refusal(policed, pods_path(namespace), pod)
        assert error.status == 403
        assert "never by tag" in error.message, (image, error.message)
        assert image in error.message
        await dry_run(admin, pods_path(namespace), pod)  # the policy binds the adapter alone
    # Without the annotation no check image is allowed at all.
    await allow_check_images(admin, namespace, None)
    await eventually_refused(policed, namespace, check_pod(namespace, own), "never by tag")


async def test_a_runner_image_pinned_by_digest_is_compared_by_digest(
    policed: KubeClient, admin: KubeClient, namespace: str
) -> None:
    pinned = f"registry.example/signal/runner@{RUNNER_DIGEST}"
    await configure_runner_image(admin, namespace, pinned)
    await eventually_admitted(policed, pods_path(namespace), check_pod(namespace, runner=pinned))
    await dry_run(policed, pods_path(namespace), check_pod(namespace, runner=f"mirror.example/runner@{RUNNER_DIGEST}"))
    for image in ("registry.example/signal/runner:0.1.0", f"registry.example/signal/runner@{OTHER}", RUNNER):
        error = await refusal(policed, pods_path(namespace), check_pod(namespace, runner=image))
        assert "may run only the configured runner image" in error.message, (image, error.message)


# --- runtimeClassName, networks, /dev/shm ------------------------------------------------------


async def test_runtime_class_only_from_the_allow_list(
    cluster: LocalCluster, admin: KubeClient, policed: KubeClient, namespace: str
) -> None:
    allowed, other = f"{namespace}-gpu", f"{namespace}-other"
    for name in (allowed, other):  # the RuntimeClass admission plugin wants them to exist
        body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": "runc"}
        await admin.apply(resource_path("node.k8s.io/v1", "runtimeclasses", name=name), body)
    try:
        refused = await refusal(policed, pods_path(namespace), check_pod(namespace, runtimeClassName=allowed))
        assert "may use only the runtimeClassName values []" in refused.message, refused.message
        probe = check_pod(namespace, runtimeClassName=allowed)
        await configure_adapter_workloads(cluster, admin, namespace, runtime_classes=f" {allowed} ", probe=probe)
        admitted = await dry_run(policed, pods_path(namespace), probe)
        assert admitted["spec"]["runtimeClassName"] == allowed
        error = await refusal(policed, pods_path(namespace), check_pod(namespace, runtimeClassName=other))
        assert f"may use only the runtimeClassName values [{allowed}]" in error.message, error.message
        job = mpijob(default_inputs(namespace, "MPIJob", runtimeClassName=other), RUNNER)
        error = await refusal(policed, mpijobs_path(namespace), job)
        assert "runtimeClassName" in error.message
    finally:
        for name in (allowed, other):
            await admin.delete(resource_path("node.k8s.io/v1", "runtimeclasses", name=name))


async def test_secondary_networks_only_from_the_allow_list(
    cluster: LocalCluster, admin: KubeClient, policed: KubeClient, namespace: str
) -> None:
    refused = await refusal(policed, pods_path(namespace), check_pod(namespace, networks=["sriov-ib0"]))
    assert "may attach only the secondary networks []" in refused.message, refused.message
    probe = check_pod(namespace, networks=["sriov-ib0", "rdma/ib1@net1"])
    await configure_adapter_workloads(cluster, admin, namespace, networks="sriov-ib0, rdma/ib1@net1", probe=probe)
    admitted = await dry_run(policed, pods_path(namespace), probe)
    assert admitted["metadata"]["annotations"] == {keys.MULTUS_NETWORKS_ANNOTATION: "sriov-ib0,rdma/ib1@net1"}
    await dry_run(
        policed, mpijobs_path(namespace), mpijob(default_inputs(namespace, "MPIJob", networks=["sriov-ib0"]), RUNNER)
    )
    for value in ("sriov-ib0,host-net", "sriov-ib2", '[{"name": "sriov-ib0"}]'):
        pod = check_pod(namespace)
        pod["metadata"]["annotations"] = {keys.MULTUS_NETWORKS_ANNOTATION: value}
        error = await refusal(policed, pods_path(namespace), pod)
        assert "may attach only the secondary networks [sriov-ib0, rdma/ib1@net1]" in error.message, error.message
    job = mpijob(default_inputs(namespace, "MPIJob", networks=["sriov-ib0"]), RUNNER)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] = {
        keys.MULTUS_NETWORKS_ANNOTATION: "other"
    }
    error = await refusal(policed, mpijobs_path(namespace), job)
    assert "secondary networks" in error.message, error.message


async def test_shm_only_memory_backed_up_to_the_limit(
    cluster: LocalCluster, admin: KubeClient, policed: KubeClient, namespace: str
) -> None:
    admitted = await dry_run(policed, pods_path(namespace), check_pod(namespace, shmSize="8Gi"))
    (shm,) = [v for v in admitted["spec"]["volumes"] if v["name"] == "shm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    probe = check_pod(namespace, shmSize="1Gi")
    await configure_adapter_workloads(cluster, admin, namespace, shm_size_limit="1Gi", probe=probe)
    await eventually_refused(policed, namespace, check_pod(namespace, shmSize="8Gi"), "at most 1Gi")
    unbounded = check_pod(namespace, shmSize="1Gi")
    unbounded["spec"]["volumes"][-1]["emptyDir"].pop("sizeLimit")
    error = await refusal(policed, pods_path(namespace), unbounded)
    assert "memory-backed emptyDir only with a sizeLimit of at most 1Gi" in error.message, error.message
    await dry_run(admin, pods_path(namespace), unbounded)


def test_the_profile_schema_refuses_what_the_policy_never_sees() -> None:
    """The CRD's own bounds (tests/integration/test_workload_crd.py holds the API server's)."""
    with pytest.raises(ValueError, match="sha256"):
        Check.model_validate(
            {"name": "c", "scriptKey": "s", "backend": "Pod", "backendActiveDeadline": "1m", "image": "x:latest"}
        )
