"""Kueue and tainted GPU Nodes on the real API server and kube-scheduler (issue 11, 2.6 and
2.7). Kueue's webhook adds a scheduling gate to a queued Pod: the API server accepts the
adapter's Pod (placed by required node affinity, never ``nodeName``) with the gate, and once
the gate is lifted kube-scheduler places it on the participant's Node, where it runs. The old
shape (``nodeName`` with a gate) is refused. On a Node tainted ``nvidia.com/gpu:NoSchedule``
the Pod runs only when the check tolerates that taint."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapter.inputs import parse_inputs
from adapter.workloads import backend_pod
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from tests.adapter_support import AdapterWorld, check
from tests.controller_support import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

GATE = {"name": "kueue.x-k8s.io/admission"}
PASS = "#!/bin/sh\necho ok\n"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


def pod_for(world: AdapterWorld, participant: int = 0) -> Obj:
    """The adapter's Pod for the Run's check 0 and ``participant``."""
    parameters = dict(zip(world.parameters(0)[::2], world.parameters(0)[1::2], strict=True))
    inputs = parse_inputs(
        run_namespace=parameters["--run-namespace"],
        run_name=parameters["--run-name"],
        run_uid=parameters["--run-uid"],
        participants_json=parameters["--participants-json"],
        snapshot=parameters["--snapshot"],
        check_index="0",
        check_json=parameters["--check-json"],
    )
    return backend_pod(inputs, participant, world.nodes[participant], "projectsignal.dev/runner:0.1.0")


async def phase(admin: KubeClient, pod: Obj, wanted: set[str]) -> Obj:
    path = resource_path("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    async def reached() -> Obj | None:
        current: Obj = await admin.get(path)
        return current if current.get("status", {}).get("phase") in wanted else None

    found: Obj = await eventually(reached, timeout=60, what=f"Pod {pod['metadata']['name']} in {wanted}")
    return found


async def test_a_queued_pod_is_accepted_gated_and_runs_on_its_node_once_admitted(
    world: AdapterWorld, admin: KubeClient
) -> None:
    await world.setup(2, {"a.sh": PASS}, [check("inv", "a.sh", workload={"kueueQueueName": "gpu-queue"})])
    body: dict[str, Any] = pod_for(world, 1)
    assert "nodeName" not in body["spec"]
    pods = resource_path("v1", "pods", world.namespace)

    # The old shape, nodeName plus Kueue's gate, is what the API server refuses.
    pinned = {**body, "metadata": {**body["metadata"], "name": "pinned"}}
    pinned["spec"] = {**body["spec"], "nodeName": world.nodes[1], "schedulingGates": [GATE]}
    pinned["spec"].pop("affinity")
    with pytest.raises(ApiError) as refused:
        await admin.create(pods, pinned)
    assert refused.value.status == 422
    assert "schedulingGates" in refused.value.message or "nodeName" in refused.value.message

    # What Kueue's webhook makes of the adapter's Pod: accepted, gated, unscheduled.
    gated = {**body, "spec": {**body["spec"], "schedulingGates": [GATE]}}
    created = await admin.create(pods, gated)
    assert created["spec"]["schedulingGates"] == [GATE]
    assert not created["spec"].get("nodeName")
    current = await admin.get(f"{pods}/{body['metadata']['name']}")
    scheduled = {c["type"]: c for c in current.get("status", {}).get("conditions", [])}.get("PodScheduled")
    assert scheduled is None or scheduled["reason"] == "SchedulingGated"
    assert not current["spec"].get("nodeName")

    # Kueue admits it: the gate goes, kube-scheduler binds it to the participant's Node, it runs.
    await admin.merge_patch(f"{pods}/{body['metadata']['name']}", {"spec": {"schedulingGates": None}})
    done = await phase(admin, created, {"Succeeded", "Failed"})
    assert done["spec"]["nodeName"] == world.nodes[1]
    assert done["status"]["phase"] == "Succeeded", done["status"]


@pytest.mark.parametrize("tolerated", [True, False], ids=["tolerated", "not-tolerated"])
async def test_a_gpu_taint_blocks_the_pod_unless_the_check_tolerates_it(
    world: AdapterWorld, admin: KubeClient, tolerated: bool
) -> None:
    workload: dict[str, Any] = {"kueueQueueName": "gpu-queue"}  # scheduled by kube-scheduler
    if tolerated:
        workload["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    await world.setup(1, {"a.sh": PASS}, [check("inv", "a.sh", workload=workload)])
    node = resource_path("v1", "nodes", name=world.nodes[0])
    taints = (await admin.get(node))["spec"].get("taints", [])
    await admin.merge_patch(node, {"spec": {"taints": [*taints, GPU_TAINT]}})
    body = pod_for(world)
    created = await admin.create(resource_path("v1", "pods", world.namespace), body)
    if tolerated:
        done = await phase(admin, created, {"Succeeded", "Failed"})
        assert (done["spec"]["nodeName"], done["status"]["phase"]) == (world.nodes[0], "Succeeded")
        return
    path = resource_path("v1", "pods", world.namespace, body["metadata"]["name"])

    async def unschedulable() -> Obj | None:
        current: Obj = await admin.get(path)
        conditions = {c["type"]: c for c in current.get("status", {}).get("conditions", [])}
        cond = conditions.get("PodScheduled")
        return current if cond and cond["status"] == "False" and cond.get("reason") == "Unschedulable" else None

    current = await eventually(unschedulable, timeout=60, what="the scheduler to refuse the tainted Node")
    message = {c["type"]: c for c in current["status"]["conditions"]}["PodScheduled"]["message"]
    assert "1 node(s) had untolerated taint(s)" in message, message
    assert not current["spec"].get("nodeName")
