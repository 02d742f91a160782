"""Regression for the fault campaign's first finding (issue 14, seed 1, 52 faults: fault
``delete-workflow`` at t=134 s during a Pod check, then ``cancel``): a Run whose Workflow is
deleted while its check's Pods run waited in ``WorkloadCleanupComplete=False WorkloadsRemain`` for
ever, because the Workflow's adapter step and exit handler went with it and the controller may
not delete Pods. Now the controller submits the Workflow again; the cancelled Run's new Workflow
is stopped and its exit handler removes the Pods, evidence first, and the Run ends Canceled."""

from pathlib import Path

import pytest

from localcluster.kube import KubeClient, resource_path
from shared import keys
from tests.controller_support import World, eventually
from tests.integration.test_cancel_mid_check import backend_workloads, canceled, check_running, slow_check, world

pytestmark = pytest.mark.asyncio(loop_scope="session")
__all__ = ["world"]  # the fixture, shared with the cancel test


async def test_a_deleted_workflow_does_not_strand_its_runs_workloads(
    world: World, admin: KubeClient, tmp_path: Path
) -> None:
    async with check_running(world, tmp_path, "wfdel", [slow_check("Pod")]) as (controller, run):
        uid, name = run["metadata"]["uid"], run["metadata"]["name"]
        await admin.delete(resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, world.namespace, name))
        path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, name)
        await admin.merge_patch(path, {"spec": {"cancel": True}})
        current = await canceled(world, controller, run, timeout=180)
        conditions = {c["type"]: c for c in current["status"]["conditions"]}
        assert conditions["WorkloadCleanupComplete"]["status"] == "True", conditions
        assert await backend_workloads(admin, world.namespace, uid) == []
        assert "submitting it again" in controller.logs()


async def test_a_finished_workflow_that_left_workloads_is_replaced_to_remove_them(
    world: World, admin: KubeClient, tmp_path: Path
) -> None:
    """Regression for the campaign's seed 4 (issue 14): the adapter was killed mid-check and the
    exit handler's sweep failed in an API outage, so the Workflow finished with the check's Pods
    left behind, and nothing removed them: two Runs waited in WorkloadsRemain for ever. Here
    the Workflow is terminated (Terminate skips the exit handler; Argo kills the adapter), which
    leaves the same state deterministically. The controller replaces the finished Workflow and
    the new one's adapter removes the Pods; the cancelled Run ends Canceled."""
    async with check_running(world, tmp_path, "strand", [slow_check("Pod")]) as (controller, run):
        uid, name = run["metadata"]["uid"], run["metadata"]["name"]
        workflow_path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, world.namespace, name)
        await admin.merge_patch(workflow_path, {"spec": {"shutdown": "Terminate"}})

        path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, name)

        async def replaced() -> bool:
            conditions = ((await admin.get(path)).get("status") or {}).get("conditions") or []
            return any(c["type"] == "WorkflowResubmitted" and c["status"] == "True" for c in conditions)

        await eventually(replaced, timeout=120, interval=0.5, what=f"the Workflow replaced\n{controller.logs()}")
        await admin.merge_patch(path, {"spec": {"cancel": True}})
        current = await canceled(world, controller, run, timeout=180)
        conditions = {c["type"]: c for c in current["status"]["conditions"]}
        assert conditions["WorkloadCleanupComplete"]["status"] == "True", conditions
        assert conditions["WorkflowResubmitted"]["reason"] == "StrandedWorkloads", conditions
        assert await backend_workloads(admin, world.namespace, uid) == []
        assert "left backend workloads; deleting it to submit it again" in controller.logs()
