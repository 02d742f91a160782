"""Issue 43, item 2, on REAL NODES (containerd, runc, a real kubelet each; tests/realnode_support.py,
with Argo's real workflow-controller): Signal's controller and a busy real Node.

* ``drain``: a real Pod on ``node-1`` (its container running in the node's containerd) whose
  PodDisruptionBudget allows no disruption. The Run ends ``Inconclusive`` (``DrainTimedOut``)
  naming that Pod, and nothing else changes: the same Pod (uid) still runs, its container still
  in containerd, not being deleted; the budget is as it was; no Workflow; ``node-2`` untouched.
* ``waitForIdle``: a real Pod holding all of ``node-1``'s GPUs (real nodes advertise simulated
  ``nvidia.com/gpu`` in their status capacity, localcluster/realnode/pool.py, and the real
  kubelet accounts for it). The Run waits ``Admitted`` naming it, and no container of the Run
  runs; once the Pod is deleted the check starts, runs on ``node-1`` and passes.

Run under ``flock /tmp/signal-realnode.lock`` (host network state is shared).
"""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localcluster.controlplane import free_port
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.realnode.images import TEST_IMAGE
from shared import keys
from shared.digests import bundle_digest
from tests.adapter_support import check
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by
from tests.realnode_support import (
    RealCluster,
    keep_cluster_dir,
    prepare_namespace,
    running_containers,
    start_real_cluster,
    stop_real_cluster,
)

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(900)]
NODE, OTHER = "node-1", "node-2"
TERMINAL = {"Succeeded", "Failed", "Inconclusive", "Canceled"}
SCRIPTS = {"inventory.sh": '#!/bin/sh\necho "gpus on $SIGNAL_NODE_NAME"\n'}


@pytest.fixture(scope="module")
async def real() -> AsyncIterator[RealCluster]:
    started = await start_real_cluster(keep_cluster_dir(), argo=True)
    try:
        yield started
    finally:
        await stop_real_cluster(started)


def holder(name: str, *, gpus: str | None = None) -> Obj:
    container: Obj = {"name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never", "args": ["sleep", "600"]}
    if gpus is not None:
        container["resources"] = {"requests": {keys.GPU_RESOURCE: gpus}, "limits": {keys.GPU_RESOURCE: gpus}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [container],
        },
    }


async def start_holder(admin: KubeClient, namespace: str, body: Obj) -> Obj:
    async def created() -> Obj | None:
        try:
            return await admin.create(resource_path("v1", "pods", namespace), body)
        except ApiError as exc:
            if exc.status == 403 and "serviceaccount" in str(exc).lower():
                return None  # the namespace's default ServiceAccount is not there yet
            raise

    await eventually(created, what="the holder Pod created")
    path = resource_path("v1", "pods", namespace, body["metadata"]["name"])

    async def running() -> Obj | None:
        pod = await admin.get(path)
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    pod: Obj = await eventually(running, timeout=120, what=f"Pod {namespace}/{body['metadata']['name']} Running")
    return pod


@contextlib.asynccontextmanager
async def busy_signal(real: RealCluster, tmp_path: Path, policy: str, timeout: int) -> AsyncIterator[tuple[World, str]]:
    """Signal's controller for a one-Node profile with ``busyNodes``; ``node-1`` requested by the
    caller. On the way out the Runs are cancelled and released and ``node-1`` waited for."""
    namespace = await prepare_namespace(real.admin, argo=True)
    world = World(real.cluster, real.admin, namespace)
    await world.setup(scripts=SCRIPTS)
    profile = f"{namespace}-busy"
    body = profile_body(
        profile,
        namespace,
        1,
        digest=bundle_digest(SCRIPTS, {}),
        checks=[check("inventory", "inventory.sh", gpuCount=1, deadline="90s")],
        selector={"matchLabels": {"pool": "gpu"}},
    )
    body["spec"]["busyNodes"] = {"policy": policy, "timeoutSeconds": timeout}
    await world.add_profile(body)
    controller = ControllerProcess(
        real.cluster,
        namespace,
        tmp_path,
        resync=1.0,
        policies=False,
        workflow_instance_id=real.cluster.workflow_instance_id,
        metrics_port=free_port(),
    )
    await real.cluster.create_namespace(f"{namespace}-work")
    try:
        await controller.start()
        yield world, profile
    finally:
        try:
            for run in await world.runs():
                done = (run.get("status") or {}).get("phase") in TERMINAL
                path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, run["metadata"]["name"])
                await real.admin.merge_patch(
                    path, {"spec": {"release": True} if done else {"cancel": True, "release": True}}
                )

            async def free() -> bool:
                (node,) = await world.nodes([NODE])
                return reserved_by(node) is None

            await eventually(free, timeout=180, interval=1.0, what=f"{NODE} released\n{controller.logs()}")
        finally:
            controller.stop()
            unlabel = {"metadata": {"labels": dict.fromkeys([keys.CERTIFY_LABEL, keys.certified_label(profile)])}}
            await real.admin.merge_patch(resource_path("v1", "nodes", name=NODE), unlabel)
            await world.cleanup()
            await real.cluster.delete_namespace(f"{namespace}-work")
            await real.cluster.delete_namespace(namespace)


async def request(real: RealCluster, profile: str) -> None:
    labels = {"metadata": {"labels": {keys.CERTIFY_LABEL: profile, "pool": "gpu"}}}
    await real.admin.merge_patch(resource_path("v1", "nodes", name=NODE), labels)


async def the_run(world: World, phases: set[str], timeout: float, what: str) -> Obj:
    async def found() -> Obj | None:
        runs = await world.runs()
        return runs[0] if runs and (runs[0].get("status") or {}).get("phase") in phases else None

    run: Obj = await eventually(found, timeout=timeout, interval=0.5, what=what)
    return run


async def test_drain_on_real_nodes_a_pod_whose_budget_allows_no_disruption_ends_the_run_inconclusive_naming_it(
    real: RealCluster, tmp_path: Path
) -> None:
    async with busy_signal(real, tmp_path, "drain", 20) as (world, profile):
        work = f"{world.namespace}-work"
        pdb_path = resource_path("policy/v1", "poddisruptionbudgets", work)
        pdb = await real.admin.create(
            pdb_path,
            {
                "metadata": {"name": "no-disruption"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}},
            },
        )
        pod = await start_holder(real.admin, work, holder("db"))
        before = [c for c in await running_containers(real, work) if c.pod == "db"]
        assert before, "the holder's containers in containerd"
        assert {c.node for c in before} == {NODE}, before
        (other_before,) = await world.nodes([OTHER])

        await request(real, profile)
        run = await the_run(world, TERMINAL, 180, "the drain Run to end")
        status = run["status"]
        assert (status["phase"], status["reason"]) == ("Inconclusive", "DrainTimedOut"), status
        assert f"{work}/db (eviction refused" in status["message"], status["message"]
        # Nothing else changed: the same Pod runs on, its container in node-1's containerd.
        now = await real.admin.get(resource_path("v1", "pods", work, "db"))
        assert now["metadata"]["uid"] == pod["metadata"]["uid"]
        assert not now["metadata"].get("deletionTimestamp")
        assert now["status"]["phase"] == "Running"
        assert [c for c in await running_containers(real, work) if c.pod == "db"] == before
        assert (await real.admin.get(f"{pdb_path}/no-disruption"))["spec"] == pdb["spec"]
        workflows = await real.admin.get(resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, world.namespace))
        assert workflows["items"] == []
        (other,) = await world.nodes([OTHER])
        assert other["spec"].get("taints") == other_before["spec"].get("taints")
        assert reserved_by(other) is None
        await real.admin.delete(resource_path("v1", "pods", work, "db"), {"gracePeriodSeconds": 0})


async def test_wait_for_idle_on_real_nodes_the_check_starts_when_the_pod_holding_the_gpus_ends(
    real: RealCluster, tmp_path: Path
) -> None:
    async with busy_signal(real, tmp_path, "waitForIdle", 300) as (world, profile):
        work = f"{world.namespace}-work"
        (node,) = await world.nodes([NODE])
        gpus = node["status"]["allocatable"][keys.GPU_RESOURCE]
        assert int(gpus) >= 1, node["status"]["allocatable"]
        await start_holder(real.admin, work, holder("trainer", gpus=gpus))

        await request(real, profile)

        async def waiting() -> Obj | None:
            runs = await world.runs()
            conditions = {c["type"]: c for c in (runs[0].get("status") or {}).get("conditions") or []} if runs else {}
            return runs[0] if "NodesIdle" in conditions else None

        held = await eventually(waiting, timeout=120, interval=0.5, what="the Run waiting for the GPUs")
        assert held["status"]["phase"] == "Admitted", held["status"]
        idle = next(c for c in held["status"]["conditions"] if c["type"] == "NodesIdle")
        assert (idle["status"], idle["reason"]) == ("False", "WaitingForIdle"), idle
        assert f"held by {work}/trainer ({gpus})" in idle["message"], idle["message"]
        assert not [c for c in await running_containers(real, world.namespace) if c.node == NODE]

        await real.admin.delete(resource_path("v1", "pods", work, "trainer"))
        run = await the_run(world, TERMINAL, 300, "the Run to finish once the GPUs are free")
        status = run["status"]
        assert status["phase"] == "Succeeded", status
        assert status["checkVerdicts"] == [{"name": "inventory", "verdict": "Pass"}]
        idle = next(c for c in status["conditions"] if c["type"] == "NodesIdle")
        assert idle["status"] == "True", idle
