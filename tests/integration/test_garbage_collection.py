"""Acceptance 4: the real garbage collector removes dependents of a foreground-deleted owner."""

import asyncio
import time

from localcluster.kube import ApiError, KubeClient, resource_path
from tests.builders import run_manifest

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
    deadline = time.monotonic() + 60
    gone = {"owned": False, "owner": False}
    while time.monotonic() < deadline and not all(gone.values()):
        for name, path in (("owned", f"{cms}/owned"), ("owner", f"{runs}/owner")):
            try:
                await admin.get(path)
            except ApiError as exc:
                assert exc.status == 404
                gone[name] = True
        await asyncio.sleep(0.2)
    assert gone == {"owned": True, "owner": True}
