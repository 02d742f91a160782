"""Issue 44 §1: the exact change an operator makes to run RDMA checks, deploy/components/rdma, on
the real API server. As installed, the NCCL-over-InfiniBand example's workloads
(examples/nccl-ib/profile.yaml, which adds IPC_LOCK) are refused twice: by the adapter's policy
(no capability allowed) for the MPIJob, and by Pod Security ``restricted`` for the Pods the MPI
operator would make from it. With the component rendered into deploy/ (kustomize), the profile is
admitted, the adapter's MPIJob is admitted, and so are its Pods, while audit and warn stay
``restricted`` and every other rule of the policy still holds (a privileged worker is refused)."""

import os
from pathlib import Path
from typing import Any

import yaml

from adapter.inputs import Inputs
from adapter.mpispec import mpijob
from localcluster.install import bind_policy_to
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.profile import CertificationProfile
from shared.run import Participant
from tests.controller_support import eventually
from tests.integration.test_adapter_admission_policy import (
    ADMISSION,
    RUNNER,
    dry_run,
    mpijobs_path,
    pods_path,
    policed,
    refusal,
)
from tests.integration.test_deploy_manifests import DEPLOY, kustomize

__all__ = ["policed"]

REPO = DEPLOY.parent
COMPONENT = DEPLOY / "components" / "rdma"
PROFILE = REPO / "examples" / "nccl-ib" / "profile.yaml"
PSA = "pod-security.kubernetes.io/"


def rendered(tmp_path: Path) -> list[Obj]:
    """deploy/base with the component, as an operator's overlay names it."""
    overlay = tmp_path / "rdma-overlay"
    overlay.mkdir()
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "base", overlay)],
        "components": [os.path.relpath(COMPONENT, overlay)],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return kustomize(overlay)


def nccl_inputs(namespace: str) -> Inputs:
    profile = CertificationProfile.model_validate(yaml.safe_load(PROFILE.read_text()))
    (check,) = profile.spec.checks
    participants = tuple(
        Participant.model_validate({"index": i, "nodeName": f"gpu-{i}", "nodeUID": f"uid-{i}"}) for i in range(2)
    )
    return Inputs(namespace, "r-nccl", "11111111-2222-3333-4444-555555555555", participants, "r-nccl-scripts", 0, check)


def worker_pod(job: Obj, namespace: str) -> Obj:
    """A Pod as the MPI operator makes it from the worker template (its own identity)."""
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    spec: Any = {k: v for k, v in template["spec"].items() if k != "affinity"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nccl-worker-0", "namespace": namespace},
        "spec": spec,
    }


def test_the_component_changes_exactly_the_capability_and_the_enforce_level(tmp_path: Path) -> None:
    docs = rendered(tmp_path)
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels[f"{PSA}enforce"] == "privileged"
    assert labels[f"{PSA}audit"] == labels[f"{PSA}warn"] == "restricted"
    (policy,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "signal-adapter-workloads"
    ]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["capabilities"] == "'IPC_LOCK'"
    assert variables["hostNetwork"] == "false"
    base = kustomize(DEPLOY / "base")
    (base_policy,) = [
        d
        for d in base
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "signal-adapter-workloads"
    ]
    assert {v["name"]: v["expression"] for v in base_policy["spec"]["variables"]} == {**variables, "capabilities": "''"}


async def test_the_nccl_example_is_admissible_with_the_component_and_not_without(
    policed: KubeClient, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    # The profile itself (CRD validation on the real API server).
    profile = yaml.safe_load(PROFILE.read_text())
    profile["metadata"]["name"] = f"nccl-ib-{namespace}"
    path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL)
    await admin.request("POST", path, body=profile, params={"dryRun": "All"})
    job = mpijob(nccl_inputs(namespace), RUNNER)
    # As installed: the policy allows no capability, Pod Security `restricted` admits none.
    await admin.merge_patch(
        resource_path("v1", "namespaces", name=namespace),
        {"metadata": {"labels": {f"{PSA}enforce": "restricted", f"{PSA}enforce-version": "latest"}}},
    )
    error = await refusal(policed, mpijobs_path(namespace), job)
    assert "add only configured ones ([]" in error.message, error.message
    error = await refusal(admin, pods_path(namespace), worker_pod(job, namespace))
    assert "IPC_LOCK" in error.message, error.message
    # With the component: its policy and its Namespace labels.
    docs = rendered(tmp_path)
    (labels,) = [d["metadata"]["labels"] for d in docs if d["kind"] == "Namespace"]
    await admin.merge_patch(
        resource_path("v1", "namespaces", name=namespace),
        {"metadata": {"labels": {k: v for k, v in labels.items() if k.startswith(PSA)}}},
    )
    (policy,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "signal-adapter-workloads"
    ]
    bind_policy_to(policy, namespace)
    name = policy["metadata"]["name"]
    live = await admin.get(resource_path(ADMISSION, "validatingadmissionpolicies", name=name))
    policy["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    await admin.request("PUT", resource_path(ADMISSION, "validatingadmissionpolicies", name=name), body=policy)
    refusals: list[str] = []

    async def in_force() -> Obj | None:
        try:
            return await dry_run(policed, mpijobs_path(namespace), job)
        except ApiError as error:
            refusals.append(str(error))
            return None

    async def why() -> str:
        return refusals[-1] if refusals else ""

    admitted = await eventually(in_force, timeout=30, what="the component's policy in force", explain=why)
    worker = admitted["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    await dry_run(admin, pods_path(namespace), worker_pod(job, namespace))
    # Everything else stays closed.
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"][
        "add"
    ] = ["IPC_LOCK", "NET_ADMIN"]
    error = await refusal(policed, mpijobs_path(namespace), job)
    assert "add only configured ones ([IPC_LOCK]" in error.message, error.message
