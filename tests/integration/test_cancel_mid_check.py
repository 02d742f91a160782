"""Cancel during a check, through the real controller, the real Argo workflow-controller and
the adapter in its step Pods (issue 11, 2.4): ``spec.cancel`` -> the controller sets the
Workflow's ``shutdown: Stop`` -> Argo stops the running step (its executor kills the adapter)
and runs the exit handler, whose adapter persists what the interrupted check produced and
removes its Pods or MPIJobs with the same evidence-first quiescence; the Run ends ``Canceled``
with ``WorkloadCleanupComplete=True``, no backend workload left and its group still reserved
(until ``spec.release``). Here on simulated Nodes, mid-Pod-check; on real nodes, mid-Pod-check
and mid-MPIJob-check with every container proven stopped: tests/integration/test_runs_on_real_nodes.py."""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body, reserved_by
from tests.integration.test_end_to_end import install_workflow_template

pytestmark = pytest.mark.asyncio(loop_scope="session")

SCRIPTS = {"slow.sh": "#!/bin/sh\necho started\nsleep 300\n"}
MPIJOBS = ("kubeflow.org/v2beta1", "mpijobs")


@pytest.fixture
async def world(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[World]:
    w = World(cluster, admin, namespace)
    await w.setup(scripts=SCRIPTS)
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await install_workflow_template(admin, namespace)
    yield w
    await w.cleanup()
    for name in w.node_names(2):
        await cluster.remove_node(name)


def slow_check(backend: str) -> dict[str, Any]:
    check: dict[str, Any] = {
        "name": "slow",
        "scriptKey": "slow.sh",
        "backend": backend,
        "gpuCount": 1,
        "backendActiveDeadline": "5m",
    }
    if backend == "MPIJob":
        check["mpi"] = {"scope": "crossNode"}
    return check


async def step_logs(world: World) -> str:
    """The Workflow's step Pods' logs (for failure messages)."""
    assert world.cluster.kubelet is not None
    parts = []
    for pod in (await world.admin.get(resource_path("v1", "pods", world.namespace)))["items"]:
        if "workflows.argoproj.io/workflow" not in pod["metadata"].get("labels", {}):
            continue
        for container in pod["spec"]["containers"]:
            log = world.cluster.kubelet.log_path(pod, container["name"])
            text = log.read_text(errors="replace")[-2500:] if log.exists() else "(no log)"
            parts.append(f"--- {pod['metadata']['name']}/{container['name']} ---\n{text}")
    return "\n".join(parts)


async def backend_workloads(admin: KubeClient, namespace: str, uid: str) -> list[str]:
    selector = f"{keys.RUN_UID_LABEL}={uid}"
    pods = await admin.get(resource_path("v1", "pods", namespace), labelSelector=selector)
    jobs = await admin.get(resource_path(*MPIJOBS, namespace), labelSelector=selector)
    return [f"Pod/{p['metadata']['name']}" for p in pods["items"]] + [
        f"MPIJob/{j['metadata']['name']}" for j in jobs["items"]
    ]


@contextlib.asynccontextmanager
async def check_running(
    world: World, tmp_path: Path, suffix: str, checks: list[dict[str, Any]]
) -> AsyncIterator[tuple[ControllerProcess, Obj]]:
    """Two Nodes requested for a profile of ``checks``, the controller started, and its Run's
    first check's Pods running on both; the controller stops on the way out."""
    profile = f"{world.namespace}-{suffix}"
    await world.add_nodes(world.node_names(2), requested_for=profile)
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
        selector = f"{keys.RUN_UID_LABEL}={run['metadata']['uid']}"

        async def running() -> list[Obj] | None:
            pods = await world.admin.get(resource_path("v1", "pods", world.namespace), labelSelector=selector)
            live = [p for p in pods["items"] if p.get("status", {}).get("phase") == "Running"]
            return live if len(live) == 2 else None

        await eventually(running, timeout=120, interval=0.5, what=f"the check running\n{controller.logs()}")
        yield controller, run
    finally:
        controller.stop()


async def canceled(world: World, controller: ControllerProcess, run: Obj, timeout: float) -> Obj:
    """The Run once Canceled; else an error with its status, what workloads are left and the logs."""
    path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, run["metadata"]["name"])

    async def ended() -> Obj | None:
        current: Obj = await world.admin.get(path)
        return current if (current.get("status") or {}).get("phase") == "Canceled" else None

    try:
        return await eventually(ended, timeout=timeout, interval=1.0, what="Canceled")
    except AssertionError as exc:
        workflow: Obj | None = None
        with contextlib.suppress(ApiError):
            workflow = await world.admin.get(
                resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, world.namespace, run["metadata"]["name"])
            )
        state = {
            "run": (await world.admin.get(path)).get("status"),
            "workflow": {k: ((workflow or {}).get("status") or {}).get(k) for k in ("phase", "message")},
            "left": await backend_workloads(world.admin, world.namespace, run["metadata"]["uid"]),
        }
        raise AssertionError(f"{exc}\n{state}\n{controller.logs()}\n{await step_logs(world)}") from None


@pytest.mark.parametrize("backend", ["Pod"])
async def test_cancel_mid_check_ends_canceled_with_every_workload_removed(
    world: World, admin: KubeClient, tmp_path: Path, backend: str
) -> None:
    checks = [slow_check(backend), {**slow_check("Pod"), "name": "never"}]
    async with check_running(world, tmp_path, "cancel", checks) as (controller, run):
        uid = run["metadata"]["uid"]
        path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, run["metadata"]["name"])
        await admin.merge_patch(path, {"spec": {"cancel": True}})
        current = await canceled(world, controller, run, timeout=120)
        conditions = {c["type"]: c for c in current["status"]["conditions"]}
        assert conditions["WorkloadCleanupComplete"]["status"] == "True", conditions
        assert await backend_workloads(admin, world.namespace, uid) == []
        # The adapter removed them itself, evidence first: the interrupted check's evidence.
        stored = await admin.get(
            resource_path("v1", "configmaps", world.namespace, keys.check_evidence_name(run["metadata"]["name"], 0))
        )
        evidence, _ = decode_document(stored, CHECK_EVIDENCE_SCHEMA)
        assert evidence["cleanup"]["state"] == "Complete"
        assert evidence["verdict"] == "Inconclusive"
        assert evidence["reason"].startswith("Interrupted:")
        # The second check never started; the group stays reserved until spec.release.
        configmaps = (await admin.get(resource_path("v1", "configmaps", world.namespace)))["items"]
        results = keys.check_results_name(run["metadata"]["name"], 1)
        assert results not in [c["metadata"]["name"] for c in configmaps]
        for node in await world.nodes(world.node_names(2)):
            assert reserved_by(node) == uid
