"""Regression for the fault campaign's first finding (issue 14, seed 1, 52 faults: fault
``delete-workflow`` at t=134 s during a Pod check, then ``cancel``): a Run whose Workflow is
deleted while its check's Pods run waited in ``WorkloadCleanupComplete=False WorkloadsRemain`` for
ever, because the Workflow's adapter step and exit handler went with it and the controller may
not delete Pods. Now the controller submits the Workflow again; the cancelled Run's new Workflow
is stopped and its exit handler removes the Pods, evidence first, and the Run ends Canceled."""

from pathlib import Path

import pytest

from localcluster.controlplane import free_port
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest
from tests.controller_support import ControllerProcess, World, eventually, profile_body
from tests.integration.test_cancel_mid_check import SCRIPTS, backend_workloads, slow_check, step_logs, world

pytestmark = pytest.mark.asyncio(loop_scope="session")
__all__ = ["world"]  # the fixture, shared with the cancel test


async def test_a_deleted_workflow_does_not_strand_its_runs_workloads(
    world: World, admin: KubeClient, tmp_path: Path
) -> None:
    profile = f"{world.namespace}-wfdel"
    names = world.node_names(2)
    await world.add_nodes(names, requested_for=profile)
    checks = [slow_check("Pod")]
    await world.add_profile(profile_body(profile, world.namespace, 2, digest=bundle_digest(SCRIPTS, {}), checks=checks))
    controller = ControllerProcess(
        world.cluster,
        world.namespace,
        tmp_path,
        resync=2.0,
        workflow_instance_id=world.cluster.workflow_instance_id,
        metrics_port=free_port(),
    )
    await controller.start()
    try:
        runs = await eventually(world.runs, timeout=60, what=f"a Run\n{controller.logs()}")
        run: Obj = runs[0]
        uid, name = run["metadata"]["uid"], run["metadata"]["name"]

        async def check_running() -> list[Obj] | None:
            selector = f"{keys.RUN_UID_LABEL}={uid}"
            pods = (await admin.get(resource_path("v1", "pods", world.namespace), labelSelector=selector))["items"]
            live = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            return live if len(live) == 2 else None

        await eventually(check_running, timeout=120, interval=0.5, what=f"the check running\n{controller.logs()}")
        workflow_path = resource_path("argoproj.io/v1alpha1", "workflows", world.namespace, name)
        await admin.delete(workflow_path)
        path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, name)
        await admin.merge_patch(path, {"spec": {"cancel": True}})

        async def canceled() -> Obj | None:
            current: Obj = await admin.get(path)
            return current if (current.get("status") or {}).get("phase") == "Canceled" else None

        try:
            current = await eventually(canceled, timeout=180, interval=1.0, what="Canceled")
        except AssertionError as exc:
            state = {
                "run": (await admin.get(path)).get("status"),
                "left": await backend_workloads(admin, world.namespace, uid),
            }
            raise AssertionError(f"{exc}\n{state}\n{controller.logs()}\n{await step_logs(world)}") from None
        conditions = {c["type"]: c for c in current["status"]["conditions"]}
        assert conditions["WorkloadCleanupComplete"]["status"] == "True", conditions
        assert await backend_workloads(admin, world.namespace, uid) == []
        assert "submitting it again" in controller.logs()
    finally:
        controller.stop()
