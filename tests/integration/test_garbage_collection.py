"""Acceptance 4: the real garbage collector removes dependents of a foreground-deleted owner."""

from localcluster.kube import ApiError, KubeClient, resource_path
from tests.builders import run_manifest
from tests.controller_support import eventually

API = "projectsignal.dev/v1alpha1"


async def test_foreground_deletion_of_a_run_removes_its_configmap(admin: KubeClient, namespace: str) -> None:
    runs = resource_path(API, "certificationruns", namespace)
    run = await admin.create(runs, run_manifest("owner"))
    owner = {
        "apiVersion": API,
        "kind": "CertificationRun",
        "name": "owner",
        "uid": run["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    cms = resource_path("v1", "configmaps", namespace)
    await admin.create(cms, {"metadata": {"name": "owned", "ownerReferences": [owner]}, "data": {"a": "b"}})
    await admin.delete(f"{runs}/owner", {"propagationPolicy": "Foreground"})
    gone = {"owned": False, "owner": False}

    async def both_gone() -> bool:
        for name, path in (("owned", f"{cms}/owned"), ("owner", f"{runs}/owner")):
            try:
                await admin.get(path)
            except ApiError as exc:
                assert exc.status == 404
                gone[name] = True
        return all(gone.values())

    await eventually(both_gone, timeout=60, what=f"the owner and its dependent deleted: {gone}")
